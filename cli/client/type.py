"""``fornace type list|show``: the service types of the API, and checking services
against them.

The types are the API's (``GET /types``, ``GET /types/{name}``): those of
the data folder it runs on, not this installation's built-in ones, and with
``--env ENV`` also those of the workflow packages the environment is pinned
to (``?environment=ID``).  ``fornace
service add|update`` checks a service's fields against its type as the API
serves it, with the API's own validation code (:mod:`fornace.api.specs` on
the schema the API gives), so that a mistake is named before anything
changes; only an API without ``/types`` (an older Fornace) has services
checked against the built-in types, and the command says so.

Kept light: the validation modules are imported when a service is checked,
not when ``fornace --help`` lists the commands.
"""
from __future__ import annotations

import argparse
import json
import urllib.parse
from typing import TYPE_CHECKING, Any

from fornace.cli.client.common import (OK, add_command, add_group, dispatch,
                                       find_environment, note)
from fornace.cli.client.http import ApiClient, ClientError
from fornace.cli.client.formats import add_format_option, emit, print_table
from fornace.common.errors import FornaceError

if TYPE_CHECKING:
    from fornace.common.catalog import Catalog
    from fornace.common.typeschema import TypeSpec


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    actions = add_group(
        subparsers, "type", "list or show the service types of the API",
        "The service types the API knows: those of the data folder it runs on "
        "(types.json), with their operations and the fields their services take. "
        "'fornace service add' and 'update' check services against them.",
        ["fornace type list", "fornace type show linuxWebServer",
         "fornace type show linuxWebServer --json"])
    listing = add_command(
        actions, "list", "list the service types",
        "List the service types of the API: name, whether abstract (a base type no "
        "service has), the type it extends, its operations and description.",
        ["fornace type list", "fornace type list -f value | cut -f1",
         "fornace type list --env demo"])
    add_env_option(listing)
    add_format_option(listing)
    show = add_command(
        actions, "show", "show a service type: its fields and operations",
        "Show a service type: its ancestors, operations, and the fields of its services "
        "and units (JSON type, required, default, secret); --json gives the API's "
        "document with the type's whole JSON Schema ('extends' merged in).",
        ["fornace type show linuxWebServer", "fornace type show webServer --json",
         "fornace type show linuxApp -f yaml"])
    show.add_argument("type_name", metavar="NAME", help="a type name (see fornace type list)")
    add_env_option(show)
    add_format_option(show)


def add_env_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", dest="environment", metavar="ENV",
                        help="an environment (id or name): its types, with those of the "
                             "workflow packages it is pinned to")


def run(conf: Any) -> int:
    return dispatch(conf.command, {"type": _run})


def _run(command: Any, client: ApiClient) -> int:
    return {"list": list_types, "show": show_type}[command.type_action](command, client)


# -- the commands ------------------------------------------------------------------------

def _query(client: ApiClient, command: Any) -> str:
    """``?environment=ID`` of ``--env``, or nothing."""
    if not command.environment:
        return ""
    return environment_query(find_environment(client, command.environment)["id"])


def environment_query(env_id: str | None) -> str:
    return f"?environment={urllib.parse.quote(env_id, safe='')}" if env_id else ""


def list_types(command: Any, client: ApiClient) -> int:
    query = _query(client, command)
    try:
        document = client.get(f"/types{query}")
    except ClientError as exc:
        if exc.status == 404:
            raise FornaceError(older_api(client)) from None
        raise
    rows = type_rows(document.get("types") or [])
    emit(command, document, rows, lambda: print_table(
        ("NAME", "ABSTRACT", "EXTENDS", "OPERATIONS", "DESCRIPTION"), rows,
        empty="(no types)"))
    return OK


def type_rows(types: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(t.get("name"), "yes" if t.get("abstract") else "no", t.get("extends"),
             ",".join(t.get("operations") or []), t.get("description") or t.get("title"))
            for t in types]


def show_type(command: Any, client: ApiClient) -> int:
    document = fetch_type(client, command.type_name, _query(client, command))
    rows = field_rows(document)
    emit(command, document, rows, lambda: print("\n".join(type_lines(document))))
    return OK


def fetch_type(client: ApiClient, name: str, query: str = "") -> dict[str, Any]:
    """``GET /types/{name}`` (``query``: :func:`environment_query`); an API without
    ``/types`` is an error saying so."""
    try:
        return client.get(f"/types/{urllib.parse.quote(name, safe='')}{query}")
    except ClientError as exc:
        if exc.status != 404 or "known" in exc.error:
            raise
        if not has_types(client):
            raise FornaceError(older_api(client)) from None
        raise ClientError(f"unknown service type {name!r} (see 'fornace type list')", 404,
                          exc.error, exc.call) from None


def older_api(client: ApiClient) -> str:
    return f"the API at {client.url} has no service types route (/types): an older Fornace"


def has_types(client: ApiClient) -> bool:
    """Whether the API serves ``/types`` (False: an older one, 404)."""
    try:
        client.get("/types")
    except ClientError as exc:
        if exc.status == 404:
            return False
        raise
    return True


def field_rows(document: dict[str, Any]) -> list[tuple[Any, ...]]:
    """A row per field: service fields, then unit fields (``units[].NAME``)."""
    rows = []
    for prefix, key in (("", "fields"), ("units[].", "unit_fields")):
        for field in document.get(key) or []:
            notes = [word for word, on in (("secret", field.get("secret")),
                                           ("not in forms", field.get("form") is False))
                     if on]
            default = field.get("default")
            rows.append((prefix + str(field.get("name")), "|".join(field.get("kinds") or [])
                         or "any", "yes" if field.get("required") else "no",
                         None if default is None else json.dumps(default),
                         ", ".join(notes), field.get("title") or field.get("description")))
    return rows


def type_lines(document: dict[str, Any]) -> list[str]:
    """The table view of ``fornace type show``."""
    from fornace.cli.client.formats import table

    name = document.get("name")
    lines = [f"type {name}" + (" (abstract: no service has it)" if document.get("abstract")
                               else "")]
    for label, value in (("description", document.get("description")),
                         ("extends", " > ".join(document.get("parents") or []) or None),
                         ("doc", document.get("doc"))):
        if value:
            lines.append(f"{label}: {value}")
    operations = [op.get("name") + ("" if op.get("implemented") else " (does nothing)")
                  for op in document.get("operations") or []]
    lines.append(f"operations: {', '.join(operations) or 'none'}")
    instance = document.get("instance") or {}
    if instance:
        lines.append("instance: " + ", ".join(f"{key} {json.dumps(value).strip(chr(34))}"
                                              for key, value in instance.items()))
    low, high = document.get("min_units"), document.get("max_units")
    if low is not None:
        lines.append(f"units: {low}..{high if high is not None else 'any'}")
    rows = field_rows(document)
    if rows:
        lines += ["", table(("FIELD", "TYPE", "REQUIRED", "DEFAULT", "NOTES", "ABOUT"),
                            rows)]
    elif document.get("schema") is None:
        lines.append("fields: the API declares no create spec for it")
    return lines


# -- checking services against the API's types ------------------------------------------

class ServerTypes:
    """The create specs of the API's types, each fetched once (``GET
    /types/{name}``; with ``environment``, an id, that environment's types),
    to check services with before sending them.

    :meth:`spec` raises :class:`~fornace.api.specs.SpecError` on the ``type``
    field for a type the API does not know, or an abstract one; it gives None
    when there is nothing to check against here (the API will judge).  An API
    without ``/types`` has the built-in types used instead, said once.
    """

    def __init__(self, client: ApiClient, environment: str | None = None) -> None:
        self.client = client
        self.query = environment_query(environment)   # its pinned packages' types too
        self.builtin: bool | None = None    # None: not known yet
        self._catalogs: dict[str, Catalog | None] = {}

    def spec(self, kind: Any) -> TypeSpec | None:
        if not isinstance(kind, str):
            return None
        catalog = self.catalog(kind)
        return None if catalog is None else catalog.service_types.get(kind)

    def catalog(self, kind: Any) -> Catalog | None:
        """A catalog whose create spec of ``kind`` is the API's (for
        :func:`fornace.api.specs.validate_create`); the built-in one for a
        ``kind`` that is not a name, whose check is then the ``type`` field's."""
        from fornace.common.catalog import builtin_catalog

        if not isinstance(kind, str) or not kind:
            return builtin_catalog()
        if kind not in self._catalogs:
            self._catalogs[kind] = self._load(kind)
        return self._catalogs[kind]

    def _load(self, kind: str) -> Catalog | None:
        from fornace.api.specs import SpecError
        from fornace.common.catalog import builtin_catalog

        if not self.builtin:
            try:
                document = fetch_type(self.client, kind, self.query)
            except FornaceError:              # an older API: no /types at all
                self._use_builtin()
            except ClientError as exc:
                if exc.status == 403:         # the policy hides the types: the API judges
                    note(f"{kind} services are not checked here: {exc}")
                    return None
                if exc.status != 404:
                    raise
                raise SpecError("type", str(exc)) from None
            else:
                self.builtin = False
                return self._from_document(kind, document)
        builtin = builtin_catalog()
        return builtin if kind in builtin.service_types else None   # not judged here

    def _use_builtin(self) -> None:
        if self.builtin is None:
            note(f"the API at {self.client.url} has no /types (an older Fornace): services "
                 f"are checked against this fornace's built-in types")
        self.builtin = True

    def _from_document(self, kind: str, document: dict[str, Any]) -> Catalog | None:
        from fornace.api.specs import SpecError
        from fornace.common.catalog import Catalog, CatalogError, TypeInfo

        if document.get("abstract"):
            raise SpecError("type", f"{kind!r} is an abstract type: no service has it (see "
                                    f"'fornace type list')")
        schema = document.get("schema")
        if not isinstance(schema, dict):
            return None     # the API declares no create spec: it judges alone
        try:
            return Catalog({kind: TypeInfo(name=kind, schema=schema)})
        except CatalogError as exc:   # a newer API's keyword or named check
            note(f"{kind} services are not checked here: this fornace cannot read the "
                 f"API's schema of the type ({exc}); the API checks them")
            return None


def check_new(services: list[dict[str, Any]], origins: list[str], types: ServerTypes) -> None:
    """Check services to add as the API will (strictly), each against its type as
    the API serves it; a :class:`FornaceError` names the entry (``services[1]``
    when there are several, as the API names them), the field and the file."""
    from fornace.api import specs

    for index, service in enumerate(services):
        try:
            catalog = types.catalog(service.get("type"))
            if catalog is not None:
                specs.validate_create(service, catalog)
        except specs.SpecError as exc:
            field = exc.field
            if len(services) > 1:
                place = f"services[{index}]"
                field = place if field == "service" else f"{place}.{field}"
            raise FornaceError(f"{field}: {exc.message} ({origins[index]})") from None


def check_changed(service: dict[str, Any], touched: set[str], types: ServerTypes) -> None:
    """Check the fields an update touched (dotted: their top-level field) against
    the service's type as the API serves it.  Untouched fields are left alone:
    they were checked when stored, and secrets come back masked (``***``)."""
    from fornace.api import specs
    from fornace.common.secrets import MASK, is_secret_key

    spec = types.spec(service.get("type"))
    if spec is None:
        return
    names = {field.split(".")[0] for field in touched} - set(specs.MANAGED_KEYS)
    units = (spec.schema.get("properties") or {}).get("units")
    for name in sorted(names):
        value = service.get(name)
        if name == "units" and isinstance(units, dict):
            if value is None:
                raise specs.SpecError("units", "required")
            specs.check_value(units, value, "units")
            continue
        field = spec.all_fields.get(name)
        if field is None:
            continue          # not declared: the API keeps it unchecked (a note says so)
        if value is None:
            if field.required:
                raise specs.SpecError(name, "required")
            continue
        if value == MASK and (field.secret or is_secret_key(name)):
            continue          # a masked secret: the API keeps the stored one
        specs.check_value(field.schema, value, name,
                          secret=field.secret or is_secret_key(name))
