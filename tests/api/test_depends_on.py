"""``dependsOn`` names services of the same environment: an edit that makes it
name one that is not there is a 400; removing a service takes it out of the
others' ``dependsOn``."""
from __future__ import annotations

from test_pins import api, environment  # noqa: F401  (the fixture)


def test_depends_on_must_name_services_of_the_environment(api):
    env_id = environment(api, "deps")
    session = api.client.post(f"/environments/{env_id}/configure").json()["id"]
    headers = {"X-Configuration-Session": session}
    services = f"/environments/{env_id}/services"

    def add(name: str, **fields):
        return api.client.post(services, headers=headers, json={
            "type": "linuxWebServer", "name": name, "port": 8080,
            "osImage": {"name": "local", "type": "linux"}, "units": [{}], **fields})
    db = add("db")
    assert db.status_code == 200, db.text
    wrong = add("web", dependsOn=["nope"])
    assert wrong.status_code == 400
    assert "service web: dependsOn names no service of the environment: 'nope'" in wrong.text
    web = add("web", dependsOn=[db.json()["id"]])
    assert web.status_code == 200, web.text
    # removing what web depends on takes it out of web's dependsOn
    assert api.client.delete(f"{services}/{db.json()['id']}", headers=headers).status_code == 200
    web_now = api.client.get(f"{services}/{web.json()['id']}", headers=headers).json()
    assert web_now["dependsOn"] == []
