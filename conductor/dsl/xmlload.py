"""Safe loading of workflow XML into a tree of compiled nodes.

Workflow files are edited by operators and may come from elsewhere, so lxml
parses them with entity resolution, DTD loading and network access switched
off: a DOCTYPE is ignored, no external DTD or entity is ever read, and an
entity reference is left out of the text.  That is safe but silent, so
:func:`parse_bytes` can list what it ignored (``fornace workflow check``
warns about it).  The lxml tree is then turned once into light :class:`Node` objects: the
engine walks those thousands of times per deployment, and plain attribute
access on slotted objects is much cheaper than lxml proxies.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from lxml import etree

from fornace.common.errors import WorkflowError


def _parser() -> etree.XMLParser:
    return etree.XMLParser(resolve_entities=False, load_dtd=False,
                           no_network=True, dtd_validation=False,
                           huge_tree=False, remove_comments=False)


@dataclass(slots=True, eq=False)
class Node:
    """One XML element, ready for evaluation.

    ``children`` are the evaluated child elements (``<parameter>`` elements
    and comments excluded); ``tails[i]`` is the text after ``children[i]``.
    ``params`` maps a ``<parameter name=…>`` to its node, whose *content* is
    the argument value.
    """

    tag: str
    attrs: dict[str, str]
    file: str
    line: int
    text: str = ""
    children: tuple["Node", ...] = ()
    tails: tuple[str, ...] = ()
    params: dict[str, "Node"] = field(default_factory=dict)
    blank: bool = True  # text and every tail are whitespace only
    func: object = None  # resolved by the engine at load time
    extra: object = None  # per-function precompiled data (e.g. a query)
    fast: object = None  # frame -> value, for calls that need no frame of their own
    fast_content: object = None  # frame -> content, when it is one such call

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def child(self, tag: str) -> "Node | None":
        """The first child element with this tag (e.g. ``<success>``)."""
        for node in self.children:
            if node.tag == tag:
                return node
        return None

    def arg_names(self) -> set[str]:
        return set(self.attrs) | set(self.params)


def parse_bytes(data: bytes, file: str, ignored: list[WorkflowError] | None = None) -> Node:
    """Parse workflow XML; a syntax error names the file and line.

    ``ignored`` receives what the safe parser left aside: the DOCTYPE, entity
    declarations and entity references, each located.
    """
    try:
        root = etree.fromstring(data, _parser(), base_url=None)
    except etree.XMLSyntaxError as exc:
        line = exc.position[0] if exc.position else exc.lineno
        depth = _EXCESSIVE_DEPTH.match(exc.msg or "")
        if depth:   # libxml2's own limit; its advice (XML_PARSE_HUGE) is not for users
            raise WorkflowError(f"XML nested deeper than {depth.group(1)} elements", file,
                                line) from None
        raise WorkflowError(f"XML syntax error: {exc.msg}", file, line) from None
    if ignored is not None:
        ignored.extend(_ignored(root, data, file))
    return _compile(root, file)


_EXCESSIVE_DEPTH = re.compile(r"Excessive depth in document: (\d+)")
_ENTITY_DECLARATION = re.compile(rb"<!ENTITY\s+(%\s*)?([^\s>]+)(?:\s+(SYSTEM|PUBLIC))?")


def _ignored(root: etree._Element, data: bytes, file: str) -> list[WorkflowError]:
    """The DOCTYPE, entity declarations and references the parser did not use."""
    found: list[WorkflowError] = []
    docinfo = root.getroottree().docinfo
    if docinfo.doctype:
        start = max(data.find(b"<!DOCTYPE"), 0)
        external = (f": its external DTD {docinfo.system_url!r} is not loaded"
                    if docinfo.system_url else "")
        found.append(WorkflowError(f"DOCTYPE declaration ignored{external} (workflow "
                                   f"files use no DTD)", file, _line(data, start)))
        end = data.find(b"]>", start) if docinfo.internalDTD is not None else -1
        subset = data[start:end if end > 0 else len(data)]
        for match in _ENTITY_DECLARATION.finditer(subset):
            kind = "parameter entity" if match.group(1) else "entity"
            name = match.group(2).decode("utf-8", "replace")
            source = " (its external content is not read)" if match.group(3) else ""
            found.append(WorkflowError(f"{kind} {name!r} declared but never expanded{source}",
                                       file, _line(data, start + match.start())))
    for entity in root.iter(etree.Entity):
        found.append(WorkflowError(f"entity reference &{entity.name}; is left out of the "
                                   f"text (entities are never expanded)", file,
                                   entity.sourceline))
    return found


def _line(data: bytes, position: int) -> int:
    return data.count(b"\n", 0, position) + 1


def _compile(element: etree._Element, file: str) -> Node:
    tag = element.tag
    if not isinstance(tag, str):
        raise WorkflowError("unexpected XML node", file, element.sourceline)
    if tag.startswith("{"):
        raise WorkflowError(f"namespaced element {tag!r} is not a DSL function",
                            file, element.sourceline)
    node = Node(tag=tag, attrs=dict(element.attrib), file=file,
                line=element.sourceline or 0, text=element.text or "")
    children: list[Node] = []
    tails: list[str] = []
    pending_text = node.text
    for sub in element:
        tail = sub.tail or ""
        if not isinstance(sub.tag, str):  # comment or processing instruction
            if children:
                tails[-1] += tail
            else:
                pending_text += tail
            continue
        compiled = _compile(sub, file)
        if sub.tag == "parameter":
            name = sub.get("name")
            if not name:
                raise WorkflowError("<parameter> without a name", file, compiled.line)
            node.params[name] = compiled
            continue  # a parameter's tail is not part of the content
        children.append(compiled)
        tails.append(tail)
    node.text = pending_text
    node.children = tuple(children)
    node.tails = tuple(tails)
    node.blank = not node.text.strip() and not any(t.strip() for t in tails)
    return node
