"""The dashboard's workflow package pages (in process, SQLite): the list (the
public packages and the project's, filtered by name), the upload form (a
refused package comes back with each problem as file:line, the public
checkbox for the cloud admin alone), a package's page and its download, the
deletion through a confirmation page (refused while an environment uses the
package), and what a reader is not shown.  The browser test at the end
takes screenshots of the list, a package and the form with its problems.
"""
from __future__ import annotations

import hashlib
import html
import os
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from apikit import Api, Published, make_api
from browserkit import chromium, log_in, overflow
from packagekit import package_files, tar_of, zip_of
from serving import serving
from test_dashboard import DASH, OWN, Browser
from fornace.api.app import create_app
from fornace.api.auth import NoAuth
from fornace.api.dashboard import create_dashboard
from fornace.api.dashboard.packagepages import size_text
from fornace.api.errors import Unauthorized
from fornace.api.stores.jobs import Jobs
from fornace.api.packages.store import Packages
from fornace.api.policy import Policy, enforcer
from fornace.api.context import Context
from fornace.api.stores.store import Store
from fornace.common.db.engine import make_engine, session_factory, upgrade
from fornace.conductor.packages.check import package_checker

BROKEN_WORKFLOW = ("<workflow>\n  <rule match=\"$\">\n    <frobnicate/>\n"
                   "    <send-command template=\"Nope\" service=\"s\" unit=\"u\"/>\n"
                   "  </rule>\n</workflow>\n")


def broken_package(name: str = "hello") -> dict[str, bytes]:
    """A package with three problems: two in one workflow, a syntax error in another."""
    return {**package_files(name, workflow=BROKEN_WORKFLOW),
            "workflows/broken.xml": b"<workflow>\n<rule>"}


CALLERS = {
    "mia": Context("p-a", "u-mia", roles=frozenset({"member"}), user_name="mia",
                   project_name="demo-a", project_domain_id="default"),
    "rita": Context("p-a", "u-rita", roles=frozenset({"reader"}), user_name="rita",
                    project_name="demo-a", project_domain_id="default"),
    "bea": Context("p-b", "u-bea", roles=frozenset({"member"}), user_name="bea",
                   project_name="demo-b", project_domain_id="default"),
    "root": Context("p-admin", "u-root", roles=frozenset({"admin", "member"}),
                    user_name="root", project_name="admin", project_domain_id="default"),
}


class Chosen:
    """An authenticator whose tokens are the names of :data:`CALLERS`."""

    def context(self, headers):
        token = headers.get("x-auth-token") or ""
        if token not in CALLERS:
            raise Unauthorized("not a caller of the test")
        return CALLERS[token]


def packages_app(url: str, auth) -> Api:
    upgrade(url)
    store = Store(session_factory(make_engine(url)), Published())
    packages = Packages(store.sessions, check=package_checker())
    app = create_app(store, auth, jobs=Jobs(store), packages=packages)
    return Api(TestClient(app, raise_server_exceptions=False), store, Published())


@pytest.fixture
def api(tmp_path) -> Api:
    return packages_app(f"sqlite:///{tmp_path / 'dash-packages.sqlite'}", Chosen())


def user(api: Api, name: str) -> Browser:
    """The dashboard as one of :data:`CALLERS` (its token in the session cookie)."""
    client = TestClient(api.client.app, raise_server_exceptions=False)
    client.cookies.set("fornace_token", name)
    return Browser(client)


def post_upload(browser: Browser, data: bytes, public: bool = False, token: str | None = None,
                filename: str = "hello.zip"):
    fields = {"csrf_token": browser.token() if token is None else token}
    if public:
        fields["public"] = "true"
    response = browser.client.post(DASH + "/packages/new", data=fields,
                                   files={"package": (filename, data, "application/zip")},
                                   follow_redirects=False, headers=OWN)
    browser.pages.append(response.text)
    return response


def upload(browser: Browser, data: bytes, public: bool = False) -> str:
    """Upload through the form; the new package's id (from where it redirects)."""
    response = post_upload(browser, data, public)
    assert response.status_code == 303, response.text
    found = re.fullmatch(rf"{DASH}/packages/([0-9a-f]+)", response.headers["location"])
    assert found, response.headers["location"]
    return found.group(1)


def rows(page: str) -> list[str]:
    """The names and versions of the list's rows."""
    return [f"{html.unescape(name)} {version}" for name, version in re.findall(
        r'<tr data-package="[^"]+">\s*<td class="long"><a [^>]*>([^<]*)</a></td>\s*'
        r'<td class="nowrap">([^<]*)</td>', page)]


def problems(page: str) -> list[str]:
    block = re.search(r'<ul class="problems" id="problems">(.*?)</ul>', page, re.S)
    assert block, page
    return [html.unescape(p) for p in re.findall(r"<li><code>(.*?)</code></li>", block.group(1))]


# -- the list --------------------------------------------------------------------------------

def test_the_list_shows_public_packages_and_the_project_s_not_another_project_s(api):
    mia, bea, root = user(api, "mia"), user(api, "bea"), user(api, "root")
    empty = mia.get("/packages")
    assert "No workflow packages yet" in empty and "upload one" in empty
    assert f'href="{DASH}/packages" class="active">Packages</a>' in empty   # the navigation
    assert 'id="package-filter"' not in empty

    upload(mia, zip_of(package_files("hello", "1.0.0")))
    upload(mia, tar_of(package_files("hello", "1.1.0")))
    upload(bea, zip_of(package_files("bees", "0.1")))
    upload(root, zip_of(package_files("shared", "2.0")), public=True)

    listing = mia.get("/packages")
    assert rows(listing) == ["hello 1.0.0", "hello 1.1.0", "shared 2.0"]
    assert "bees" not in listing
    assert "says hello" in listing and "by u-mia" in listing
    assert '<span class="badge b-public">public</span>' in listing
    assert '<span class="badge b-project">project</span>' in listing
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", listing)
    assert rows(bea.get("/packages")) == ["bees 0.1", "shared 2.0"]

    # the filter by name, and its own empty state
    assert rows(mia.get("/packages?q=HEL")) == ["hello 1.0.0", "hello 1.1.0"]
    none = mia.get("/packages?q=nothing")
    assert rows(none) == [] and "No package matches the filter" in none
    assert rows(mia.get("/packages?q=hel&per_page=1&page=2")) == ["hello 1.1.0"]


def test_sizes_read_as_people_read_them():
    assert [size_text(n) for n in (1, 512, 2048, 3 * 1024 * 1024 + 1)] == [
        "1 byte", "512 bytes", "2.0 KiB", "3.0 MiB"]


# -- uploading ---------------------------------------------------------------------------------

def test_a_good_upload_goes_to_the_package_page(api):
    mia = user(api, "mia")
    form = mia.get("/packages/new")
    assert 'enctype="multipart/form-data"' in form and 'type="file"' in form
    assert 'name="public"' not in form          # a project member uploads to the project only
    data = zip_of(package_files())
    response = post_upload(mia, data)
    page = mia.follow(response)
    assert "Package hello 1.0.0 uploaded." in page
    assert hashlib.sha256(data).hexdigest() in page
    for name in package_files():
        assert f"<li><code>{name}</code></li>" in page
    assert "<dd>says hello</dd>" in page and "project <code>p-a</code>" in page
    package_id = response.headers["location"].rsplit("/", 1)[1]
    assert f'href="{DASH}/packages/{package_id}/download"' in page
    got = mia.client.get(f"{DASH}/packages/{package_id}/download")
    assert got.status_code == 200 and got.content == data
    assert got.headers["content-disposition"] == 'attachment; filename="hello-1.0.0.zip"'


def test_a_refused_package_comes_back_on_the_form_with_every_problem(api):
    mia = user(api, "mia")
    response = post_upload(mia, zip_of(broken_package()))
    assert response.status_code == 400
    page = response.text
    assert "The package is refused: 3 problems to fix" in page
    listed = problems(page)
    assert "workflows/hello.xml:3: unknown function <frobnicate>" in listed
    assert any(p.startswith("workflows/hello.xml:4: template 'Nope': ") for p in listed)
    assert any(p.startswith("workflows/broken.xml:") and "XML syntax error" in p for p in listed)
    assert len(listed) == 3
    assert "&lt;frobnicate&gt;" in page and "<frobnicate>" not in page   # escaped
    assert 'type="file"' in page                                           # the form again
    assert "No workflow packages yet" in mia.get("/packages")


def test_an_upload_without_a_file_a_second_version_and_a_forged_form_are_refused(api):
    mia = user(api, "mia")
    nothing = post_upload(mia, b"", filename="")
    assert nothing.status_code == 400 and "Choose a package archive" in nothing.text
    upload(mia, zip_of(package_files()))
    again = post_upload(mia, tar_of(package_files()))
    assert again.status_code == 409
    assert "version 1.0.0 of package hello exists already" in again.text
    forged = post_upload(mia, zip_of(package_files(version="9")), token="x" * 40)
    assert forged.status_code == 403 and "did not come from this dashboard" in forged.text
    plain = mia.post("/packages/new", {"public": "true"})
    assert plain.status_code == 400 and "multipart/form-data" in plain.text
    assert rows(mia.get("/packages")) == ["hello 1.0.0"]


def test_the_public_checkbox_is_the_cloud_admin_s_alone(api):
    mia, root = user(api, "mia"), user(api, "root")
    form = root.get("/packages/new")
    assert 'name="public"' in form and "every project sees it" in form
    public_id = upload(root, zip_of(package_files("shared")), public=True)
    assert "public: every project sees it" in root.get(f"/packages/{public_id}")
    # a forged public upload of a member is refused on the form
    refused = post_upload(mia, zip_of(package_files("mine")), public=True)
    assert refused.status_code == 403
    assert "only the cloud admin uploads public packages" in refused.text
    assert 'name="public"' not in refused.text
    # a member may not delete the public one: no button, and the post is refused
    page = mia.get(f"/packages/{public_id}")
    assert f"/packages/{public_id}/delete" not in page
    assert f"/packages/{public_id}/delete" not in mia.get("/packages")
    back = mia.post(f"/packages/{public_id}/delete")
    assert "only the cloud admin deletes it" in mia.follow(back)
    assert f"/packages/{public_id}/delete" in root.get(f"/packages/{public_id}")


# -- deleting ------------------------------------------------------------------------------------

def test_delete_through_the_confirmation_page(api):
    mia = user(api, "mia")
    package_id = upload(mia, zip_of(package_files()))
    page = mia.get(f"/packages/{package_id}")
    assert f'href="{DASH}/packages/{package_id}/delete"' in page
    confirm = mia.get(f"/packages/{package_id}/delete")
    assert "Delete package hello 1.0.0?" in confirm
    assert f'action="{DASH}/packages/{package_id}/delete"' in confirm
    assert 'name="csrf_token"' in confirm
    # the form token is required
    tokenless = mia.client.post(f"{DASH}/packages/{package_id}/delete", data={"a": "1"},
                                follow_redirects=False, headers=OWN)
    assert tokenless.status_code == 403
    listing = mia.follow(mia.post(f"/packages/{package_id}/delete"))
    assert "Package hello 1.0.0 deleted." in listing and "No workflow packages yet" in listing
    mia.get(f"/packages/{package_id}", status=404)
    gone = mia.follow(mia.post(f"/packages/{package_id}/delete"))
    assert f"package {package_id} not found" in gone


def test_a_package_in_use_is_not_deleted_and_the_page_says_by_whom(api):
    mia = user(api, "mia")
    package_id = upload(mia, zip_of(package_files()))
    token = {"X-Auth-Token": "mia"}
    env = mia.client.post("/environments", json={"name": "prod"}, headers=token).json()
    assert mia.client.put(f"/environments/{env['id']}/packages/hello", json={},
                          headers=token).status_code == 200
    assert 'href="/dashboard/environments/' in mia.get(f"/packages/{package_id}")
    response = mia.post(f"/packages/{package_id}/delete")
    assert response.headers["location"] == f"{DASH}/packages/{package_id}"
    page = mia.follow(response)
    assert 'class="flash flash-error"' in page
    assert "package hello 1.0.0 is used by environments prod" in page
    assert rows(mia.get("/packages")) == ["hello 1.0.0"]


# -- who sees what -------------------------------------------------------------------------------

def test_a_reader_sees_the_packages_without_upload_or_delete_buttons(api):
    mia, rita = user(api, "mia"), user(api, "rita")
    package_id = upload(mia, zip_of(package_files()))
    listing = rita.get("/packages")
    assert rows(listing) == ["hello 1.0.0"]
    assert "/packages/new" not in listing and "/delete" not in listing
    assert "upload one" not in listing
    page = rita.get(f"/packages/{package_id}")
    assert f"/packages/{package_id}/download" in page and "/delete" not in page
    assert rita.client.get(f"{DASH}/packages/{package_id}/download").status_code == 200
    for path in ("/packages/new", f"/packages/{package_id}/delete"):
        refused = rita.get(path, status=403)
        assert "is not allowed" in refused
    posted = rita.post(f"/packages/{package_id}/delete")
    assert posted.status_code == 403 and "package:delete is not allowed" in posted.text
    forged = post_upload(rita, zip_of(package_files("other")))
    assert forged.status_code == 403 and "package:upload is not allowed" in forged.text


def test_another_project_s_package_is_not_found(api):
    mia, bea = user(api, "mia"), user(api, "bea")
    package_id = upload(mia, zip_of(package_files()))
    for path in (f"/packages/{package_id}", f"/packages/{package_id}/download",
                 f"/packages/{package_id}/delete"):
        bea.get(path, status=404)
    assert "not found" in bea.follow(bea.post(f"/packages/{package_id}/delete"))
    assert rows(mia.get("/packages")) == ["hello 1.0.0"]


def test_without_packages_the_pages_say_they_are_unavailable(tmp_path):
    api = make_api(f"sqlite:///{tmp_path / 'none.sqlite'}")
    alone = create_dashboard(api.store, api.jobs, NoAuth("t1", "u1"), Policy(enforcer()))
    answer = TestClient(alone, raise_server_exceptions=False).get("/packages")
    assert answer.status_code == 503 and "workflow packages are unavailable" in answer.text
    # the API's default packages have no checker: the form says why it refuses
    browser = Browser(api.client)
    assert "No workflow packages yet" in browser.get("/packages")
    refused = post_upload(browser, zip_of(package_files()))
    assert refused.status_code == 503 and "without the workflow checker" in refused.text


def test_malformed_multipart_bodies_are_400s(api):
    browser = user(api, "mia")
    token = browser.token()
    for body in (f"--b\r\nContent-Disposition: form-data; name=\"csrf_token\"\r\n\r\n{token}"
                 f"\r\n--b\r\nContent-Disposition: form-data; name=\"package\"; "
                 f"filename=\"x.zip\"\r\n\r\nPK".encode(),            # cut short
                 b"--b\r\nContent-Disposition: form-data; name=\"a\"\r\none\r\n--b--"):
        answer = browser.client.post(DASH + "/packages/new", content=body, headers={
            **OWN, "Content-Type": "multipart/form-data; boundary=b"})
        assert answer.status_code in (400, 403), answer.text
    plain = browser.client.post(DASH + "/packages/new", content=b"a=1",
                                headers={**OWN, "Content-Type": "application/x-www-form-urlencoded"})
    assert plain.status_code == 400 and "multipart/form-data" in plain.text


# -- in a browser -------------------------------------------------------------------------------

@pytest.fixture
def shots(tmp_path) -> Path:
    folder = Path(os.environ.get("FORNACE_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    print(f"\npackage screenshots: {folder}")
    return folder


def test_the_package_pages_in_a_browser(tmp_path, shots):
    from playwright.sync_api import expect

    expect.set_options(timeout=30_000)
    api = packages_app(f"sqlite:///{tmp_path / 'browser.sqlite'}", NoAuth("t1", "u1"))
    with chromium() as browser, serving(api.client.app) as url:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        dashboard = url + "/dashboard"
        log_in(page, dashboard, "pkg-tenant", "alice")
        page.click("nav.sidebar a:has-text('Packages')")
        expect(page.locator("main .empty")).to_contain_text("No workflow packages yet")

        # a package with problems: back on the form with each of them
        page.click("#upload-package")
        page.set_input_files("#in-package", files=[{
            "name": "broken.zip", "mimeType": "application/zip",
            "buffer": zip_of(broken_package("broken"))}])
        page.click("#upload")
        expect(page.locator("#problems li")).to_have_count(3)
        expect(page.locator("#problems")).to_contain_text(
            "workflows/hello.xml:3: unknown function <frobnicate>")
        assert overflow(page) == []
        page.screenshot(path=str(shots / "package-upload-problems.png"), full_page=True)

        # good ones: the package's page, then the list
        for name, version in (("hello", "1.0.0"), ("web-farm-tools", "2.3.1")):
            page.goto(dashboard + "/packages/new")
            page.set_input_files("#in-package", files=[{
                "name": f"{name}.tar.gz", "mimeType": "application/gzip",
                "buffer": tar_of(package_files(name, version))}])
            page.click("#upload")
            expect(page.locator(".flash-ok")).to_contain_text(f"Package {name} {version} uploaded")
        expect(page.locator("#files li")).to_have_count(len(package_files()))
        expect(page.locator("#digest")).to_have_text(re.compile(r"^[0-9a-f]{64}$"))
        assert overflow(page) == []
        page.screenshot(path=str(shots / "package-page.png"), full_page=True)

        page.click(".crumbs a:has-text('Packages')")
        expect(page.locator("tr[data-package]")).to_have_count(2)
        assert overflow(page) == []
        page.screenshot(path=str(shots / "package-list.png"), full_page=True)

        # delete one through its confirmation page
        page.click("tr:has-text('web-farm-tools') a:has-text('Delete')")
        expect(page.locator("h1")).to_contain_text("Delete package web-farm-tools 2.3.1?")
        page.screenshot(path=str(shots / "package-confirm-delete.png"), full_page=True)
        page.click("#confirm-delete")
        expect(page.locator(".flash-ok")).to_contain_text("Package web-farm-tools 2.3.1 deleted")
        expect(page.locator("tr[data-package]")).to_have_count(1)

