"""Exceptions of the conductor, each able to say *where* a problem is.

Operators edit workflow XML and templates by hand, so every error that comes
from their files carries the file and line it was found at and prints as
``file:line: message`` -- the same shape ``fornace workflow check`` uses.
"""
from __future__ import annotations


class FornaceError(Exception):
    """Base class of every error Fornace raises on purpose."""


class LocatedError(FornaceError):
    """An error in an operator-edited file, with an optional location."""

    def __init__(self, message: str, file: str | None = None,
                 line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line

    def located(self, file: str | None, line: int | None) -> "LocatedError":
        """Fill in the location if it is not known yet; returns self."""
        if self.file is None:
            self.file = file
        if self.line is None:
            self.line = line
        return self

    def __str__(self) -> str:
        if self.file is None:
            return self.message
        if self.line is None:
            return f"{self.file}: {self.message}"
        return f"{self.file}:{self.line}: {self.message}"


class WorkflowError(LocatedError):
    """A workflow file is malformed or a rule cannot be evaluated."""


def shortened(text: str, limit: int = 1000) -> str:
    """``text``, its middle left out when longer than ``limit`` (for messages)."""
    if len(text) <= limit:
        return text
    keep = limit * 3 // 8
    return f"{text[:keep]}…({len(text) - 2 * keep} characters)…{text[-keep:]}"


class ExpressionError(WorkflowError):
    """A JSONPath or filter expression is outside the supported grammar."""

    def __init__(self, message: str, expression: str,
                 file: str | None = None, line: int | None = None) -> None:
        super().__init__(f"{message} in expression {shortened(expression)!r}", file, line)
        self.reason = message
        self.expression = expression


class TemplateError(LocatedError):
    """A Heat or agent template is missing, unsafe to load or malformed."""


class UnknownName(FornaceError):
    """A name (a rule, a unit) that names nothing, or more than one thing;
    ``close``: the names meant, perhaps."""

    def __init__(self, message: str, close: list[str] | None = None) -> None:
        super().__init__(message)
        self.close = list(close or [])
