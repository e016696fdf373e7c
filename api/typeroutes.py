"""The service-type catalog over HTTP (a Fornace extension of the 0.2 API).

``GET /types`` lists the types the API knows -- those of its catalog
(``catalog_file``: ``types.json`` of the data folder) -- with their place in
the hierarchy and their operations; ``GET /types/{name}`` gives one type in
full: its create spec as one JSON Schema with ``extends`` merged in (the
schema the API validates its services with, :mod:`fornace.api.specs`), its
operations, and what a form shows of each field (title, help, default,
``writeOnly`` secrets, ``x-form``, ``x-input``).  A client can check a
service as the API will, with the same code (``fornace service add``).

With ``?environment=ENV_ID`` they are that environment's types: the API's
and those of the workflow packages it is pinned to (the catalog its
services are validated with).

A catalog that declares no schema (an older data folder) is validated with
the built-in types' schemas (:func:`fornace.api.specs.service_types`): the
types it serves are then its own and those built-in ones.
"""
from __future__ import annotations

import copy
from typing import Any, Optional

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from fornace.api import specs
from fornace.api.errors import ERROR_RESPONSES, Forbidden, NotFound
from fornace.api.routing import JsonRoute, authorize, permitted, run
from fornace.api.context import Context
from fornace.common.catalog import Catalog, builtin_catalog
from fornace.common.typeschema import UNITS, FieldSpec, merge

router = APIRouter(route_class=JsonRoute, responses=ERROR_RESPONSES)


# -- what the routes answer (their OpenAPI schemas) ------------------------------------------

class TypeSummary(BaseModel):
    """One type of ``GET /types``."""

    name: str
    title: Optional[str] = Field(None, description="the title of its own schema")
    description: Optional[str] = Field(None, description="the description of its own schema")
    doc: Optional[str] = Field(None, description="the catalog's note on the type")
    abstract: bool = Field(description="a base type: no service has it")
    extends: Optional[str] = Field(None, description="its parent type")
    parents: list[str] = Field(description="its ancestors, nearest first")
    operations: list[str] = Field(description="the operations it has (inherited ones too)")


class TypeList(BaseModel):
    types: list[TypeSummary]


class FieldHint(BaseModel):
    """What a form shows of one field (from its schema)."""

    name: str
    title: Optional[str] = None
    description: Optional[str] = None
    kinds: list[str] = Field(description="its JSON types (empty: any)")
    required: bool
    default: Any = None
    secret: bool = Field(description="writeOnly: never shown back (masked as ***)")
    form: bool = Field(description="false (x-form): the form does not offer it")
    input: Optional[str] = Field(None, description="x-input: 'services' for a list of "
                                                   "the environment's service ids")


class OperationInfo(BaseModel):
    name: str
    implemented: bool = Field(description="false: declared, does nothing")
    declared_by: str = Field(description="the type (itself or an ancestor) declaring it")


class TypeDetail(BaseModel):
    """One type in full (``GET /types/{name}``)."""

    model_config = ConfigDict(populate_by_name=True)
    name: str
    title: Optional[str] = None
    description: Optional[str] = None
    doc: Optional[str] = None
    abstract: bool
    extends: Optional[str] = None
    parents: list[str]
    operations: list[OperationInfo]
    create_schema: Optional[dict[str, Any]] = Field(
        None, alias="schema",
        description="the create spec: JSON Schema with 'extends' merged in; null when "
                    "the catalog declares none for it")
    fields: list[FieldHint] = Field(description="the service's fields but units")
    unit_fields: list[FieldHint] = Field(description="the fields of a unit object")
    min_units: Optional[int] = None
    max_units: Optional[int] = None
    references: dict[str, dict[str, str]] = Field(
        description="fields naming another service: {field: {type, key}}")
    instance: dict[str, Any] = Field(
        default_factory=dict,
        description="how its units get their instances, inherited along extends: "
                    "{template (Heat), image (linux or windows: the instance rules "
                    "serving it), loadBalancer}; empty: the workflows make them")


# -- the routes -------------------------------------------------------------------------

ENVIRONMENT = Query(None, description="an environment id: the types of that environment "
                                      "(the API's and its pinned packages')")


async def catalog_of(request: Request, ctx: Context, action: str,
                     environment: Optional[str]) -> Catalog:
    """The API's catalog, or ``environment``'s (403/404 as its other routes)."""
    store = request.app.state.store
    if environment is None:
        return store.catalog
    await authorize(request, ctx, action, environment)   # a cloud admin: on its project
    project = await run(store.tenant_of, environment)
    if project is None:
        raise NotFound(f"environment {environment} not found")
    if project != ctx.tenant_id and not ctx.is_admin:
        raise Forbidden(f"not authorized to access environment {environment}")
    return await run(store.environment_catalog, environment)


@router.get("/types", response_model=TypeList)
async def list_types(request: Request, environment: Optional[str] = ENVIRONMENT,
                     ctx: Context = Depends(permitted("type:list"))) -> dict:
    """The service types the API knows, in name order."""
    catalog = await catalog_of(request, ctx, "type:list", environment)
    return {"types": [type_summary(catalog, name) for name in type_names(catalog)]}


@router.get("/types/{name}", response_model=TypeDetail, response_model_by_alias=True)
async def show_type(request: Request,
                    name: str = Path(description="a type name, e.g. linuxWebServer"),
                    environment: Optional[str] = ENVIRONMENT,
                    ctx: Context = Depends(permitted("type:show"))) -> dict:
    """One type: its merged JSON Schema, operations and form hints; 404 (naming
    the known types in ``known``) for a type the API does not know."""
    catalog = await catalog_of(request, ctx, "type:show", environment)
    return type_detail(catalog, name)


# -- reading the catalog ----------------------------------------------------------------------

def type_names(catalog: Catalog) -> list[str]:
    """The catalog's types and those it validates with (the built-in ones when it
    declares no schema), sorted."""
    return sorted(set(catalog.types) | set(specs.service_types(catalog)))


def _holder(catalog: Catalog, name: str) -> Catalog:
    """The catalog that defines ``name`` (404 when none does)."""
    if catalog.known(name):
        return catalog
    builtin = builtin_catalog()
    if name in specs.service_types(catalog) and builtin.known(name):
        return builtin
    known = type_names(catalog)
    raise NotFound(f"unknown service type {name!r} (known: {', '.join(known)})", known=known)


def type_summary(catalog: Catalog, name: str) -> dict[str, Any]:
    """A type as ``GET /types`` lists it."""
    holder = _holder(catalog, name)
    info = holder.types[name]
    own = info.schema or {}
    return {"name": name, "title": own.get("title"), "description": own.get("description"),
            "doc": info.doc or None, "abstract": info.abstract, "extends": info.extends,
            "parents": holder.ancestry(name)[1:], "operations": holder.operation_names(name)}


def type_detail(catalog: Catalog, name: str) -> dict[str, Any]:
    """A type as ``GET /types/{name}`` shows it."""
    summary = type_summary(catalog, name)
    holder = _holder(catalog, name)
    schema = resolved_schema(catalog, name)
    properties = (schema or {}).get("properties") or {}
    units = properties.get(UNITS) if isinstance(properties.get(UNITS), dict) else {}
    unit_schema = units.get("items") if isinstance(units.get("items"), dict) else {}
    return {**summary, "operations": _operations(holder, name), "schema": schema,
            "fields": field_hints(schema or {}, skip=(UNITS,)),
            "unit_fields": field_hints(unit_schema),
            "min_units": units.get("minItems", 1 if schema else None),
            "max_units": units.get("maxItems"),
            "references": holder.references(name), "instance": holder.instance(name)}


def resolved_schema(catalog: Catalog, name: str) -> dict[str, Any] | None:
    """The create spec of ``name``: the one the API validates a concrete type's
    services with, else (an abstract type) its ancestors' schemas merged."""
    spec = specs.service_types(catalog).get(name)
    if spec is not None:
        return copy.deepcopy(dict(spec.schema))
    holder = _holder(catalog, name)
    merged: dict[str, Any] = {}
    for type_name in reversed(holder.ancestry(name)):
        own = holder.types[type_name].schema
        if own is not None:
            merged = merge(merged, own)
    return merged or None


def field_hints(schema: dict[str, Any], skip: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """What a form shows of each property of ``schema``, in the schema's order."""
    required = schema.get("required") or []
    hints = []
    for name, sub in (schema.get("properties") or {}).items():
        if name in skip or not isinstance(sub, dict):
            continue
        field = FieldSpec(name, sub, name in required)
        hints.append({"name": name, "title": field.title, "description": field.doc or None,
                      "kinds": list(field.kinds), "required": field.required,
                      "default": field.default, "secret": field.secret, "form": field.shown,
                      "input": field.input})
    return hints


def _operations(holder: Catalog, name: str) -> list[dict[str, Any]]:
    found = []
    for operation in holder.operation_names(name):
        declared_by = next(t for t in holder.ancestry(name)
                           if operation in holder.types[t].operations)
        implemented = holder.types[declared_by].operations[operation] is not None
        found.append({"name": operation, "implemented": implemented,
                      "declared_by": declared_by})
    return found
