"""What the service form says about each field: label, help, default, whether
it is offered at all -- read from the type catalog file (``data/types.json``).

The file's ``fields`` section maps a catalog type to its fields' entries
(``unitFields``: the fields of its own units)::

    "linuxWebServer": {"port": {"label": "Port", "help": "...", "default": 8080},
                       "domain": {"label": "Domain", "help": "...", "form": false}}

A type inherits its ancestors' entries along the catalog's ``extends``,
merged key by key (``linuxService`` may give ``osImage`` only a default).
``form: false`` leaves out a field the type's workflows do not use (the API
still accepts and keeps it); ``input: services`` makes a list of ids a choice
among the environment's other services.  The fields themselves, their kinds
and checks, are :mod:`fornace.api.specs`'s.

``load_catalog`` ignores these sections; this module checks them and names
the file and the entry of a mistake.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fornace.common.catalog import Catalog, CatalogError, load_catalog
from fornace.common.errors import FornaceError
from fornace.common.resources import BUILTIN_DATA

CATALOG_FILE = BUILTIN_DATA / "types.json"
SECTIONS = ("fields", "unitFields")
ENTRY_KEYS = frozenset({"label", "help", "default", "form", "input"})
INPUTS = ("services",)     # the kinds of ``input``


class FieldInfoError(FornaceError):
    """A mistake in the ``fields``/``unitFields`` sections of the catalog file."""


@dataclass(frozen=True)
class FieldInfo:
    """What the form shows of one field.  ``declared`` is False when the
    catalog has no label for it (the form then shows the field's name)."""

    name: str
    label: str
    help: str
    default: Any = None
    shown: bool = True
    input: str | None = None
    declared: bool = True


@dataclass(frozen=True)
class FormCatalog:
    """The ``fields`` and ``unitFields`` sections of one catalog file."""

    path: Path
    catalog: Catalog
    fields: dict[str, dict[str, dict[str, Any]]]
    unit_fields: dict[str, dict[str, dict[str, Any]]]

    def _ancestry(self, type_name: str) -> list[str]:
        """The type and its ancestors, farthest first (how entries are merged)."""
        if self.catalog.known(type_name):
            return list(reversed(self.catalog.ancestry(type_name)))
        return ["service", type_name]

    def _merged(self, section: dict[str, dict[str, dict[str, Any]]],
                type_name: str) -> dict[str, dict[str, Any]]:
        merged: dict[str, dict[str, Any]] = {}
        for name in self._ancestry(type_name):
            for field, entry in section.get(name, {}).items():
                merged.setdefault(field, {}).update(entry)
        return merged

    def field(self, type_name: str, name: str, fallback_help: str = "") -> FieldInfo:
        """A service field of ``type_name``; an undeclared one shows its name
        and ``fallback_help`` (the spec's doc)."""
        return _info(name, self._merged(self.fields, type_name).get(name), fallback_help)

    def unit_field(self, type_name: str, name: str, fallback_help: str = "") -> FieldInfo:
        """A field of the units of ``type_name``."""
        return _info(name, self._merged(self.unit_fields, type_name).get(name), fallback_help)

    def declared(self, type_name: str) -> dict[str, dict[str, Any]]:
        """Every merged entry of a type's service fields (for the tests)."""
        return self._merged(self.fields, type_name)


def _info(name: str, entry: dict[str, Any] | None, fallback_help: str) -> FieldInfo:
    entry = entry or {}
    label = entry.get("label")
    return FieldInfo(name=name, label=label or name, help=entry.get("help") or fallback_help,
                     default=entry.get("default"), shown=entry.get("form", True),
                     input=entry.get("input"), declared=bool(label))


def read(path: str | Path) -> FormCatalog:
    """The form sections of a catalog file, checked; :class:`FieldInfoError`
    names the file and the entry of a mistake."""
    path = Path(path)
    try:
        catalog = load_catalog(path)
        document = json.loads(path.read_text(encoding="utf-8"))
    except CatalogError as exc:
        raise FieldInfoError(str(exc)) from None
    sections = {}
    for key in SECTIONS:
        sections[key] = _section(path, key, document.get(key, {}), catalog)
    return FormCatalog(path, catalog, sections["fields"], sections["unitFields"])


def _section(path: Path, key: str, section: Any,
             catalog: Catalog) -> dict[str, dict[str, dict[str, Any]]]:
    if not isinstance(section, dict):
        raise FieldInfoError(f"{path}: {key!r} must be an object of catalog types")
    checked: dict[str, dict[str, dict[str, Any]]] = {}
    for type_name, entries in section.items():
        if type_name == "doc":
            continue
        where = f"{path}: {key}.{type_name}"
        if not catalog.known(type_name):
            raise FieldInfoError(f"{where}: not a type of the catalog's 'types'")
        if not isinstance(entries, dict):
            raise FieldInfoError(f"{where} must be an object of fields")
        checked[type_name] = {name: _entry(f"{where}.{name}", entry)
                              for name, entry in entries.items()}
    return checked


def _entry(where: str, entry: Any) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise FieldInfoError(f"{where} must be an object (label, help, default, form, input)")
    unknown = set(entry) - ENTRY_KEYS
    if unknown:
        raise FieldInfoError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} "
                             f"(allowed: {', '.join(sorted(ENTRY_KEYS))})")
    for text in ("label", "help"):
        if text in entry and (not isinstance(entry[text], str) or not entry[text].strip()):
            raise FieldInfoError(f"{where}.{text} must be a non-empty string")
    if "form" in entry and not isinstance(entry["form"], bool):
        raise FieldInfoError(f"{where}.form must be true or false")
    if "input" in entry and entry["input"] not in INPUTS:
        raise FieldInfoError(f"{where}.input must be one of {', '.join(INPUTS)}")
    return dict(entry)


@functools.lru_cache(maxsize=4)
def _cached(path: str) -> FormCatalog:
    return read(path)


def form_catalog(path: str | Path = CATALOG_FILE) -> FormCatalog:
    """The form sections of ``path`` (the built-in catalog), read once."""
    return _cached(str(path))
