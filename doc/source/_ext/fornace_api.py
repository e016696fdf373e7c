"""The ``fornace-api`` directive: the REST API reference, read from the OpenAPI
schema of the API's own app.

The app is made as ``fornace api`` makes it, on a throwaway in-memory SQLite
database that is never touched (the schema needs none) and without a broker.
Each operation becomes a section -- method and path, what it does (the route's
docstring), its parameters, its request body and its answers -- grouped by the
path's first segment.  The routes are served at ``/`` and again under ``/v1``:
the reference lists them once, without the prefix.
"""
from __future__ import annotations

from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.nodes import nested_parse_with_titles

PREFIX = "/v1"
METHODS = ("get", "post", "put", "patch", "delete")


def openapi_schema() -> dict[str, Any]:
    """The schema of an app on an unused in-memory database."""
    from fornace.api.app import create_app
    from fornace.api.auth import NoAuth
    from fornace.api.stores.store import Store
    from fornace.common.db.engine import make_engine, session_factory

    store = Store(session_factory(make_engine("sqlite://")), lambda body, message_id: None)
    return create_app(store, NoAuth("tenant", "user")).openapi()


def operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(method, path, operation) of every route, the ``/v1`` copies left out."""
    paths = schema.get("paths", {})
    found = []
    for path, entry in paths.items():
        if path.startswith(PREFIX + "/") and path[len(PREFIX):] in paths:
            continue
        for method in METHODS:
            if method in entry:
                found.append((method.upper(), path, entry[method]))
    return found


def resource(path: str) -> str:
    """The group of a path: its first segment (``/environments/{id}`` -> environments)."""
    first = path.strip("/").split("/")[0]
    return first or "/"


def schema_name(schema: dict[str, Any] | None) -> str:
    """A short name for a JSON Schema: its ``$ref``'s name, its title or its type."""
    if not schema:
        return "any"
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " or ".join(schema_name(s) for s in schema["anyOf"])
    if schema.get("type") == "array":
        return f"list of {schema_name(schema.get('items'))}"
    return str(schema.get("type") or schema.get("title") or "any")


def inline(text: str) -> str:
    """``text`` as reST inline literal."""
    return "``" + text.replace("`", "'") + "``"


def operation_lines(method: str, path: str, operation: dict[str, Any]) -> list[str]:
    title = f"{method} {path}"
    lines = [title, "-" * len(title), ""]
    if operation.get("summary"):
        lines += [f"*{operation['summary']}*", ""]
    if operation.get("description"):
        lines += [*operation["description"].splitlines(), ""]
    parameters = operation.get("parameters", [])
    if parameters:
        lines += [".. list-table:: Parameters", "   :header-rows: 1", "",
                  "   * - name", "     - in", "     - type", "     - required"]
        for parameter in parameters:
            lines += [f"   * - {inline(parameter['name'])}",
                      f"     - {parameter.get('in', '')}",
                      f"     - {schema_name(parameter.get('schema'))}",
                      f"     - {'yes' if parameter.get('required') else 'no'}"]
        lines.append("")
    body = operation.get("requestBody")
    if body:
        kinds = ", ".join(inline(kind) for kind in body.get("content", {}))
        shapes = ", ".join(inline(schema_name(content.get("schema")))
                           for content in body.get("content", {}).values())
        required = "required" if body.get("required") else "optional"
        lines += [f"Request body ({required}): {kinds}, {shapes}.", ""]
    answers = operation.get("responses", {})
    if answers:
        lines += ["Answers: " + ", ".join(f"{inline(code)} {answer.get('description', '')}"
                                          for code, answer in sorted(answers.items())) + ".", ""]
    return lines


def schemas_lines(schema: dict[str, Any]) -> list[str]:
    """The named request and answer schemas, as JSON."""
    import json

    named = schema.get("components", {}).get("schemas", {})
    lines = ["Schemas", "=======", ""]
    for name in sorted(named):
        lines += [name, "-" * len(name), ""]
        if named[name].get("description"):
            lines += [*named[name]["description"].splitlines(), ""]
        lines += ["::", ""]
        lines += ["   " + line for line in json.dumps(named[name], indent=2).splitlines()]
        lines.append("")
    return lines


def reference_lines(schema: dict[str, Any]) -> list[str]:
    info = schema.get("info", {})
    lines = [info.get("description", ""), "",
             f"Every route below is also served under ``{PREFIX}`` "
             f"(``{PREFIX}/environments``), as Murano's API is.", ""]
    groups: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for method, path, operation in operations(schema):
        groups.setdefault(resource(path), []).append((method, path, operation))
    for group, members in groups.items():
        title = f"/{group}" if group != "/" else "/"
        lines += [title, "=" * max(len(title), 3), ""]
        for method, path, operation in members:
            lines += operation_lines(method, path, operation)
    return lines + schemas_lines(schema)


class RestApiDirective(Directive):
    has_content = False

    def run(self) -> list[nodes.Node]:
        lines = reference_lines(openapi_schema())
        content = StringList(lines, source="<fornace-api>")
        holder = nodes.section()
        holder.document = self.state.document
        nested_parse_with_titles(self.state, content, holder)
        return holder.children


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("fornace-api", RestApiDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
