"""Cross-site requests from a real browser (Debian's chromium, driven by Playwright).

The API (noauth, as ``fornace api`` serves it) holds a deployed environment.
A page on another origin -- a second tiny HTTP server on another port -- does
what any site the operator visits could do without a CORS preflight: an HTML
form posting ``text/plain`` to ``actions/uninstall`` (also from a sandboxed
frame: ``Origin: null``), ``fetch`` in ``no-cors`` mode (a text body, no body,
a Blob without a type, no referrer) and a beacon.  Every one must be refused
(403) and nothing in the store changed; a script on the API's own origin
still works.
"""
from __future__ import annotations

import contextlib
import http.server
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator

import pytest

from apikit import free_port, make_api, web_server
from browserkit import chromium
from fornace.common import contract
from serving import serving
from waiting import wait_for

STEP_TIMEOUT_MS = 30_000

ATTACK_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>cute cats</title></head><body>
<iframe name="sink" style="display:none"></iframe>
<form id="uninstall" method="POST" enctype="text/plain" target="sink"
      action="{api}/environments/{env}/actions/uninstall">
  <input type="hidden" name='{{"x": "' value='"}}'>
</form>
<iframe sandbox="allow-forms allow-scripts" style="display:none" srcdoc="
  <form method=POST enctype=text/plain action={api}/environments/{env}/actions/uninstall>
  <input name=x value=y></form><script>document.forms[0].submit()</script>"></iframe>
<script>
const api = "{api}", env = "{env}";
document.getElementById("uninstall").submit();
navigator.sendBeacon(api + "/environments", '{{"name": "beacon"}}');
Promise.allSettled([
  fetch(api + "/environments", {{method: "POST", mode: "no-cors",
        headers: {{"Content-Type": "text/plain"}}, body: '{{"name": "planted"}}'}}),
  fetch(api + "/environments/" + env + "/configure", {{method: "POST", mode: "no-cors"}}),
  fetch(api + "/environments/" + env + "/abandon",
        {{method: "POST", mode: "no-cors", body: new Blob(["{{}}"])}}),
  fetch(api + "/environments/" + env + "/actions/uninstall",
        {{method: "POST", mode: "no-cors", referrerPolicy: "no-referrer",
         headers: {{"Content-Type": "text/plain"}}, body: "{{}}"}}),
]).then(() => {{ window.attackDone = true; }});
</script></body></html>
"""
ATTACKS = 7   # two forms (one in a sandbox: Origin null), a beacon and four fetches


@dataclass
class Seen:
    """What reached the API: (method, path, Origin header, status) of each request."""

    requests: list[tuple[str, str, str | None, int]] = field(default_factory=list)

    def recording(self, app: Any) -> Any:
        async def recorder(scope: dict, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            origin = dict(scope["headers"]).get(b"origin")

            async def send_and_see(message: dict) -> None:
                if message["type"] == "http.response.start":
                    self.requests.append((scope["method"], scope["path"],
                                          origin.decode() if origin else None,
                                          message["status"]))
                await send(message)
            await app(scope, receive, send_and_see)
        return recorder

    def unsafe(self) -> list[tuple[str, str, str | None, int]]:
        return [r for r in self.requests if r[0] != "GET"]


@contextlib.contextmanager
def attack_site(api_url: str, env_id: str) -> Iterator[str]:
    """Another origin (a port of its own) serving the attacking page at ``/``."""
    page = ATTACK_PAGE.format(api=api_url, env=env_id).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:   # noqa: N802 (http.server's naming)
            status = 200 if self.path == "/" else 404
            self.send_response(status)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page) if status == 200 else 0))
            self.end_headers()
            if status == 200:
                self.wfile.write(page)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    thread = threading.Thread(target=server.serve_forever, name="attack-site", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def deployed_environment(api) -> str:
    client = api.client
    env_id = client.post("/environments", json={"name": "victim"}).json()["id"]
    session = client.post(f"/environments/{env_id}/configure").json()["id"]
    assert client.post(f"/environments/{env_id}/services", json=web_server(),
                       headers={"X-Configuration-Session": session}).status_code == 200
    assert client.post(f"/environments/{env_id}/sessions/{session}/deploy").status_code == 200
    body, message_id = api.published.tasks[-1]
    api.store.results.apply(contract.result_body(body), message_id)
    return env_id


def snapshot(api, env_id: str) -> dict[str, Any]:
    """What the attack must not change: environments, the victim's jobs and sessions."""
    from sqlalchemy import func, select

    from fornace.common.db.models import ConfigSession
    with api.store.sessions() as db:
        sessions = db.scalar(select(func.count()).select_from(ConfigSession).where(
            ConfigSession.environment_id == env_id))
    env = api.client.get(f"/environments/{env_id}").json()
    return {"environments": [e["name"] for e in
                             api.client.get("/environments").json()["environments"]],
            "status": env["status"], "version": env["version"], "sessions": sessions,
            "jobs": [j["action"] for j in
                     api.client.get(f"/environments/{env_id}/jobs").json()["jobs"]],
            "tasks": len(api.published.tasks)}


@pytest.fixture
def browser():
    with chromium() as launched:
        yield launched


def test_a_page_on_another_origin_cannot_change_anything(browser, tmp_path):
    api = make_api(f"sqlite:///{tmp_path / 'xo-browser.sqlite'}")
    env_id = deployed_environment(api)
    before = snapshot(api, env_id)
    assert before == {"environments": ["victim"], "status": "ready", "version": 1,
                      "sessions": 1, "jobs": ["deploy"], "tasks": 1}
    seen = Seen()
    with serving(seen.recording(api.client.app)) as api_url, \
            attack_site(api_url, env_id) as attacker:
        page = browser.new_page()
        page.goto(attacker + "/")
        page.wait_for_function("() => window.attackDone === true", timeout=STEP_TIMEOUT_MS)
        wait_for(lambda: len(seen.unsafe()) >= ATTACKS,
                 f"the {ATTACKS} cross-site requests to reach the API", timeout=30,
                 explain=lambda: f"seen: {seen.requests}")

        attempts = seen.unsafe()
        assert len(attempts) == ATTACKS, attempts
        assert {(method, path) for method, path, _, _ in attempts} == {
            ("POST", f"/environments/{env_id}/actions/uninstall"),
            ("POST", "/environments"), ("POST", f"/environments/{env_id}/configure"),
            ("POST", f"/environments/{env_id}/abandon")}
        assert {origin for _, _, origin, _ in attempts} == {attacker, "null"}
        assert [status for _, _, _, status in attempts] == [403] * ATTACKS, attempts
        assert snapshot(api, env_id) == before

        # the API's own pages (e.g. /docs) still post JSON; a form type is still refused
        page.goto(api_url + f"/environments/{env_id}")
        statuses = page.evaluate("""async () => {
            const post = (type, body) => fetch("/environments", {method: "POST",
                headers: {"Content-Type": type}, body}).then(r => r.status);
            return [await post("application/json", '{"name": "same-origin"}'),
                    await post("text/plain", '{"name": "plain"}')];
        }""")
        assert statuses == [200, 415]
        assert snapshot(api, env_id)["environments"] == ["victim", "same-origin"]
