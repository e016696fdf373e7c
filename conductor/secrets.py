"""Keeping secrets out of reports, traces and logs.

A field is secret when its name is ``token`` or ends in ``password``
(any case, e.g. ``adminPassword``, ``saPassword``).  Their values are also
masked wherever they appear inside free text, such as a report a workflow
composed from a selected password.
"""
from __future__ import annotations

from typing import Any, Iterable

MASK = "***"
_MIN_LENGTH = 4  # shorter values would mask ordinary words


def is_secret_key(key: Any) -> bool:
    if not isinstance(key, str):
        return False
    lowered = key.lower()
    return lowered.endswith("password") or lowered in ("token", "auth_token", "secret")


def find_secrets(value: Any, found: set[str] | None = None) -> set[str]:
    """Every string value stored under a secret key, anywhere in ``value``."""
    found = set() if found is None else found
    if isinstance(value, dict):
        for key, item in value.items():
            if is_secret_key(key) and isinstance(item, str) and len(item) >= _MIN_LENGTH:
                found.add(item)
            else:
                find_secrets(item, found)
    elif isinstance(value, list):
        for item in value:
            find_secrets(item, found)
    return found


def mask_text(text: str, secrets: Iterable[str]) -> str:
    """Mask every secret inside ``text`` (longest first, so none leaks in part)."""
    for secret in sorted(secrets, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def masked(value: Any, secrets: Iterable[str] = ()) -> Any:
    """A copy of ``value`` with secret fields and secret substrings masked."""
    secrets = tuple(secrets)
    if isinstance(value, dict):
        return {k: (MASK if is_secret_key(k) and v is not None else masked(v, secrets))
                for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v, secrets) for v in value]
    if isinstance(value, str) and secrets:
        return mask_text(value, secrets)
    return value
