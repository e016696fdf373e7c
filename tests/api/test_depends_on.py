"""``dependsOn`` names services of the same environment: an edit that makes it
name one that is not there (or removes one that others depend on) is a 400."""
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
    # removing what web depends on is refused, naming the dependency
    refused = api.client.delete(f"{services}/{db.json()['id']}", headers=headers)
    assert refused.status_code == 400 and "service web: dependsOn" in refused.text
    assert api.client.delete(f"{services}/{web.json()['id']}", headers=headers).status_code == 200
    assert api.client.delete(f"{services}/{db.json()['id']}", headers=headers).status_code == 200
