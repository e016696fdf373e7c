"""The documentation of ``doc/source`` builds with Sphinx, warnings as errors, and
its generated references are whole: every option the ``fornace`` command
registers, every access rule, every command and every REST route is in them.

The build runs once for the module (``sphinx-build -W -b html``, as
``doc/source/conf.py`` says to run it), in a process of its own.
"""
from __future__ import annotations

import argparse
import html
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "doc" / "source"
GENERATOR_CONF = ROOT / "etc" / "fornace-config-generator.conf"
MIGRATIONS = ROOT / "common" / "db" / "migrations" / "versions"
# oslo.config's own options of every program (the command line's, and where
# more configuration comes from), not Fornace's
OSLO_CONFIG_OWN = {"command", "config_file", "config_dir", "config_source", "shell_completion"}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("docs") / "html"
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q",
                           "-b", "html", "-d", str(out.parent / "doctrees"),
                           str(SOURCE), str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "WARNING" not in done.stderr, done.stdout + done.stderr
    return out


def page(built: Path, name: str) -> str:
    return html.unescape((built / f"{name}.html").read_text())


def test_the_docs_build_without_a_warning(built):
    for name in ("index", "install", "user/quickstart", "admin/index", "authors/index",
                 "reference/cli", "reference/config", "reference/policy", "reference/api"):
        assert (built / f"{name}.html").is_file(), name


def options_of(conf) -> set[str]:
    """``GROUP.option`` of every option registered on ``conf`` (``DEFAULT`` for
    the ungrouped), oslo.config's own left out."""
    from oslo_config import cfg

    found = set()
    for key in conf:
        value = conf[key]
        if isinstance(value, cfg.ConfigOpts.GroupAttr):
            found |= {f"{key}.{name}" for name in value}
        elif key not in OSLO_CONFIG_OWN:
            found.add(f"DEFAULT.{key}")
    return found


def registered_options() -> set[str]:
    """What the daemons and commands register: each command's configuration as
    ``fornace`` builds it (oslo.log's options for the daemons), the access
    rules' options the API adds when it makes its enforcer, and the options of
    the sample configuration's namespaces."""
    from oslo_config import generator

    from fornace.api import policy
    from fornace.cli import main

    found: set[str] = set()
    for command in main.COMMANDS:
        conf = main.build_conf(command)
        if command in ("api", "up"):
            policy.enforcer(conf)
        found |= options_of(conf)
    namespaces = [line.split("=", 1)[1].strip() for line in GENERATOR_CONF.read_text().splitlines()
                  if line.split("=", 1)[0].strip() == "namespace"]
    for _, groups in generator._list_opts(namespaces):
        for group, opts in groups:
            name = getattr(group, "name", group) or "DEFAULT"
            found |= {f"{name}.{opt.dest}" for opt in opts}
    return found


def test_the_configuration_reference_lists_every_option(built):
    shown = set(re.findall(r'id="([A-Za-z_]+\.[A-Za-z0-9_]+)"', page(built, "reference/config")))
    registered = registered_options()
    assert {"api.port", "database.connection", "DEFAULT.debug",
            "oslo_policy.policy_file"} <= registered
    assert sorted(registered - shown) == []


def test_the_policy_reference_lists_every_rule(built):
    from fornace.api.policy import list_rules

    text = page(built, "reference/policy")
    missing = [rule.name for rule in list_rules() if rule.name not in text]
    assert list_rules() and missing == []


def command_progs() -> list[str]:
    """``fornace env create`` and the like: every command and action."""
    from fornace.cli import main

    subparsers = argparse.ArgumentParser(prog="fornace").add_subparsers()
    main._add_command_parsers(subparsers)
    progs = []
    pending = list(subparsers.choices.values())
    while pending:
        parser = pending.pop()
        progs.append(parser.prog)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                pending += list(action.choices.values())
    return sorted(set(progs))


def test_the_cli_reference_has_every_command(built):
    from docutils.nodes import make_id

    text = page(built, "reference/cli")
    progs = command_progs()
    assert "fornace env create" in progs and "fornace db current" in progs
    missing = [prog for prog in progs if f'id="{make_id("cli " + prog)}"' not in text]
    assert missing == []
    assert "usage: fornace [--config-file FILE]" in text    # fornace --help itself


def test_the_api_reference_has_every_route(built):
    from fornace.api.app import create_app
    from fornace.api.auth import NoAuth
    from fornace.api.stores.store import Store
    from fornace.common.db.engine import make_engine, session_factory

    store = Store(session_factory(make_engine("sqlite://")), lambda body, message_id: None)
    paths = create_app(store, NoAuth("t", "u")).openapi()["paths"]
    text = page(built, "reference/api")
    routes = [f"{method.upper()} {path}" for path, entry in paths.items()
              if not path.startswith("/v1/") for method in entry]
    assert "POST /environments" in routes
    assert [route for route in routes if route not in text] == []


def test_the_schema_revision_the_docs_show_is_the_newest():
    newest = max(path.name.split("_", 1)[0] for path in MIGRATIONS.glob("[0-9]*_*.py"))
    shown = set()
    for path in SOURCE.rglob("*.rst"):
        shown |= set(re.findall(r"revision (\d{4}) \(the newest\)", path.read_text()))
    assert shown == {newest}
