"""Reading the dashboard's HTML forms (``application/x-www-form-urlencoded``).

Parsed here rather than with python-multipart: the forms have no file
fields, and one dependency fewer.  The body size is already limited by the
API's body limit middleware.
"""
from __future__ import annotations

from urllib.parse import parse_qsl

from fastapi import Request

from fornace.api.dashboard import csrf
from fornace.api.errors import BadRequest

MAX_FIELDS = 1000


class Form:
    """The fields of a submitted form; a field sent several times keeps every value."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self._values: dict[str, list[str]] = {}
        for name, value in pairs:
            self._values.setdefault(name, []).append(value)

    def get(self, name: str, default: str = "") -> str:
        values = self._values.get(name)
        return values[-1] if values else default

    def getlist(self, name: str) -> list[str]:
        return list(self._values.get(name, []))

    def __contains__(self, name: object) -> bool:
        return name in self._values


async def read_form(request: Request, check_csrf: bool = True) -> Form:
    """The posted form, after the cross-site request check."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise BadRequest("the dashboard's forms are sent as application/x-www-form-urlencoded")
    if check_csrf:
        csrf.check_origin(request)   # before the body is read
    try:
        text = (await request.body()).decode("utf-8")
        form = Form(parse_qsl(text, keep_blank_values=True, max_num_fields=MAX_FIELDS))
    except (UnicodeDecodeError, ValueError):
        raise BadRequest("the form data is malformed") from None
    if check_csrf:
        csrf.check(request, form.get(csrf.FIELD) or None)
    return form
