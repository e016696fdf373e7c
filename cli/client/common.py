"""What every client command of ``fornace`` shares: how it reaches the API,
how environments are named, what its exit code says.

The client commands (``env``, ``service``, ``deploy``, ``action``, ``jobs``...)
talk to a running Fornace over HTTP, like any other API user.  Each one takes
the same connection options, so that a script can set ``FORNACE_URL`` once;
and each ends with one of four exit codes, so that a script can tell "the
deployment failed" from "I typed it wrong" from "the API is down".
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import textwrap
from typing import Any, Callable
from urllib.parse import urlsplit

from fornace.cli.client import cloudauth, helplayout
from fornace.cli.client.formats import add_format_option, format_of
from fornace.cli.client.http import ApiClient, ClientError
from fornace.cli.suggest import add_actions
from fornace.common.errors import FornaceError

# the exit codes, as ``fornace --help`` explains them
OK, FAILED, USAGE, UNAVAILABLE = 0, 1, 2, 3
DEFAULT_URL = "http://127.0.0.1:8082"

Handler = Callable[[Any, ApiClient], int]   # (the parsed command, the client) -> exit code


# -- parsers -------------------------------------------------------------------------

def add_command(subparsers: Any, name: str, summary: str, description: str,
                examples: list[str]) -> argparse.ArgumentParser:
    """A client command's parser: its description, examples and the connection options."""
    parser = _parser(subparsers, name, summary, description, examples)
    add_connection_options(parser)
    return parser


def add_environment_view(subparsers: Any, name: str, summary: str, description: str,
                         examples: list[str]) -> argparse.ArgumentParser:
    """A command showing one view of an environment (``fornace NAME ENV``, -f)."""
    parser = add_command(subparsers, name, summary, description, examples)
    parser.add_argument("environment", metavar="ENV", help="environment id or name")
    add_format_option(parser)
    return parser


def add_group(subparsers: Any, name: str, summary: str, description: str,
              examples: list[str]) -> argparse._SubParsersAction:
    """A command made of actions (``fornace env list``...); the actions' sub-parsers."""
    parser = _parser(subparsers, name, summary, description, examples)
    return add_actions(parser, dest=f"{name}_action", metavar="ACTION", required=True)


def _parser(subparsers: Any, name: str, summary: str, description: str,
            examples: list[str]) -> argparse.ArgumentParser:
    """The text is wrapped here and kept as is by argparse, so that the examples
    stay one per line."""
    return subparsers.add_parser(
        name, help=summary, description=_paragraphs(description),
        epilog="examples:\n" + "\n".join(f"  {line}" for line in examples),
        formatter_class=argparse.RawDescriptionHelpFormatter)


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """--url, --token, --tenant, --json, and the OpenStack credentials (OS_*
    variables, --os-* options, a cloud of clouds.yaml: :mod:`cloudauth`)."""
    parser.add_argument("--url", help=f"the Fornace API (default: $FORNACE_URL; with "
                                      f"OpenStack credentials, the "
                                      f"'{cloudauth.SERVICE_TYPE}' endpoint of the "
                                      f"catalog; else {DEFAULT_URL})")
    parser.add_argument("--token", help="a Keystone token, sent as is as X-Auth-Token, "
                                        "without logging in: OS_* credentials are not used "
                                        "(default: $FORNACE_TOKEN)")
    parser.add_argument("--tenant", help="tenant (project) id in noauth mode, sent as "
                                         "X-Tenant-Id (default: $FORNACE_TENANT)")
    parser.add_argument("--json", action="store_true",
                        help="print the API's data as one JSON document, nothing else")
    helplayout.openstack_last(parser, cloudauth.add_arguments(parser))


def _paragraphs(text: str) -> str:
    return "\n\n".join(textwrap.fill(" ".join(p.split()), 79) for p in text.split("\n\n"))


# -- running ---------------------------------------------------------------------------

def client_of(command: Any) -> ApiClient:
    """The API client of the command's connection options: a token given
    (--token, FORNACE_TOKEN) is sent as is; else OpenStack credentials
    (OS_AUTH_URL, OS_CLOUD...) log in to Keystone, and the catalog names the API
    unless --url or FORNACE_URL does; else no token (noauth mode)."""
    url = command.url or os.environ.get("FORNACE_URL")
    if url is not None:
        _check_url(url)
    token = command.token or os.environ.get("FORNACE_TOKEN")
    tenant = command.tenant or os.environ.get("FORNACE_TENANT")
    _check_header("--token (FORNACE_TOKEN)", token, secret=True)
    _check_header("--tenant (FORNACE_TENANT)", tenant)
    timeout = getattr(command, "timeout", None) or cloudauth.DEFAULT_TIMEOUT
    if token or not cloudauth.wanted(command):
        return ApiClient(url or DEFAULT_URL, token=token, tenant=tenant, timeout=timeout)
    from fornace.cli.client.keystonelogin import connect   # loads keystoneauth1

    login = connect(command, url)
    return ApiClient(login.url, tenant=tenant, timeout=timeout, login=login)


def _check_url(url: str) -> None:
    """``FornaceError`` unless ``url`` is an http(s) URL naming a host."""
    if not url.startswith(("http://", "https://")):
        raise FornaceError(f"--url must start with http:// or https://, got {url!r}")
    try:
        parts = urlsplit(url)
        parts.port   # noqa: B018 -- raises on a port that is no number or out of range
    except ValueError as exc:
        raise FornaceError(f"--url {url!r} is no URL: {exc}") from None
    if not parts.hostname or any(c.isspace() or not c.isprintable() for c in url):
        raise FornaceError(f"--url {url!r} is no URL: a host and no spaces or "
                           "control characters, e.g. http://127.0.0.1:8082")


def _check_header(option: str, value: str | None, secret: bool = False) -> None:
    """``FornaceError`` when ``value`` cannot be sent as an HTTP header (a line
    break, a control or non-Latin-1 character); a secret is not quoted."""
    if value is None or all(" " <= c <= "~" for c in value):
        return
    shown = "" if secret else f" {value!r}"
    raise FornaceError(f"{option}{shown} cannot be sent: it holds a line break, a control "
                       "or a non-ASCII character")


def dispatch(command: Any, handlers: dict[str, Handler]) -> int:
    """Run the handler of ``command``; an API (or Keystone) error becomes one line
    and its exit code."""
    try:
        client = client_of(command)
        return handlers[command.name](command, client)
    except ClientError as exc:
        print(f"fornace: {error_text(exc, command)}", file=sys.stderr)
        return exit_code(exc)


def error_text(exc: ClientError, command: Any = None) -> str:
    """An API error in the command line's own words: no method or path, no
    advice about the API's parameters (``abandon=true``) but the commands that
    do it; a busy environment names its job and the commands that follow or
    stop it."""
    if exc.unreachable:
        return f"{exc} ({exc.hint or 'is Fornace running? set --url or FORNACE_URL'})"
    busy = _busy_text(exc.error) if exc.status == 409 else None
    if busy is not None:
        return busy
    text = str(exc)
    if "abandon=true" in text:   # an API's advice for its own users
        wanted = getattr(command, "environment", None) or "ENV"
        text = text.replace("abandon=true",
                            f"'fornace env delete {_argument(str(wanted))} --abandon'")
    if exc.status is not None and exc.status >= 500:
        text = f"{text} (the API failed: HTTP {exc.status})"
    return text


def _busy_text(error: dict[str, Any]) -> str | None:
    """What to say of a 409 naming the job that runs (None: not such a 409)."""
    job, env = error.get("job"), error.get("environment")
    if not (isinstance(job, dict) and isinstance(env, dict) and job.get("id")
            and env.get("id")):
        return None
    shown = env.get("name") or env["id"]
    named = _argument(str(shown), str(env["id"]))
    return (f"environment {shown} is busy: job {job['id']} ({job.get('kind') or 'job'}) "
            f"is running; follow it with 'fornace logs {named} --follow', or give it up "
            f"with 'fornace env abandon {named}'")


def _argument(name: str, instead: str | None = None) -> str:
    """``name`` as a command-line argument inside a quoted hint: as it is when the
    shell takes it so, else ``instead`` (an id) or the name shell-quoted."""
    if shlex.quote(name) == name:
        return name
    return instead if instead is not None else shlex.quote(name)


# who asks, what they may do, a server asking to slow down: not a typo
REFUSED = (401, 403, 408, 429)


def exit_code(exc: ClientError) -> int:
    """2 when the request itself was wrong (400, 404, 413..., and a 409 but for
    a busy environment's: a name taken, a version that exists); 3 when the API
    is unreachable or refused it (401, 403: permission; a 409 naming the busy
    environment: retrying later can work) or failed (5xx)."""
    if exc.status == 409:
        return UNAVAILABLE if busy_conflict(exc.error) else USAGE
    wrong = exc.status is not None and 400 <= exc.status < 500 and exc.status not in REFUSED
    return USAGE if wrong else UNAVAILABLE


def busy_conflict(error: dict[str, Any]) -> bool:
    """Whether a 409's error is the API's busy refusal: it names the environment
    (and the job that runs, when one does: :func:`fornace.api.jobstate.busy_error`)."""
    return isinstance(error.get("environment"), dict)


def note(text: str) -> None:
    """A remark for the person at the terminal (stderr: --json output stays clean)."""
    print(f"fornace: {text}", file=sys.stderr)


# -- naming things ---------------------------------------------------------------------

def find_environment(client: ApiClient, wanted: str) -> dict[str, Any]:
    """The environment whose id or (unique) name is ``wanted``."""
    environments = client.get("/environments")["environments"]
    for environment in environments:
        if environment["id"] == wanted:
            return environment
    named = [e for e in environments if e["name"] == wanted]
    if len(named) > 1:
        raise FornaceError(f"{len(named)} environments are named {wanted!r}: name one by id "
                           f"(see fornace env list)")
    if not named:
        raise FornaceError(f"no environment is named or has the id {wanted!r} "
                           f"(see fornace env list)")
    return named[0]


def find_job(client: ApiClient, env_id: str, job_id: str | None) -> dict[str, Any]:
    """The job ``job_id`` of the environment ``env_id``, else its newest one."""
    if job_id:
        return client.get(f"/environments/{env_id}/jobs/{job_id}")
    listed = client.get(f"/environments/{env_id}/jobs")["jobs"]
    if not listed:
        raise FornaceError(f"environment {env_id} has no jobs yet: deploy it first")
    return listed[0]


def environment_view(command: Any, client: ApiClient,
                     view: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the environment ``command`` names, its ``view`` as the API serves it at
    ``/environments/ID/VIEW``); contradicting format options are said first."""
    format_of(command)
    env = find_environment(client, command.environment)
    return env, client.get(f"/environments/{env['id']}/{view}")


BUSY_STATES = ("deploying", "deleting")   # the API refuses changes meanwhile (409)


def first_deployment(env: dict[str, Any]) -> bool:
    """Whether ``env`` (as the API shows it) runs its first deployment: the API
    then shows the services that job deploys, not yet deployed ones."""
    return env.get("status") == "deploying" and env.get("version") == 0


def find_service(services: list[dict[str, Any]], wanted: str) -> dict[str, Any]:
    """The service whose id or (unique) name is ``wanted``."""
    for service in services:
        if service.get("id") == wanted:
            return service
    named = [s for s in services if s.get("name") == wanted]
    if len(named) != 1:
        known = ", ".join(str(s.get("name")) for s in services) or "none"
        problem = "several services are" if named else "no service is"
        raise FornaceError(f"{problem} named {wanted!r} (services: {known})")
    return named[0]


def key_values(items: list[str], option: str) -> dict[str, Any]:
    """``KEY=VALUE`` items as a dict; a VALUE that is JSON (``8080``, ``true``,
    ``{"a": 1}``) is taken as such, anything else as text."""
    from fornace.common import jsonlimits

    values: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise FornaceError(f"{option} {item!r}: expected KEY=VALUE")
        try:
            values[key.strip()] = json_or_text(text)
        except jsonlimits.JsonLimitError as exc:
            raise FornaceError(f"{option} {key.strip()}=...: {exc.message}") from None
    return values


def json_or_text(text: str) -> Any:
    """JSON when ``text`` parses as JSON, else the text (JsonLimitError past the limits)."""
    from fornace.common import jsonlimits   # not loaded by the commands that take no JSON

    try:
        return jsonlimits.loads(text)
    except jsonlimits.JsonLimitError:
        raise
    except ValueError:
        return text
