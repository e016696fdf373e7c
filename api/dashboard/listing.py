"""Paging and filtering of the dashboard's lists (environments, jobs), on the
server: the filter and the page are query parameters, so a list's links,
bookmarks and the browser's back button keep them, and no script is needed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Sequence
from urllib.parse import urlencode

PER_PAGE = 20
MAX_PER_PAGE = 100
MAX_QUERY = 100          # characters of a text filter kept


@dataclass
class Listing:
    """One page of a filtered list, and what its links need."""

    items: list[Any]
    total: int                     # items after filtering, on every page
    page: int                      # 1-based
    per_page: int
    params: dict[str, str] = field(default_factory=dict)  # the filters, kept in links

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.per_page))

    @property
    def first(self) -> int:
        """The number of the page's first item (1-based; 0 when empty)."""
        return (self.page - 1) * self.per_page + 1 if self.total else 0

    @property
    def last(self) -> int:
        return min(self.total, self.page * self.per_page)

    def link(self, page: int = 1, **changes: str) -> str:
        """The query string of this list at ``page``, with filters changed (an
        empty value drops the filter)."""
        params = {**self.params, **changes}
        if self.per_page != PER_PAGE:
            params["per_page"] = str(self.per_page)
        if page > 1:
            params["page"] = str(page)
        kept = {k: v for k, v in params.items() if v}
        return "?" + urlencode(kept) if kept else ""


def number(text: str | None, default: int, lowest: int, highest: int) -> int:
    """A page number or size from a query parameter: what is not a number is
    the default, and it is kept within ``lowest``..``highest``."""
    if text is None or not re.fullmatch(r"\d{1,6}", text.strip()):
        return default
    return min(highest, max(lowest, int(text.strip())))


def query_text(text: str | None) -> str:
    """A text filter as typed (trimmed, at most :data:`MAX_QUERY` characters)."""
    return (text or "").strip()[:MAX_QUERY]


def paginate(items: Sequence[Any], page: str | None, per_page: str | None,
             params: dict[str, str]) -> Listing:
    """The page ``page`` of ``items`` (past the last page: the last one)."""
    size = number(per_page, PER_PAGE, 1, MAX_PER_PAGE)
    total = len(items)
    last_page = max(1, -(-total // size))
    current = number(page, 1, 1, last_page)
    start = (current - 1) * size
    return Listing(list(items[start:start + size]), total, current, size,
                   {k: v for k, v in params.items() if v})
