"""The configuration session the client commands edit, remembered between commands.

In the 0.2 API, changes to an environment's services are made in a
configuration session and take effect when that session is deployed; the API
has no route listing sessions.  ``fornace service add`` and a later ``fornace
deploy`` must still work on the same session, so its id is kept in a small
file (``~/.fornace/cli-sessions.json``, or ``$FORNACE_SESSIONS``), per API
URL, tenant and environment.  A remembered session that was deployed, deleted
or became invalid (another job changed the environment since) is forgotten
and a new one opened.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from fornace.cli.client.common import note
from fornace.cli.client.http import ApiClient, ClientError

DEFAULT_FILE = "~/.fornace/cli-sessions.json"


def sessions_file() -> Path:
    return Path(os.path.expanduser(os.environ.get("FORNACE_SESSIONS") or DEFAULT_FILE))


class Sessions:
    """Open, find and forget the session the commands edit, for one API client."""

    def __init__(self, client: ApiClient, path: Path | None = None) -> None:
        self.client = client
        self.path = path or sessions_file()

    def current(self, env_id: str) -> str | None:
        """The remembered session of ``env_id`` if it can still be edited and deployed."""
        session_id = self._load().get(self._key(env_id))
        if session_id is None:
            return None
        try:
            session = self.client.get(f"/environments/{env_id}/sessions/{session_id}")
        except ClientError as exc:
            if exc.status not in (403, 404):
                raise
            if exc.status == 403:   # e.g. another job changed the environment since
                note(f"the changes of session {session_id} are lost: {exc}")
            self.forget(env_id)
            return None
        if session.get("state") != "open":
            self.forget(env_id)
            return None
        return session_id

    def open(self, env_id: str) -> tuple[str, bool]:
        """The session to edit (the remembered one, else a new one) and whether it is new."""
        current = self.current(env_id)
        if current is not None:
            return current, False
        session_id = self.client.post(f"/environments/{env_id}/configure")["id"]
        self.remember(env_id, session_id)
        return session_id, True

    def remember(self, env_id: str, session_id: str) -> None:
        sessions = self._load()
        sessions[self._key(env_id)] = session_id
        self._save(sessions)

    def forget(self, env_id: str) -> None:
        sessions = self._load()
        if sessions.pop(self._key(env_id), None) is not None:
            self._save(sessions)

    def _key(self, env_id: str) -> str:
        return f"{self.client.url} {self.client.tenant or '-'} {env_id}"

    def _load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}   # none yet, or damaged: sessions are only a convenience
        return data if isinstance(data, dict) else {}

    def _save(self, sessions: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(self.path.name + ".tmp")
        temporary.write_text(json.dumps(sessions, indent=1), encoding="utf-8")
        os.replace(temporary, self.path)
