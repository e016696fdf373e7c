"""The client commands' OpenStack credentials on their command line: the
``--os-*`` options (each defaulting to its ``OS_*`` variable) and whether a
command was given any.

Users of an OpenStack cloud hold credentials -- an openrc's ``OS_*``
variables, a cloud of ``clouds.yaml`` -- not raw tokens.  The options are
keystoneauth1's own (any auth type it knows, ``password`` by default), as the
OpenStack clients take them; logging in with them (through openstacksdk's
config loader) is :mod:`fornace.cli.client.keystonelogin`'s job.  Both load keystoneauth1 only
when the command needs it: not for ``fornace --help``, nor for a command that
sends a token or runs in noauth mode (:func:`without_login`).
"""
from __future__ import annotations

import argparse
import contextlib
import contextvars
import functools
import os
import sys
import textwrap
from typing import Any, Iterator, Sequence

SERVICE_TYPE = "application-catalog"    # as Murano registers its API
DEFAULT_AUTH_TYPE = "password"
DEFAULT_INTERFACE = "public"
DEFAULT_TIMEOUT = 30.0                  # seconds, for Keystone and Fornace alike


def keystone_loading() -> Any:
    from keystoneauth1 import loading
    return loading


@functools.lru_cache(maxsize=None)
def default_loader() -> Any:
    """The ``password`` loader, looked up once for all the parsers of a run."""
    return keystone_loading().get_plugin_loader(DEFAULT_AUTH_TYPE)


# -- the options -----------------------------------------------------------------------

# what add_arguments adds: every option (FULL), none (SUMMARIES: the parser is
# only read for its one-line help), or those of a command without OpenStack
# credentials (NO_LOGIN)
FULL, SUMMARIES, NO_LOGIN = "full", "summaries", "no login"
_MODE: contextvars.ContextVar[str] = contextvars.ContextVar("options", default=FULL)


@contextlib.contextmanager
def _options(mode: str) -> Iterator[None]:
    reset = _MODE.set(mode)
    try:
        yield
    finally:
        _MODE.reset(reset)


def summaries_only() -> contextlib.AbstractContextManager[None]:
    """Parsers built in the block are only read for their one-line help
    (``fornace --help``): :func:`add_arguments` adds nothing to them."""
    return _options(SUMMARIES)


def without_login() -> contextlib.AbstractContextManager[None]:
    """Parsers built in the block take only the options a command that does not
    log in to Keystone uses (``--timeout``, ``--insecure``): keystoneauth1 is not
    loaded.  They are for a quick first parse of the command line (see
    :mod:`fornace.cli.client.commandline`), never for help or errors: a parse
    they cannot finish, or one that may need to log in (:func:`may_log_in`), is
    made again with every option."""
    return _options(NO_LOGIN)


def may_log_in(command: Any) -> bool:
    """Whether a command parsed :func:`without_login` could want to log in: it
    sends no token, and OS_CLOUD or OS_AUTH_URL is set (the other ways to ask
    for a login are ``--os-*`` options, which such a parse refuses)."""
    if getattr(command, "token", None) or os.environ.get("FORNACE_TOKEN"):
        return False
    return bool(os.environ.get("OS_CLOUD") or os.environ.get("OS_AUTH_URL"))


def add_arguments(parser: argparse.ArgumentParser,
                  argv: Sequence[str] | None = None) -> list[argparse.Action]:
    """``--os-cloud``, ``--os-region-name``, ``--os-interface``, and keystoneauth1's
    auth options (of ``--os-auth-type``/``OS_AUTH_TYPE``, default ``password``)
    and session options, each defaulting to its ``OS_*`` variable.  Nothing for a
    parser built only for its summary (``fornace --help``), and only ``--timeout``
    and ``--insecure`` :func:`without_login`: keystoneauth1 is not loaded then.
    The options added, in their order."""
    mode = _MODE.get()
    before = len(parser._actions)
    if mode == SUMMARIES:
        return []
    if mode == NO_LOGIN:
        parser.add_argument("--insecure", action="store_true")
        parser.add_argument("--timeout", type=_positive_seconds)
        return parser._actions[before:]
    loading = keystone_loading()
    cloud = parser.add_argument_group("OpenStack credentials", textwrap.fill(
        "With OS_AUTH_URL (--os-auth-url) or OS_CLOUD (--os-cloud) set and no --token, "
        "the command logs in to Keystone (OS_AUTH_TYPE, default password) and sends the "
        "session's token; without --url or FORNACE_URL, Fornace's API is the "
        f"'{SERVICE_TYPE}' endpoint of the catalog. Each --os-* option defaults to its "
        "OS_* variable (--os-password: OS_PASSWORD); they override the values of the "
        f"cloud. --timeout applies to Keystone and Fornace ({DEFAULT_TIMEOUT:.0f} s).",
        77))
    cloud.add_argument("--os-cloud", metavar="NAME", default=os.environ.get("OS_CLOUD"),
                       help="a cloud of clouds.yaml (./, ~/.config/openstack/, "
                            "/etc/openstack/, or $OS_CLIENT_CONFIG_FILE), with secure.yaml "
                            "of those folders (or $OS_CLIENT_SECURE_FILE) merged in, as "
                            "openstacksdk reads them (default: $OS_CLOUD)")
    cloud.add_argument("--os-region-name", metavar="REGION",
                       default=os.environ.get("OS_REGION_NAME"),
                       help="the region of the catalog endpoint (default: $OS_REGION_NAME)")
    cloud.add_argument("--os-interface", metavar="INTERFACE",
                       default=os.environ.get("OS_INTERFACE"),
                       help="public, internal or admin endpoint of the catalog (default: "
                            f"$OS_INTERFACE, else {DEFAULT_INTERFACE})")
    from keystoneauth1 import exceptions

    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        loading.register_auth_argparse_arguments(parser, arguments, default=default_loader())
    except exceptions.NoMatchingPlugin:   # connect() says so, in one line, not the parser
        _register_plugin_options(parser, default_loader())
    loading.register_session_argparse_arguments(parser)
    parser.set_defaults(timeout=None)   # unset: DEFAULT_TIMEOUT
    return parser._actions[before:]


def _positive_seconds(text: str) -> float:
    """--timeout as keystoneauth1's session options take it (a number above 0);
    its message for anything else is the full parse's."""
    seconds = float(text)
    if seconds <= 0:
        raise ValueError(text)
    return seconds


def _register_plugin_options(parser: argparse.ArgumentParser, loader: Any) -> None:
    """The options of ``loader``'s plugin, as keystoneauth1 registers them."""
    group = parser.add_argument_group("Authentication Options")
    for opt in loader.get_options():
        group.add_argument(*opt.argparse_args, default=opt.argparse_default,
                           metavar=opt.metavar, help=opt.help, dest=f"os_{opt.dest}")


def wanted(command: Any) -> bool:
    """Whether the command was given OpenStack credentials (a cloud or an auth URL)."""
    return bool(getattr(command, "os_cloud", None) or getattr(command, "os_auth_url", None))
