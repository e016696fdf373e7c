"""The ``fornace-options`` directive: oslo.config's ``show-options`` for the
namespaces of ``etc/fornace-config-generator.conf``.

The reference and the sample configuration then list the same options: a
namespace added to the generator's file (for the sample) is in the reference
too, without editing the page.  The directive's content names more namespaces
to show after them (the libraries' own: ``oslo.log``...).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.nodes import nested_parse_with_titles

ROOT = Path(__file__).resolve().parents[3]
GENERATOR_CONF = ROOT / "etc" / "fornace-config-generator.conf"


def generator_namespaces(path: Path = GENERATOR_CONF) -> list[str]:
    """The ``namespace = ...`` lines of an oslo-config-generator file, in order."""
    found = []
    for line in path.read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() == "namespace":
            found.append(value.strip())
    return found


class FornaceOptionsDirective(Directive):
    has_content = True

    def run(self) -> list[nodes.Node]:
        namespaces = generator_namespaces() + [line.strip() for line in self.content
                                               if line.strip()]
        lines = [".. show-options::", ""] + [f"   {name}" for name in namespaces] + [""]
        holder = nodes.section()
        holder.document = self.state.document
        nested_parse_with_titles(self.state, StringList(lines, source="<fornace-options>"),
                                 holder)
        return holder.children


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("fornace-options", FornaceOptionsDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
