"""How a trace names what a rule matched, in the words every reader shows.

A rule event (``fornace workflow simulate``'s and a job's trace alike) names
the object by its model path, its id, its host (``state.hostname``) and the
rule's ``desc``, and gives its ``cause``: what the match's filters read
(``state.kvDeployed: absent``).  Records kept before Fornace recorded hosts
and causes have neither; they read as before.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator


def matched_text(event: dict[str, Any]) -> str:
    """``services.0.units.1 (id, host kv-1)  -- desc``."""
    said = [str(event["id"])] if event.get("id") is not None else []
    if event.get("host"):
        said.append(f"host {event['host']}")
    what = f" ({', '.join(said)})" if said else ""
    desc = f"  -- {event['desc']}" if event.get("desc") else ""
    return f"{event.get('object')}{what}{desc}"


def cause_text(event: dict[str, Any]) -> str:
    """``state.kvDeployed: absent, type: 'linuxApp'`` ("" without a cause)."""
    cause = event.get("cause")
    if not isinstance(cause, list):
        return ""
    return ", ".join(str(item) for item in cause)


def trace_events(document: dict[str, Any] | None) -> Iterator[dict[str, Any]]:
    """The events of a job's trace document, round after round (none: no document)."""
    for entry in (document or {}).get("rounds") or []:
        yield from entry.get("events") or []


def unit_hosts(events: Iterable[dict[str, Any]]) -> dict[str, str]:
    """unit id -> host, from the rule events of a trace (for naming action targets)."""
    return {str(e["id"]): str(e["host"]) for e in events
            if e.get("e", "rule") == "rule" and e.get("id") is not None and e.get("host")}
