"""Ids that come from outside (a URL, a header, a query, a message) checked
before they reach the database.

A NUL must not reach the database: PostgreSQL refuses it in a text query
parameter (a DataError, a 500).  Longer than the id columns, no stored id
equals it either: such a value is simply not found.
"""
from __future__ import annotations

from fornace.api.errors import NotFound
from fornace.common import names

ID_LENGTH = names.ID_MAX  # of the String(64) id columns


def could_be_id(value: str) -> bool:
    """Whether a stored id could equal ``value`` (from a URL, a header, a query)."""
    return names.fits_id_column(value)


def lookup_id(value: str, what: str) -> str:
    """``value``, to look up by; NotFound for one that no stored id can equal."""
    if not could_be_id(value):
        raise NotFound(f"{what} {value!r:.80} not found")
    return value
