"""A PowerShell checker that needs no PowerShell (for the Windows plan scripts).

:func:`scan` reads a script the way PowerShell's tokenizer does as far as
structure goes -- comments (``#`` and ``<# #>``), single- and double-quoted
strings (``''``/``""`` doubling, backtick escapes, ``$( )`` subexpressions
with code and strings inside), here-strings (``@' '@``/``@" "@`` whose end
must start a line), backtick continuations -- and reports:

* unbalanced or mismatched ``( ) [ ] { }`` (with the line of the opener);
* unterminated strings, here-strings and block comments;
* ``"$name:"`` inside a double-quoted string followed by no name (PowerShell
  reads ``$name:`` as a drive-qualified variable and refuses the script;
  ``${name}:`` is the way to write it).

It also gives a *skeleton*: the source with comments and string contents
blanked (line breaks and the code of ``$( )`` subexpressions kept), on which :func:`functions` finds each
``function Name { param(...) }`` with its parameters (and which are
``Mandatory``) and the ``Verb-Noun`` commands its body calls.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

OPENERS = {"(": ")", "[": "]", "{": "}"}
CLOSERS = {v: k for k, v in OPENERS.items()}
NAME_CHARS = re.compile(r"[A-Za-z0-9_?]")
COMMENT_BEFORE = set(" \t\r\n;{}()|,=")


@dataclass
class Scan:
    skeleton: str
    problems: list[str] = field(default_factory=list)


@dataclass
class Function:
    name: str
    line: int
    params: list[str]
    mandatory: list[str]
    calls: set[str]


def scan(text: str) -> Scan:
    out = list(text)
    problems: list[str] = []
    modes: list[tuple[str, int]] = [("code", 1)]  # (mode, line it started on)
    brackets: list[tuple[str, int, bool]] = []    # (opener, line, opened a string's $( )
    line = 1
    i = 0
    n = len(text)

    def blank(start: int, end: int) -> None:
        for k in range(start, min(end, n)):
            if out[k] != "\n":
                out[k] = " "

    def lines_in(start: int, end: int) -> int:
        return text.count("\n", start, end)

    while i < n:
        c = text[i]
        mode = modes[-1][0]
        if mode == "code":
            if text.startswith("<#", i):
                end = text.find("#>", i + 2)
                if end < 0:
                    problems.append(f"line {line}: block comment <# never closed")
                    blank(i, n)
                    break
                blank(i, end + 2)
                line += lines_in(i, end + 2)
                i = end + 2
                continue
            if c == "#" and (i == 0 or text[i - 1] in COMMENT_BEFORE):
                end = text.find("\n", i)
                end = n if end < 0 else end
                blank(i, end)
                i = end
                continue
            if c == "`":
                line += lines_in(i, i + 2)
                i += 2
                continue
            if c == "@" and text[i + 1:i + 2] in ("'", '"'):
                quote = text[i + 1]
                rest = text[i + 2:text.find("\n", i) if "\n" in text[i:] else n]
                if rest.strip() == "":
                    match = re.compile("^" + re.escape(quote) + "@", re.M).search(text, i + 2)
                    if match is None:
                        problems.append(f"line {line}: here-string @{quote} never closed "
                                        f"(its end {quote}@ must start a line)")
                        blank(i, n)
                        break
                    if quote == '"':
                        _check_expansions(text[i + 2:match.start()], line, problems)
                    blank(i + 2, match.start())
                    line += lines_in(i, match.end())
                    i = match.end()
                    continue
            if c == "'":
                j = i + 1
                while True:
                    if j >= n:
                        problems.append(f"line {line}: string ' never closed")
                        break
                    if text[j] == "'":
                        if text[j + 1:j + 2] == "'":
                            j += 2
                            continue
                        break
                    j += 1
                blank(i + 1, j)
                line += lines_in(i, j)
                i = j + 1
                continue
            if c == '"':
                modes.append(("dq", line))
                i += 1
                continue
            if c in OPENERS:
                brackets.append((c, line, False))
            elif c in CLOSERS:
                if not brackets:
                    problems.append(f"line {line}: {c} closes nothing")
                else:
                    opener, opened, sub = brackets.pop()
                    if OPENERS[opener] != c:
                        problems.append(f"line {line}: {c} does not close the {opener} "
                                        f"opened on line {opened}")
                    if sub:
                        modes.pop()  # back into the string
            if c == "\n":
                line += 1
            i += 1
            continue
        # inside a double-quoted string
        if c == "`":
            blank(i, i + 2)
            line += lines_in(i, i + 2)
            i += 2
            continue
        if c == '"':
            if text[i + 1:i + 2] == '"':
                blank(i, i + 2)
                i += 2
                continue
            modes.pop()
            i += 1
            continue
        if c == "$" and text[i + 1:i + 2] == "(":
            modes.append(("code", line))
            brackets.append(("(", line, True))
            blank(i, i + 1)  # the subexpression's code stays in the skeleton
            i += 2
            continue
        if c == "$":
            problem = _expansion_problem(text, i)
            if problem:
                problems.append(f"line {line}: {problem}")
        if c == "\n":
            line += 1
        blank(i, i + 1)
        i += 1
    for mode, started in modes[1:]:
        if mode == "dq":
            problems.append(f'line {started}: string " never closed')
    for opener, opened, _ in brackets:
        problems.append(f"line {opened}: {opener} never closed")
    return Scan("".join(out), problems)


def _expansion_problem(text: str, i: int) -> str | None:
    """``$name:`` not followed by a name inside an expandable string."""
    j = i + 1
    while j < len(text) and NAME_CHARS.match(text[j]):
        j += 1
    if j == i + 1 or text[j:j + 1] != ":":
        return None
    after = text[j + 1:j + 2]
    if after and NAME_CHARS.match(after):
        return None  # $env:NAME, $script:x
    name = text[i + 1:j]
    return f'"${name}:" is not a valid variable reference in a string (write ${{{name}}}:)'


def _check_expansions(body: str, line: int, problems: list[str]) -> None:
    for offset, char in enumerate(body):
        if char == "$" and (offset == 0 or body[offset - 1] != "`"):
            problem = _expansion_problem(body, offset)
            if problem:
                problems.append(f"line {line + body.count(chr(10), 0, offset)}: {problem}")


def _matching(skeleton: str, start: int) -> int:
    """Index of the bracket closing the one at ``start`` (skeleton: no strings)."""
    depth = 0
    for k in range(start, len(skeleton)):
        ch = skeleton[k]
        if ch in OPENERS:
            depth += 1
        elif ch in CLOSERS:
            depth -= 1
            if depth == 0:
                return k
    raise ValueError(f"bracket at {start} never closed")


FUNCTION = re.compile(r"(?im)^[ \t]*function[ \t]+([A-Za-z][\w-]*)[ \t]*\{")
PARAM = re.compile(r"(?i)\A\s*param\s*\(")
CALL = re.compile(r"(?<![\w$.-])([A-Z][A-Za-z]+-[A-Z][A-Za-z0-9]*)\b")


def functions(text: str) -> dict[str, Function]:
    """The functions a script defines (skeleton based: run :func:`scan` first)."""
    skeleton = scan(text).skeleton
    found: dict[str, Function] = {}
    for match in FUNCTION.finditer(skeleton):
        open_at = match.end() - 1
        close_at = _matching(skeleton, open_at)
        body = skeleton[open_at + 1:close_at]
        params: list[str] = []
        mandatory: list[str] = []
        param = PARAM.match(body)
        if param:
            start = param.end() - 1
            block = body[start + 1:_matching(body, start)]
            for piece in _split_top(block):
                name = _first_variable(piece)
                if name is None:
                    continue
                params.append(name)
                if re.search(r"\bMandatory\b", piece, re.I) and not re.search(
                        r"\bMandatory\s*=\s*\$false", piece, re.I):
                    mandatory.append(name)
        calls = {m.group(1) for m in CALL.finditer(body)}
        found[match.group(1)] = Function(match.group(1), skeleton.count("\n", 0, match.start()) + 1,
                                         params, mandatory, calls)
    return found


def _split_top(block: str) -> list[str]:
    pieces, depth, current = [], 0, []
    for ch in block:
        if ch in OPENERS:
            depth += 1
        elif ch in CLOSERS:
            depth -= 1
        if ch == "," and depth == 0:
            pieces.append("".join(current))
            current = []
        else:
            current.append(ch)
    pieces.append("".join(current))
    return pieces


def _first_variable(piece: str) -> str | None:
    depth = 0
    for k, ch in enumerate(piece):
        if ch in OPENERS:
            depth += 1
        elif ch in CLOSERS:
            depth -= 1
        elif ch == "$" and depth == 0:
            match = re.match(r"\$([A-Za-z_]\w*)", piece[k:])
            if match:
                return match.group(1)
    return None
