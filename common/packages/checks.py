"""The shapes of the checks the conductor hands the API.

The API may not import the conductor, yet it checks uploaded packages and
shows what the checker says of a workflow file as ``fornace workflow check``
would; the command that starts the API passes it functions of these shapes
(:mod:`fornace.conductor.packages.check` makes them).  Problems are
``file:line: message`` lines.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

# an unpacked package's folder -> its problems (empty: it may be stored)
PackageCheck = Callable[[Path], list[str]]

# (workflow file, the catalog folder its templates are looked for in) -> problems
WorkflowCheck = Callable[[Path, Path], list[str]]

# (the workflow files in effect, the environment's model, a rule's name, a unit's
# name or None, the environment's catalog) -> what ``fornace why`` answers (fornace.conductor.dsl.why);
# raises fornace.common.errors.UnknownName for a rule or unit that names nothing
RuleExplain = Callable[[list[Path], dict[str, Any], str, "str | None", Any], dict[str, Any]]
