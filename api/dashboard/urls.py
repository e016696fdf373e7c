"""The URLs the dashboard builds: every path segment and query value quoted.

Ids, names of packages, actions and workflow files are data: an id such as
``../../packages/new?x=`` must stay one segment of the link, and a control
character must never reach an ``href`` or a ``Location`` header raw.  So the
pages and the redirects build their URLs here (the templates through the
``url`` function, :func:`link`), never by pasting text together.
"""
from __future__ import annotations

from typing import Any, Optional
from urllib.parse import quote, urlencode

from jinja2 import pass_context
from jinja2.runtime import Context


def path(*segments: Any, anchor: Optional[str] = None, **query: Any) -> str:
    """``/seg/seg?name=value#anchor``, each segment, query value and the anchor
    quoted (a query value keeps its ``/``: a path given as ``?next=`` stays
    readable; ``None`` query values are left out)."""
    text = "/" + "/".join(quote(str(segment), safe="") for segment in segments)
    kept = {name: str(value) for name, value in query.items() if value is not None}
    if kept:
        text += "?" + urlencode(kept, safe="/", quote_via=quote)   # '/' is plain in a query
    if anchor is not None:
        text += "#" + quote(str(anchor), safe="")
    return text


@pass_context
def link(context: Context, *segments: Any, anchor: Optional[str] = None, **query: Any) -> str:
    """Templates' ``url('environments', env.id, 'jobs', job.id)``: :func:`path`
    below where the dashboard is mounted (a template importing macros that
    use it imports them ``with context``)."""
    return context["base"] + path(*segments, anchor=anchor, **query)
