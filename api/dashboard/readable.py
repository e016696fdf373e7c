"""Reports and task summaries as a person reads them, not as raw JSON.

A check script answers with one JSON line (``{"status": "error", "detail":
"no answer on http://..."}``); when it fails, the agent's failure reads
``CommandFailed; check_server.py exited with code 1; stderr: {...}`` and the
conductor's report embeds that (``Check of web1: error (CommandFailed; ...)``).
The pages show what failed and where instead::

    Check of web1: error — no answer on http://...; check_server.py exited with code 1

Any other JSON object in a text reads as ``key: value`` pairs.  What the API
stored is masked already; a key named like a secret is masked here too, so
no reading of a text can show more than the text held.
"""
from __future__ import annotations

import ast
import json
import re
from typing import Any

from fornace.common.secrets import MASK, is_secret_key

LIMIT = 20_000      # longer texts are shown as they are
_TRIES = 20         # at most this many '{' are tried as the start of a JSON object
_DECODER = json.JSONDecoder()
# a conductor's check report: "Check of web1: error (the failure)" (a unit's name
# is short: the head is looked for in the first few hundred characters only)
_CHECK_REPORT = re.compile(r"Check of [^\n]{1,300}?: (?:ok|degraded|error) \(")
# an agent's failed command: "CommandFailed; script.py exited with code 1; stderr: {...}"
_FAILED = re.compile(r"(?:[A-Z][A-Za-z]*; )?(?P<what>[^;{}]*?); stderr: (?P<json>\{.*\})", re.S)
_VERDICT = ("status", "detail")


def readable(text: str | None) -> str:
    """``text`` (a report's text, a task's summary) with the JSON it embeds
    read out (see the module's doc); other texts as they are."""
    if not text:
        return ""
    if len(text) > LIMIT:
        return text
    check = _CHECK_REPORT.match(text)
    if check and text.endswith(")"):
        return f"{text[:check.end() - 2]} — {_failure(text[check.end():-1])}"
    found = re.fullmatch(r"ok: (?P<json>\{.*\})", text, re.S)
    if found:
        value = _object(found.group("json"))
        if isinstance(value, dict) and "status" in value:   # a check's verdict
            return _object_text(value)
    return _failure(text)


def _failure(text: str) -> str:
    """A failed command's summary as what failed (``detail; how it ended``), or
    the text with its JSON objects as text."""
    found = _FAILED.fullmatch(text)
    if found:
        value = _object(found.group("json"))
        if isinstance(value, dict):
            verdict = dict(value)
            if verdict.get("status") == "error" and verdict.get("detail"):
                verdict.pop("status")   # said already: the command failed
            return f"{_object_text(verdict)}; {found.group('what').strip()}"
    return _objects_as_text(text)


def details_text(details: Any) -> str:
    """A report's details: a JSON (or, from an older conductor, a Python
    literal) object or list as ``key: value`` lines; other text as it is."""
    if details is None:
        return ""
    text = str(details)
    stripped = text.strip()
    if len(stripped) > LIMIT or stripped[:1] not in ("{", "["):
        return text
    try:
        value = json.loads(stripped)
    except ValueError:
        try:
            value = ast.literal_eval(stripped)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return text
    if isinstance(value, dict):
        return "\n".join(f"{key}: {_value_text(key, item)}" for key, item in value.items())
    if isinstance(value, list):
        return "\n".join(_value_text("", item) for item in value)
    return text


def _object(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _objects_as_text(text: str) -> str:
    """Each JSON object in ``text`` replaced by its :func:`_object_text`."""
    start, tries = 0, 0
    while tries < _TRIES:
        at = text.find("{", start)
        if at < 0:
            break
        tries += 1
        try:
            value, end = _DECODER.raw_decode(text, at)
        except (ValueError, RecursionError):
            start = at + 1
            continue
        if not isinstance(value, dict) or not value:
            start = end
            continue
        shown = _object_text(value)
        text = text[:at] + shown + text[end:]
        start = at + len(shown)
    return text


def _object_text(value: dict[str, Any]) -> str:
    """A check's verdict as ``status: detail``; another object as ``key: value``
    pairs; secrets masked."""
    if set(value) <= set(_VERDICT) and value:
        shown = [str(value[key]) for key in _VERDICT if value.get(key) not in (None, "")]
        return ": ".join(shown)
    return "; ".join(f"{key}: {_value_text(key, item)}" for key, item in value.items())


def _value_text(key: Any, value: Any) -> str:
    if isinstance(key, str) and is_secret_key(key) and value not in (None, ""):
        return MASK
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "{" + _object_text(value) + "}"
    return json.dumps(value, ensure_ascii=False, default=str)
