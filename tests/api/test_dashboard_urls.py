"""The dashboard's links, form actions and redirects: ids and names quoted.

An id is data: ``../../../../packages/new?x=`` must stay one path segment of
the link it is in (else Edit leads to another page), and a control character
never goes raw into an ``href`` or a ``Location``.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from apikit import web_server
from fornace.api.dashboard import urls
from test_dashboard import DASH, create_env
from test_dashboard import api, browser  # noqa: F401 -- the fixtures

TEMPLATES = Path(urls.__file__).parent / "templates"
HOSTILE = ["../../../../packages/new?x=", "a\x00b", "a b#c&d=e"]


def links(page: str) -> list[str]:
    return re.findall(r'(?:href|action|data-live-url)="([^"]*)"', page)


def test_service_ids_stay_one_segment_of_their_links(api, browser):
    """The API refuses such ids at the door (:mod:`fornace.common.names`); one
    stored before that rule (written here into the session) is still quoted."""
    from fornace.common.db.models import ConfigSession

    env_id = create_env(browser)
    session = api.client.post(f"/environments/{env_id}/configure").json()["id"]
    for number in range(len(HOSTILE)):
        added = api.client.post(f"/environments/{env_id}/services/",
                                json=web_server(f"site{number}", id=f"site{number}"),
                                headers={"X-Configuration-Session": session})
        assert added.status_code == 200, added.text
    with api.store.sessions() as db, db.begin():
        stored = db.get(ConfigSession, session)
        description = json.loads(json.dumps(stored.description))
        for service in description["services"]:
            service["id"] = HOSTILE[int(service["id"][len("site"):])]
        stored.description = description
    page = browser.get(f"/environments/{env_id}")
    for service_id in HOSTILE:
        quoted = urls.path(service_id)[1:]
        for action in ("edit", "delete"):
            assert f'href="{DASH}/environments/{env_id}/services/{quoted}/{action}"' in page
    assert "\x00" not in "".join(links(page))
    assert not [link for link in links(page) if "/packages/new" in link]


def test_path_quotes_segments_query_values_and_the_anchor():
    assert urls.path() == "/"
    assert urls.path("environments", "../x?y=1", "jobs") == "/environments/..%2Fx%3Fy%3D1/jobs"
    assert urls.path("a\x00", "b c") == "/a%00/b%20c"
    assert urls.path("deployments", kind="a&b=c#", env="é/", none=None) == \
        "/deployments?kind=a%26b%3Dc%23&env=%C3%A9/"
    assert urls.path("x", anchor='task-"1"') == "/x#task-%221%22"


def test_the_login_redirect_keeps_the_page_as_one_query_value():
    """The page a login goes back to is one quoted query value: an ``&`` of
    the path does not start another parameter."""
    from starlette.requests import Request
    from fornace.api.dashboard.app import _to_login

    page = DASH + "/environments/a&next=//evil.example"
    request = Request({"type": "http", "method": "GET", "path": page, "root_path": DASH,
                       "headers": [], "query_string": b""})
    location = _to_login(request, "").headers["location"]
    assert location == f"{DASH}/login?next={DASH}/environments/a%2526next%253D//evil.example"
    assert parse_qs(urlsplit(location).query) == {
        "next": [f"{DASH}/environments/a%26next%3D//evil.example"]}


@pytest.mark.parametrize("target", ["//evil.example/", "/dashboard/\t/evil", "/dashboard\\x",
                                    "https://evil.example/dashboard/", "/dashboard/a\x00b"])
def test_the_login_goes_back_to_dashboard_paths_only(api, browser, target):
    answer = browser.post("/login", {"tenant": "t1", "user": "u1", "next": target})
    assert answer.status_code == 303
    assert answer.headers["location"] == DASH + "/"


def test_the_login_goes_back_to_a_quoted_page(api, browser):
    answer = browser.post("/login", {"tenant": "t1", "user": "u1",
                                     "next": DASH + "/environments/a%2Fb?x=%26"})
    assert answer.headers["location"] == DASH + "/environments/a%2Fb?x=%26"


_DYNAMIC = re.compile(r'(?<=\s)(?:href|action|src|data-live-url)="([^"]*\{\{[^"]*)"')
_FINE = [r"\{\{ url\(.*\) \}\}",                                     # the helper
         r"\{\{ url\(.*\) if .* else url\(.*\) \}\}",
         r"\{\{ (?:base|env_url|package_url|base_url) \}\}[a-z0-9/._=?-]*",  # constant paths
         r"\{\{ base \}\}/[a-z]*\{\{ listing\.link\(.*\) \}\}",        # urlencoded query
         r"\{\{ base_url \}\}\{\{ listing\.link\(.*\) \}\}",
         r"\{\{ base \}\}/\{\{ '\?all_tenants=1' if every_tenant else '' \}\}",
         r"#[A-Za-z-]*\{\{ [a-z.]+ \}\}",                             # in-page anchors
         r"\{\{ url \}\}"]                                             # url_cell: http(s) only


def test_every_template_builds_its_urls_with_the_helper():
    wrong = []
    for template in sorted(TEMPLATES.glob("*.html")):
        for value in _DYNAMIC.findall(template.read_text()):
            if not any(re.fullmatch(pattern, value) for pattern in _FINE):
                wrong.append(f"{template.name}: {value}")
    assert wrong == []
    sets = re.findall(r"\{% set (\w+_url) = (.*?) %\}",
                      "".join(t.read_text() for t in TEMPLATES.glob("*.html")))
    assert sets and all(value.startswith("url(") for _, value in sets), sets
