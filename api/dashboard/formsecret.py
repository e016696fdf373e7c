"""The server secret the dashboard signs its form tokens with.

``[api] dashboard_secret`` when the operator sets it (needed when several
machines serve one dashboard), else a random secret made once and kept in the
state folder (``<state_dir>/dashboard_secret``, readable by its owner only),
so that every worker process of ``fornace api`` and a restarted API sign alike.
The secret is never logged nor shown.
"""
from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path

from fornace.common.errors import FornaceError

FILE_NAME = "dashboard_secret"
OPTION = "[api] dashboard_secret"
MIN_LENGTH = 16


class FormSecretError(FornaceError, ValueError):
    """A configured secret that is too short, or a secret file that cannot be used."""


def form_secret(configured: str | None, state_dir: str | os.PathLike[str]) -> bytes:
    """The configured secret, else the state folder's (made when it has none)."""
    if configured is not None and configured.strip():
        if len(configured.strip()) < MIN_LENGTH:
            raise FormSecretError(f"{OPTION} is too short: give at least {MIN_LENGTH} "
                                  f"characters (e.g. the output of `openssl rand -hex 32`)")
        return configured.strip().encode("utf-8")
    return _kept_secret(Path(os.path.expanduser(state_dir)) / FILE_NAME)


def _kept_secret(path: Path) -> bytes:
    """The secret in ``path``; made (atomically: processes starting together
    read the same one) when the file does not exist."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            _make(path)
        value = path.read_bytes().strip()
    except OSError as exc:
        raise FormSecretError(f"the dashboard's secret file {path} cannot be used "
                              f"({exc.strerror or exc}); set {OPTION} instead") from None
    if len(value) < MIN_LENGTH:
        raise FormSecretError(f"the dashboard's secret file {path} holds too short a "
                              f"secret: delete it (a new one is made) or set {OPTION}")
    return value


def _make(path: Path) -> None:
    """Write a new secret to ``path`` unless another process did first."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{FILE_NAME}.")
    try:
        with os.fdopen(fd, "w") as handle:   # mkstemp: mode 0600
            handle.write(secrets.token_urlsafe(48) + "\n")
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass   # another process made it first: theirs is the one
    finally:
        os.unlink(temporary)
