"""How every page of the dashboard shows a time and an environment's status.

One format of time on every page and in the progress script's notes:
``2026-11-28 10:31:05 UTC`` -- the API's times are UTC, and a page read by
people in several places (or a screenshot in a ticket) must not depend on
the reader's clock.

An environment's REST status stays Murano 0.2's (``ready`` for one never
deployed: clients rely on it); the dashboard shows such an environment as
``new`` (not deployed), in a neutral colour, so a green "ready" does not
claim a deployment that never happened.
"""
from __future__ import annotations

import datetime
import re
from typing import Any, Mapping

NEW = "new"          # ready, version 0: never deployed
_TEXTS = {NEW: "new — not deployed"}
_TITLES = {NEW: "created but never deployed (the API reports it as ready, as Murano 0.2 does)"}


def when(value: Any) -> str:
    """A time of the API (ISO 8601 in UTC, without a zone as Murano 0.2 writes
    it, or with one) as the pages show it: ``2026-11-25 17:57:29 UTC``; empty
    for no time; a text that is not a time, as it is."""
    if not value:
        return ""
    if isinstance(value, datetime.datetime):
        moment = value
    else:
        text = str(value).strip()
        try:
            moment = datetime.datetime.fromisoformat(re.sub(r"Z$", "+00:00", text))
        except ValueError:
            return text
    if moment.tzinfo is not None:
        moment = moment.astimezone(datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def now() -> str:
    """This moment as :func:`when` shows a time."""
    return when(datetime.datetime.now(datetime.timezone.utc))


def shown_status(env: Mapping[str, Any]) -> str:
    """The status the dashboard shows for an environment view: its REST status,
    but :data:`NEW` for one that was never deployed and runs nothing."""
    status = str(env.get("status") or "")
    return NEW if status == "ready" and env.get("version") == 0 else status


def status_text(status: str) -> str:
    """What a shown status reads as (``new — not deployed``)."""
    return _TEXTS.get(status, status)


def status_title(status: str) -> str:
    """The tooltip explaining a shown status (empty: none)."""
    return _TITLES.get(status, "")
