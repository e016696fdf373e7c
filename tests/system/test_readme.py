"""The walk-throughs of README.rst and of the quick start, run as written.

Against a running Fornace as ``fornace up`` starts it (API, conductor and the
local cloud's real agents, folder broker, SQLite), the commands of the quick
start's "Deploying an example" section (``doc/source/user/quickstart.rst``)
are taken from that page and run in order: the ``curl`` sequence in bash,
then the command-line one, then the dashboard steps in Debian's chromium.
Each deployment must end ready, and each unit's URL (from the outputs) must
answer with the site.  README's short tour runs the same way, and README's
two commands are the ones the docs and CI give.
"""
from __future__ import annotations

import json
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest

from browserkit import chromium, log_in
from dockit import literal_block_after, shell as run_shell
from fornace.cli.client.http import ApiClient
from localkit import running_onebox
from waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.rst"
QUICKSTART = ROOT / "doc" / "source" / "user" / "quickstart.rst"
INSTALL = ROOT / "doc" / "source" / "install.rst"
DEMO_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/fornace demo"
TEST_COMMAND = ("python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && "
                ".venv/bin/python -m pytest -q")


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    yield from running_onebox(tmp_path_factory.mktemp("readme") / "state",
                              max_environments=2)


def shell(command: str, box, home: Path) -> subprocess.CompletedProcess:
    return run_shell(command, box.url, home)


def ready_environment(box, name: str) -> dict:
    client = ApiClient(box.url)
    found = wait_for(lambda: next((e for e in client.get("/environments")["environments"]
                                   if e["name"] == name and e["status"] in
                                   ("ready", "deploy failure")), None),
                     f"environment {name} to be deployed", timeout=240)
    assert found["status"] == "ready", found
    return found


def sites_answer(box, env_id: str, expected: int = 2) -> list[str]:
    outputs = ApiClient(box.url).get(f"/environments/{env_id}/outputs")
    urls = [u["url"] for u in outputs["urls"]]
    assert len(urls) == expected, outputs
    for url in urls:
        with urllib.request.urlopen(url, timeout=10) as answer:
            assert answer.status == 200 and b"<h1>site</h1>" in answer.read()
    return urls


def test_readme_gives_the_two_commands():
    """README's two commands: install and run a deployment (``fornace demo``,
    which tests/cli/test_onebox.py and tests/system/test_wheel.py run), and
    install and run the tests, which is what CI runs (``.ci/run``)."""
    text = README.read_text()
    assert literal_block_after(text, "Install and run a deployment") == [DEMO_COMMAND]
    assert literal_block_after(text, "Run the tests") == [TEST_COMMAND]
    assert literal_block_after(INSTALL.read_text(), "From a checkout") == [DEMO_COMMAND]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert ci[-1] == TEST_COMMAND


def test_readme_tour(box, tmp_path):
    commands = literal_block_after(README.read_text(), "A short tour")
    assert [command.split()[:2] for command in commands] == [
        ["fornace", "env"], ["fornace", "deploy"], ["fornace", "outputs"], ["fornace", "env"]]
    for command in commands:
        done = shell(command, box, tmp_path)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        if command.startswith("fornace outputs"):
            printed = re.findall(r"http://[0-9.]+:\d+/", done.stdout)
            assert len(printed) == 2, done.stdout
            for url in printed:
                with urllib.request.urlopen(url, timeout=10) as answer:
                    assert answer.status == 200 and b"<h1>site</h1>" in answer.read()
    names = [e["name"] for e in ApiClient(box.url).get("/environments")["environments"]]
    assert "tour" not in names


def test_the_same_deployment_three_ways(box, tmp_path):
    text = QUICKSTART.read_text()

    # 1. the REST API with curl (the page's API address replaced by the box's)
    curl = literal_block_after(text, "Through the REST API")
    assert curl[0].startswith("API=http://127.0.0.1:8082")
    script = "\n".join([f"API={box.url}", *curl[1:]])
    done = shell(script, box, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"status"' in done.stdout
    web = ready_environment(box, "web")
    api_urls = sites_answer(box, web["id"])

    # 2. the command line, each command as the page writes it
    for command in literal_block_after(text, "With the command line"):
        done = shell(command, box, tmp_path)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        if command.startswith("fornace deploy"):
            assert "deploy succeeded" in done.stdout, done.stdout
        if command.startswith("fornace outputs"):
            printed = re.findall(r"http://[0-9.]+:\d+/", done.stdout)
            assert len(printed) == 2, done.stdout
    cli_env = ready_environment(box, "web-cli")
    cli_urls = sites_answer(box, cli_env["id"])
    assert set(printed) == set(cli_urls)
    assert not set(api_urls) & set(cli_urls)   # two environments, four units

    # 3. the dashboard, the steps the page names, with linux-web.json's fields
    assert "*Create environment* (``web-dash``)" in text
    example = json.loads((ROOT / "data" / "examples" / "linux-web.json").read_text())
    service = example["services"][0]
    with chromium() as browser:
        from playwright.sync_api import expect
        expect.set_options(timeout=60_000)
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        dashboard = box.url + "/dashboard"
        log_in(page, dashboard, "demo", "readme")
        page.fill("#in-env-name", "web-dash")
        page.click("button:has-text('Create environment')")
        expect(page.locator("h1")).to_contain_text("web-dash")
        page.click("a:has-text('Add service')")
        page.click(".card[data-type=linuxWebServer]")
        page.fill("#in-name", service["name"])
        page.fill("#in-port", str(service["port"]))
        page.fill("#in-unitNamingPattern", service["unitNamingPattern"])
        page.fill("#in-units", str(len(service["units"])))
        page.click("#save-service")
        expect(page.locator("#session .changes")).to_contain_text(f"added: {service['name']}")
        page.click("#deploy-button")
        expect(page.locator("#env-status")).to_contain_text("ready", timeout=240_000)
        expect(page.locator("#outputs a")).to_have_count(2)
        shown = sorted(page.locator("#outputs a").all_inner_texts())
    dash_env = ready_environment(box, "web-dash")
    assert shown == sorted(sites_answer(box, dash_env["id"]))
