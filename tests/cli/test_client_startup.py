"""What a client command loads when it starts: ``fornace env list`` in noauth
mode (``--url``, FORNACE_URL, a token) reads no configuration file and does not
log in, so it loads neither oslo.config nor keystoneauth1; given a
configuration file or OpenStack credentials it loads what they need.  Help,
errors and exit codes are the ones the full parse (oslo.config, every option)
gives, whichever way the line is parsed."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from apikit import make_api
from fornace.cli.client import cloudauth, commandline
from fornace.cli.main import _add_command_parsers, build_conf, main
from serving import serving

HEAVY = ("oslo_config", "keystoneauth1")
# fornace as its users run it (python -m fornace.cli), then the heavy
# libraries that were loaded, as the last line of standard error
PROBE = ("import runpy, sys\n"
         "sys.argv = ['fornace', *sys.argv[1:]]\n"
         "try:\n"
         "    runpy.run_module('fornace.cli', run_name='__main__')\n"
         "except SystemExit as end:\n"
         "    code = end.code\n"
         "sys.stderr.write('\\n' + repr([code, [m for m in %r if m in sys.modules]]))\n" % (HEAVY,))
UNREACHABLE_KEYSTONE = "http://127.0.0.1:9/v3"   # discard port: nothing answers


@pytest.fixture(scope="module")
def api(tmp_path_factory) -> Iterator[str]:
    """A running API (SQLite, noauth) holding one environment, named 'probe'."""
    url = f"sqlite:///{tmp_path_factory.mktemp('startup') / 'api.sqlite'}"
    made = make_api(url)
    assert made.client.post("/environments", json={"name": "probe"}).status_code == 200
    with serving(made.client.app) as api_url:
        yield api_url


def fornace(args: list[str], home: Path, env: dict[str, str] | None = None
            ) -> tuple[int, str, str, list[str]]:
    """(exit code, stdout, stderr without the probe's line, heavy libraries loaded)."""
    clean = {key: value for key, value in os.environ.items()
             if not key.startswith(("OS_", "FORNACE_"))}
    done = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=home, text=True,
                          capture_output=True, stdin=subprocess.DEVNULL, timeout=120,
                          env={**clean, "HOME": str(home), **(env or {})})
    rest, _, last = done.stderr.rpartition("\n")
    code, loaded = eval(last)   # noqa: S307 -- the probe's own repr
    return code, done.stdout, rest, loaded


def test_env_list_with_url_loads_neither_oslo_config_nor_keystoneauth(api, tmp_path):
    code, out, err, loaded = fornace(["env", "list", "--url", api], tmp_path)
    assert (code, err) == (0, "")
    assert out.splitlines()[0].split() == ["ID", "NAME", "STATUS", "VERSION", "UPDATED",
                                          "REGION"]
    assert " probe " in out
    assert loaded == []


@pytest.mark.parametrize("args,env", [
    (["env", "list", "-f", "json"], {}),                                  # FORNACE_URL
    (["env", "list", "--timeout", "5", "--insecure"], {}),              # session options
    (["env", "list"], {"FORNACE_TOKEN": "t0k3n", "OS_AUTH_URL": UNREACHABLE_KEYSTONE}),
    (["env", "list", "--token", "t0k3n"], {"OS_AUTH_URL": UNREACHABLE_KEYSTONE}),
    (["env", "list"], {"OS_USERNAME": "demo", "OS_PASSWORD": "secret"}),  # no auth URL
])
def test_noauth_and_token_lines_load_neither(api, tmp_path, args, env):
    code, out, err, loaded = fornace(args, tmp_path, {"FORNACE_URL": api, **env})
    assert (code, err, loaded) == (0, "", [])
    assert "probe" in out


@pytest.mark.parametrize("args,env", [
    (["env", "list", "--os-auth-url", UNREACHABLE_KEYSTONE, "--os-username", "demo",
      "--os-password", "secret", "--os-project-name", "demo"], {}),
    (["env", "list"], {"OS_AUTH_URL": UNREACHABLE_KEYSTONE, "OS_USERNAME": "demo",
                       "OS_PASSWORD": "secret", "OS_PROJECT_NAME": "demo"}),
])
def test_keystone_credentials_load_keystoneauth_and_log_in(api, tmp_path, args, env):
    code, out, err, loaded = fornace(args, tmp_path, {"FORNACE_URL": api, **env})
    assert code == 3 and out == ""
    assert err.startswith(f"fornace: cannot reach Keystone at {UNREACHABLE_KEYSTONE}"), err
    assert "secret" not in err
    assert loaded == ["keystoneauth1"]


def test_a_configuration_file_is_read_with_oslo_config(api, tmp_path):
    conf = tmp_path / "fornace.conf"
    conf.write_text("[DEFAULT]\n")
    code, out, _, loaded = fornace(["env", "list", "--config-file", str(conf)], tmp_path,
                                   {"FORNACE_URL": api})
    assert code == 0 and "probe" in out and "oslo_config" in loaded
    code, _, err, _ = fornace(["env", "list", "--config-file", str(tmp_path / "none.conf")],
                              tmp_path, {"FORNACE_URL": api})
    assert code == 2 and "none.conf" in err


def test_help_and_errors_are_the_full_parse_s(tmp_path):
    """Help lists the OpenStack options; a wrong line gets the usage of the full parse."""
    code, out, _, loaded = fornace(["env", "list", "--help"], tmp_path)
    assert code == 0 and "--os-auth-url" in out and "--tls-ciphers" in out
    assert loaded == ["oslo_config", "keystoneauth1"]
    every_option = "[OpenStack options]"   # in the usage of the full parse
    for args, usage, message in (
            (["env", "list", "--bogus"], "[--config-file PATH]",
             "fornace: error: unrecognized arguments: --bogus"),
            (["env", "list", "--timeout", "0"], every_option,
             "fornace env list: error: argument --timeout: 0 must be greater than 0"),
            (["env", "list", "-f", "xml"], every_option, "invalid choice: 'xml'")):
        code, out, err, _ = fornace(args, tmp_path)
        assert code == 2 and out == "", (args, err)
        assert err.startswith("usage: fornace") and usage in err and message in err, err
    # a mistyped command or action: one line naming the close ones, no usage
    for args, message in (
            (["env", "craete"], "fornace env: unknown action 'craete' (did you mean create?)"),
            (["deplyo", "web"], "fornace: unknown command 'deplyo' (did you mean deploy or "
                                "demo?)"),
            (["env", "bogus"], "fornace env: unknown action 'bogus' (fornace env's actions: "
                               "list, create, show, delete, abandon)")):
        code, out, err, _ = fornace(args, tmp_path)
        assert (code, out, err) == (2, "", message + "\n"), args


def test_help_puts_the_openstack_options_after_the_command_s_own_and_the_examples(tmp_path):
    code, out, _, _ = fornace(["deploy", "--help"], tmp_path)
    assert code == 0
    usage = out[:out.index("\n\n")]
    assert "[OpenStack options]" in usage and "--os-" not in usage
    own, examples, openstack = (out.index("--change-detection {"), out.index("examples:\n"),
                                out.index("OpenStack credentials:\n"))
    assert own < examples < openstack
    assert out.index("--os-auth-url") > openstack and out.index("--timeout") > openstack
    assert out.count("--os-password OS_PASSWORD") == 1 and "Authentication Options" not in out


# -- the quick parse says what the full one says, or leaves it to it ----------------

def full_parse(args: list[str]) -> dict[str, object]:
    conf = build_conf(args[0])
    conf(args, project="fornace", prog="fornace", default_config_files=[],
         default_config_dirs=[])
    return {key: value for key, value in vars(conf._namespace).items()
            if not key.startswith("_") and key != "command" and key not in conf}


def quick_parse(args: list[str]) -> dict[str, object] | None:
    parsed = commandline.parse(args, lambda sub: _add_command_parsers(sub, args[0]))
    if parsed is None:
        return None
    assert parsed.command.name == args[0]
    return {key: value for key, value in vars(parsed.command._namespace).items()
            if key != "command"}


def openstack_options() -> set[str]:
    """The destinations of every OpenStack option (keystoneauth1's included)."""
    parser = argparse.ArgumentParser()
    cloudauth.add_arguments(parser, [])
    return {action.dest for action in parser._actions} - {"help"}


@pytest.mark.parametrize("args", [
    ["env", "list", "--url", "http://a:1", "-f", "value", "--json"],
    ["env", "create", "web", "--tenant", "t1", "--token", "x"],
    ["env", "delete", "web", "-y", "--no-follow", "--timeout", "2.5"],
    ["service", "add", "web", "--set", "port=80", "--name", "site"],
    ["deploy", "web", "--no-follow"],
    ["action", "web", "scale", "--param", "delta=-1", "--yes"],
    ["logs", "web", "--follow"],
    ["package", "list", "-fjson"],
])
def test_quick_parse_gives_the_values_of_the_full_parse(args, monkeypatch):
    for name in ("OS_CLOUD", "OS_AUTH_URL", "FORNACE_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    quick = quick_parse(args)
    assert quick is not None
    full = full_parse(args)
    assert {key: full[key] for key in quick} == quick
    assert set(full) - set(quick) <= openstack_options()   # not read without a login


@pytest.mark.parametrize("args", [
    ["env", "list", "--help"], ["env", "list", "-h"], ["env", "list", "--bogus"],
    ["env", "list", "--timeout", "-1"], ["env"], ["env", "list", "--url"],
])
def test_quick_parse_leaves_help_and_errors_to_the_full_one(args, monkeypatch, capsys):
    monkeypatch.delenv("OS_CLOUD", raising=False)
    monkeypatch.delenv("OS_AUTH_URL", raising=False)
    assert quick_parse(args) is None
    assert capsys.readouterr() == ("", "")   # it printed nothing: the full parse will


@pytest.mark.parametrize("args,option,value", [
    (["env", "list", "--ur", "http://a:1"], "url", "http://a:1"),   # unique among all options
    (["env", "list", "--os-cloud", "c"], "os_cloud", "c"),
    (["env", "list", "--os-auth-u", "http://k:5000"], "os_auth_url", "http://k:5000"),
])
def test_abbreviations_and_credentials_are_parsed_with_every_option(args, option, value,
                                                                    monkeypatch):
    monkeypatch.delenv("OS_CLOUD", raising=False)
    monkeypatch.delenv("OS_AUTH_URL", raising=False)
    quick = quick_parse(args)
    assert quick is not None and quick[option] == value
    assert openstack_options() <= set(quick)


def test_the_url_abbreviation_still_works(api, tmp_path):
    code, out, _, _ = fornace(["env", "list", "--ur", api], tmp_path)
    assert code == 0 and "probe" in out


def test_main_runs_a_client_command_without_configuration(api, capsys, monkeypatch):
    monkeypatch.setenv("FORNACE_URL", api)
    monkeypatch.delenv("OS_AUTH_URL", raising=False)
    monkeypatch.delenv("OS_CLOUD", raising=False)
    assert main(["env", "list", "--json"]) == 0
    assert [e["name"] for e in json.loads(capsys.readouterr().out)["environments"]] == ["probe"]
