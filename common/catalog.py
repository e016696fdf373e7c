"""The type catalog: what lifecycle actions know about each service type.

``data/types.json`` declares, per service type (data, not code):

* ``extends``: the parent type (``type_names`` filters match subtypes);
* ``abstract``: a base type no service has;
* ``operations``: name -> ``null`` (declared, does nothing) or
  ``{template, inputs, unit}``: the agent template run on a unit, its
  mappings, and (optional) which unit's agent runs it;
* ``unlink``: operations run before a unit leaves (scale in, heal,
  uninstall), same shape plus ``when`` (a path that must be true);
* ``references``: service fields whose value names another service,
  ``{field: {type, key}}`` (``domain`` -> the activeDirectory whose ``domain``
  is that domain): the topology's dependencies besides ``dependsOn``;
* ``instance``: how the units of its services get their instances, inherited
  key by key along ``extends``: ``template`` (the Heat template of one unit's
  instance), ``image`` (the kind of image it boots: ``linux``, the Linux
  instance rules of ``data/workflows/Common.xml`` create the instances of
  such a type's units; ``windows``, those of ``Windows.xml``) and
  ``loadBalancer`` (true: ``LinuxFarm.xml`` puts a load balancer instance of
  the same template in front of the units).  The conductor shows them to the
  workflows as each service's ``temp.instance`` (:func:`with_type_views`), so
  a type that extends ``linuxService`` needs no instance rule of its own;
* ``schema``: the create spec of its services, JSON Schema inherited along
  ``extends`` (:mod:`fornace.common.typeschema`; the API validates with it and
  the dashboard's service form is made from it).  A mistake in a schema is
  refused when the catalog is read, naming the file, the line and the type;
  so is a ``pattern`` RE2 cannot run (:mod:`fornace.common.patterns`).

The file is read with :func:`fornace.common.jsonlimits.loads`: nested deeper
than the depth given (100 levels unless told), it is refused naming the line.

Inputs are templates evaluated at the unit: a string is a template where
``{path}`` is replaced by the value at that path (paths as in the workflows:
``state.address`` below the unit, ``::port`` on its service) and
``{path|default}`` gives a default; a string that is only ``{path}`` keeps
the value's type.  Anything else is a constant.
"""
from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from fornace.common.cursor import Cursor, get_path, start_cursor, unit_cursors
from fornace.common.errors import LocatedError
from fornace.common.jsonlimits import DEFAULT_MAX_DEPTH, JsonLimitError, line_of, loads
from fornace.common.resources import BUILTIN_DATA
from fornace.common.typeschema import SchemaError, TypeSpec, resolve

_FIELD = re.compile(r"\{([^{}|]+)(?:\|([^{}]*))?\}")


class CatalogError(LocatedError):
    """A bad type catalog file or a request it cannot satisfy.

    ``steps``: the JSON path of the place in the catalog's document
    (``["types", "web", "schema", "properties", "port"]``), when known: what
    :func:`load_catalog` turns into the line of the file."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None,
                 steps: Sequence[Any] | None = None) -> None:
        super().__init__(message, file, line)
        self.steps = None if steps is None else list(steps)


@dataclass(frozen=True)
class Operation:
    name: str
    template: str | None          # None: declared without an implementation
    inputs: dict[str, Any] = field(default_factory=dict)
    unit: str | None = None       # template of the unit id whose agent runs it
    when: str | None = None       # a path that must be true (unlink operations)

    @property
    def implemented(self) -> bool:
        return self.template is not None


@dataclass
class TypeInfo:
    name: str
    extends: str | None = None
    abstract: bool = False
    operations: dict[str, Operation | None] = field(default_factory=dict)
    unlink: list[Operation] = field(default_factory=list)
    references: dict[str, dict[str, str]] = field(default_factory=dict)
    doc: str = ""
    schema: dict[str, Any] | None = None   # its own part of the create spec
    instance: dict[str, Any] = field(default_factory=dict)   # its own instance keys


class Catalog:
    def __init__(self, types: dict[str, TypeInfo]) -> None:
        self.types = types
        for name in types:
            try:
                self.ancestry(name)  # reports unknown parents and cycles now
            except CatalogError as exc:
                exc.steps = ["types", name, "extends"]
                raise
        try:
            # concrete type -> its create spec ({} when the catalog has no schema)
            self.service_types: dict[str, TypeSpec] = resolve(types, self.ancestry)
        except SchemaError as exc:
            steps = (None if exc.steps is None or exc.type_name is None
                     else ["types", exc.type_name, "schema", *exc.steps])
            raise CatalogError(str(exc), steps=steps) from None

    @functools.cached_property
    def secret_fields(self) -> frozenset[str]:
        """The field names some type's schema declares secret (``writeOnly``), at
        any depth of its service and unit objects."""
        return frozenset().union(*(spec.secrets for spec in self.service_types.values()))

    # -- the hierarchy ---------------------------------------------------
    def ancestry(self, name: str) -> list[str]:
        """``name`` and its ancestors, nearest first."""
        chain: list[str] = []
        current: str | None = name
        while current is not None:
            if current in chain:
                raise CatalogError(f"type {name!r}: 'extends' loops through {current!r}")
            info = self.types.get(current)
            if info is None:
                if current == name:
                    raise CatalogError(f"unknown service type {name!r}")
                raise CatalogError(f"type {chain[-1]!r} extends unknown type {current!r}")
            chain.append(current)
            current = info.extends
        return chain

    def known(self, name: str) -> bool:
        return name in self.types

    def is_a(self, name: str, base: str) -> bool:
        """Whether type ``name`` is ``base`` or derives from it (unknown: False)."""
        return name in self.types and base in self.ancestry(name)

    # -- what a type has (inherited along ``extends``) --------------------
    def operation(self, type_name: str, operation: str) -> Operation | None:
        """The operation of a type: an :class:`Operation`, None when declared
        without implementation; :class:`CatalogError` when the type lacks it."""
        for name in self.ancestry(type_name):
            ops = self.types[name].operations
            if operation in ops:
                return ops[operation]
        raise CatalogError(f"service type {type_name!r} has no operation {operation!r} "
                           f"(it has: {', '.join(self.operation_names(type_name)) or 'none'})")

    def has_operation(self, type_name: str, operation: str) -> bool:
        return self.known(type_name) and operation in self.operation_names(type_name)

    def operation_names(self, type_name: str) -> list[str]:
        names: set[str] = set()
        for name in self.ancestry(type_name):
            names.update(self.types[name].operations)
        return sorted(names)

    def unlink(self, type_name: str) -> list[Operation]:
        return [op for name in self.ancestry(type_name) for op in self.types[name].unlink]

    def instance(self, type_name: str) -> dict[str, Any]:
        """The ``instance`` keys of a type, its ancestors' overridden by its own
        ({} when none of them has any; an unknown type has none)."""
        if type_name not in self.types:
            return {}
        found: dict[str, Any] = {}
        for name in reversed(self.ancestry(type_name)):
            found.update(self.types[name].instance)
        return found

    def references(self, type_name: str) -> dict[str, dict[str, str]]:
        found: dict[str, dict[str, str]] = {}
        for name in reversed(self.ancestry(type_name)):
            found.update(self.types[name].references)
        return found


# -- reading the file ---------------------------------------------------------

def load_catalog(path: str | Path, base: Catalog | None = None,
                 max_depth: int = DEFAULT_MAX_DEPTH) -> Catalog:
    """Read ``types.json``; :class:`CatalogError` names the file, the line when
    known, and the entry.  With ``base`` (a package's catalog on top of the
    conductor's), its types join the base's: they may extend the base's
    types, and one of the same name replaces the base's.  A file nested
    deeper than ``max_depth`` is refused."""
    path = Path(path)
    text, types = _read_types(path, max_depth)
    try:
        return catalog_with(base, types)
    except CatalogError as exc:
        raise _located(exc, path, text) from None


def catalog_problems(path: str | Path, base: Catalog | None = None,
                     max_depth: int = DEFAULT_MAX_DEPTH) -> list[str]:
    """Every problem :func:`load_catalog` would refuse the file for, not only the
    first: each ``file:line: message`` (a type with a problem is left out and
    the others tried again; a type extending one left out is not reported
    again for that)."""
    path = Path(path)
    try:
        text, types = _read_types(path, max_depth)
    except CatalogError as exc:
        return [str(exc)]
    types = dict(types)
    problems: list[str] = []
    left_out: set[str] = set()
    while True:
        try:
            catalog_with(base, types)
            return problems
        except CatalogError as exc:
            name = exc.steps[1] if exc.steps and len(exc.steps) > 1 else None
            entry = types.get(name) if isinstance(name, str) else None
            if not isinstance(name, str) or name not in types:
                return [*problems, str(_located(exc, path, text))]
            if not (isinstance(entry, dict) and entry.get("extends") in left_out):
                problems.append(str(_located(exc, path, text)))
            left_out.add(name)
            del types[name]


def _read_types(path: Path, max_depth: int) -> tuple[str, dict[str, Any]]:
    """A catalog file's text and its ``types`` object."""
    try:
        text = path.read_text(encoding="utf-8")
        document = loads(text, max_depth=max_depth, source=str(path))
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read the type catalog: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise CatalogError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise CatalogError(f"{path}: line {exc.lineno}: {exc.msg}") from None
    except JsonLimitError as exc:
        raise CatalogError(exc.message, exc.file, exc.line) from None
    types = document.get("types") if isinstance(document, dict) else None
    if not isinstance(types, dict):
        raise CatalogError(f"{path}: the catalog must be an object with a 'types' object")
    return text, types


def _located(exc: CatalogError, path: Path, text: str) -> CatalogError:
    line = line_of(text, exc.steps) if exc.steps is not None else None
    return CatalogError(exc.message, str(path), line, exc.steps)


def catalog_with(base: Catalog | None, types: dict[str, Any]) -> Catalog:
    """The catalog of ``types`` (a ``types.json``'s ``types`` object), joined to
    ``base``'s when given (see :func:`load_catalog`)."""
    own = {}
    for name, entry in types.items():
        try:
            own[name] = _type(name, entry)
        except CatalogError as exc:
            exc.steps = ["types", name, *(exc.steps or [])]
            raise
    return Catalog({**base.types, **own} if base is not None else own)


def declared_secrets(catalog: Catalog | None = None) -> frozenset[str]:
    """The field names some type of ``catalog`` declares secret (``writeOnly``),
    those of the built-in types when it is None or declares no schema: the
    keys masked as passwords are (:func:`fornace.common.secrets.masked`)."""
    return (catalog if catalog is not None and catalog.service_types
            else builtin_catalog()).secret_fields


@functools.lru_cache(maxsize=1)
def builtin_catalog() -> Catalog:
    """The catalog shipped in ``data/`` (read once): the create specs of a
    catalog that declares none."""
    return load_catalog(BUILTIN_DATA / "types.json")


def catalog_file(data_dir: str | Path) -> Path:
    """The type catalog of a data folder: its ``types.json``, or the built-in one
    when it has none -- as templates fall back."""
    path = Path(data_dir) / "types.json"
    return path if path.exists() else BUILTIN_DATA / "types.json"


def with_type_views(model: dict[str, Any], catalog: Catalog | None) -> dict[str, Any]:
    """Give each service of ``model`` whose type has ``instance`` keys in
    ``catalog`` a copy of them as ``temp.instance`` (what the instance rules of
    the workflows match), replacing whatever was there; in place, returns
    ``model``.  ``temp`` is never stored: the view lasts one job."""
    services = model.get("services")
    if catalog is None or not isinstance(services, list):
        return model
    for service in services:
        if not isinstance(service, dict) or not isinstance(service.get("type"), str):
            continue
        instance = catalog.instance(service["type"])
        temp = service.get("temp")
        if instance:
            if not isinstance(temp, dict):
                temp = service["temp"] = {}
            temp["instance"] = dict(instance)
        elif isinstance(temp, dict):
            temp.pop("instance", None)
    return model


def _type(name: str, entry: Any) -> TypeInfo:
    where = f"type {name!r}"
    if not isinstance(entry, dict):
        raise CatalogError(f"{where} must be an object")
    unknown = set(entry) - {"extends", "abstract", "operations", "unlink", "references",
                            "doc", "schema", "instance"}
    if unknown:
        raise CatalogError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    operations = entry.get("operations") or {}
    if not isinstance(operations, dict):
        raise CatalogError(f"{where}: 'operations' must be an object")
    unlink = entry.get("unlink") or []
    if not isinstance(unlink, list):
        raise CatalogError(f"{where}: 'unlink' must be a list")
    references = entry.get("references") or {}
    if not isinstance(references, dict) or not all(
            isinstance(v, dict) and isinstance(v.get("type"), str) and isinstance(v.get("key"), str)
            for v in references.values()):
        raise CatalogError(f"{where}: 'references' must map fields to {{type, key}}")
    extends = entry.get("extends")
    if extends is not None and not isinstance(extends, str):
        raise CatalogError(f"{where}: 'extends' must be a type name")
    return TypeInfo(
        name=name, extends=extends, abstract=bool(entry.get("abstract", False)),
        operations={op: _operation(f"{where} operation {op!r}", op, spec)
                    for op, spec in operations.items()},
        unlink=[_operation(f"{where} unlink[{i}]", "unlink", spec, required=True)
                for i, spec in enumerate(unlink)],
        references=references, doc=str(entry.get("doc") or ""), schema=entry.get("schema"),
        instance=_instance(where, entry.get("instance")))


_INSTANCE_KEYS = {"template": str, "image": str, "loadBalancer": bool}


def _instance(where: str, spec: Any) -> dict[str, Any]:
    """A type's own ``instance`` keys (see the module docstring), checked."""
    if spec is None:
        return {}
    if not isinstance(spec, dict):
        raise CatalogError(f"{where}: 'instance' must be an object", steps=["instance"])
    for key, value in spec.items():
        kind = _INSTANCE_KEYS.get(key)
        if kind is None:
            raise CatalogError(f"{where}: 'instance' has an unknown key {key!r} "
                               f"(known: {', '.join(sorted(_INSTANCE_KEYS))})",
                               steps=["instance", key])
        if not isinstance(value, kind) or (kind is str and not value.strip()):
            noun = "true or false" if kind is bool else "a non-empty string"
            raise CatalogError(f"{where}: 'instance' {key!r} must be {noun}",
                               steps=["instance", key])
    return dict(spec)


def _operation(where: str, name: str, spec: Any, required: bool = False) -> Operation | None:
    if spec is None and not required:
        return None
    if not isinstance(spec, dict) or not isinstance(spec.get("template"), str):
        raise CatalogError(f"{where} must be null or an object with a 'template'")
    unknown = set(spec) - {"template", "inputs", "unit", "when", "doc"}
    if unknown:
        raise CatalogError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    inputs = spec.get("inputs") or {}
    if not isinstance(inputs, dict):
        raise CatalogError(f"{where}: 'inputs' must be an object")
    return Operation(name=name, template=spec["template"], inputs=inputs,
                     unit=spec.get("unit"), when=spec.get("when"))


# -- evaluating inputs at a unit --------------------------------------------------

def unit_cursor(model: dict[str, Any], service_id: str, unit_id: str) -> Cursor | None:
    """The cursor of a unit in the model (root -> services -> i -> units -> j)."""
    return next((cursor for cursor in unit_cursors(model)
                 if cursor.value.get("id") == unit_id
                 and cursor.up(2).value.get("id") == service_id), None)


def read(cursor: Cursor, path: str) -> Any:
    start, rest = start_cursor(cursor, path.strip())
    return get_path(start.value, rest)


def render(value: Any, cursor: Cursor) -> Any:
    """Evaluate an input template (see the module docstring) at ``cursor``."""
    if isinstance(value, dict):
        return {k: render(v, cursor) for k, v in value.items()}
    if isinstance(value, list):
        return [render(v, cursor) for v in value]
    if not isinstance(value, str):
        return value
    whole = _FIELD.fullmatch(value)
    if whole:
        found = read(cursor, whole.group(1))
        return found if found is not None else _default(whole.group(2))

    def one(match: re.Match) -> str:
        found = read(cursor, match.group(1))
        if found is None:
            found = _default(match.group(2))
        return "" if found is None else str(found)
    return _FIELD.sub(one, value)


def _default(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def truthy(cursor: Cursor, path: str | None) -> bool:
    return path is None or bool(read(cursor, path))
