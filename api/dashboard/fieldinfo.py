"""What the service form says about each field: label, help, default, whether
it is offered at all -- read from the field's schema in the type catalog
(``data/types.json``, :mod:`fornace.common.typeschema`)::

    "port": {"type": "integer", "minimum": 1, "maximum": 65535,
             "title": "Port", "description": "...", "default": 8080}

``title`` is the label, ``description`` the help, ``default`` fills the
form of a new service; ``x-form: false`` leaves out a field the type's
workflows do not use (the API still accepts and keeps it); ``x-input:
services`` makes a list of ids a choice among the environment's other
services.  A type inherits all of it along the catalog's ``extends``
(``linuxService`` gives ``osImage`` only a default), merged when the catalog
is read -- which also refuses a malformed entry, naming the file and type.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fornace.common.typeschema import FieldSpec


@dataclass(frozen=True)
class FieldInfo:
    """What the form shows of one field.  ``declared`` is False when the
    schema gives it no title (the form then shows the field's name)."""

    name: str
    label: str
    help: str
    default: Any = None
    shown: bool = True
    input: str | None = None
    declared: bool = True
    secret: bool = False


def field_info(field: FieldSpec) -> FieldInfo:
    """The form's view of one field of a type's (merged) schema."""
    return FieldInfo(name=field.name, label=field.title or field.name, help=field.doc,
                     default=field.default, shown=field.shown, input=field.input,
                     declared=bool(field.title), secret=field.secret)
