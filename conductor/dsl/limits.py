"""The engine's limits on data, and the budget one deployment keeps against them.

Operators' input (workflow files, templates, ``--model`` files, task models)
and what workflows build at run time are bounded by the ``[engine]`` options
of :class:`Limits`.  Input over a limit is refused with an error naming the
file and place; at run time a :class:`ModelBudget` checks every value a
``<set>`` writes *before* it is written (its size, its depth where it goes,
and that it does not hold the place it is written to, which would make the
model a cycle), and keeps an estimate of the model's size from the values
written -- re-measured only when the estimate nears the cap, when values
that may share parts were written in a round, or when a write's place in the
model was not known.  Crossing a limit stops the deployment with an error
report naming the rule, as the round limit does.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any, Callable, Collection

from fornace.common.errors import WorkflowError
from fornace.common.jsonlimits import HARD_MAX_DEPTH, JsonLimitError, measure

MiB = 1 << 20


@dataclass(frozen=True)
class Limits:
    """What the ``[engine]`` limit options say (read by the conductor's configuration)."""

    max_model_bytes: int = 32 * MiB
    max_value_bytes: int = 4 * MiB
    max_json_depth: int = 100
    max_template_bytes: int = 4 * MiB

    def __post_init__(self) -> None:
        if not 2 <= self.max_json_depth <= HARD_MAX_DEPTH:
            raise ValueError(f"max_json_depth must be between 2 and {HARD_MAX_DEPTH}")

    def check_model(self, model: Any, what: str = "the model") -> int:
        """The size of a whole model; :class:`DataLimitError` when it is over a limit."""
        try:
            return measure(model, max_bytes=self.max_model_bytes, max_depth=self.max_json_depth)
        except JsonLimitError as exc:
            raise DataLimitError(f"{what} is {exc.message} ({_option(exc.kind)})",
                                 kind=exc.kind) from None


class DataLimitError(WorkflowError):
    """A value or the model over a limit: the deployment stops (an error report)."""

    def __init__(self, message: str, kind: str, file: str | None = None,
                 line: int | None = None) -> None:
        super().__init__(message, file, line)
        self.kind = kind


def _option(kind: str) -> str:
    return {"size": "[engine] max_model_bytes", "depth": "[engine] max_json_depth",
            "cycle": "a model cannot contain itself"}.get(kind, "[engine] limits")


class ModelBudget:
    """Checks the writes of one deployment's model against :class:`Limits`."""

    __slots__ = ("limits", "model", "size", "written", "slack", "shared", "unsure", "growth")

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.model: Any = None
        self.size = 0          # the model's size when last measured whole
        self.written = 0       # bytes written since then (an upper bound of the growth...)
        self.slack = 0         # ...that makes the model measured again when passed
        self.shared = False    # ...unless containers were written: they may be shared
        self.unsure = False    # a write whose depth in the model was not known
        self.growth: collections.Counter[str] = collections.Counter()  # bytes per rule
        self._measured(0)

    def start(self, model: Any) -> None:
        """Measure the model a deployment starts from (:class:`DataLimitError` if over)."""
        self.model = model
        self._measured(self.limits.check_model(model, "the model given"))
        self.shared = self.unsure = False
        self.growth.clear()

    def _measured(self, size: int) -> None:
        # measured again once the writes may have grown it past the cap (by more than a
        # sixteenth of the cap, so that a model close to it is not measured at every write)
        cap = self.limits.max_model_bytes
        self.size, self.written = size, 0
        self.slack = max(cap - size, cap >> 4)

    def admit(self, value: Any, depth: int, forbidden: Collection[int], rule: str,
              target: Callable[[], str]) -> int:
        """The size of ``value``, to be written ``depth`` containers below the model
        root (at least) into one of the containers ``forbidden``; raises
        :class:`DataLimitError` naming ``rule`` and ``target()`` (where it goes)
        when it may not be."""
        limits = self.limits
        kind = type(value)
        if kind is str:
            size = len(value) + 2
            if size <= limits.max_value_bytes:
                return size
        elif kind is not dict and kind is not list:
            return 8
        try:
            return measure(value, max_bytes=limits.max_value_bytes,
                           max_depth=max(limits.max_json_depth - depth, 0), forbidden=forbidden)
        except JsonLimitError as exc:
            raise self._refused(exc, rule, target) from None

    def _refused(self, exc: JsonLimitError, rule: str,
                 target: Callable[[], str]) -> DataLimitError:
        limits = self.limits
        why = {"size": f"a value {_larger(limits.max_value_bytes, 'max_value_bytes')}",
               "depth": f"a value that would nest the model {_deeper(limits)}",
               }.get(exc.kind, f"a value holding the object it goes into"
                               f"{_at(exc.path)} (the model would contain itself)")
        return DataLimitError(f"<set> of {rule} would write {why} to {target()}", exc.kind)

    def wrote(self, container: bool, known_depth: bool) -> None:
        """After a write the caller counted (``growth``, ``written``): a container
        written, a write of unknown depth, or the estimate past the slack."""
        if container:
            self.shared = True
        if not known_depth:
            self.unsure = True
        if self.written > self.slack:
            self.settle(end_of_round=False, now=True)

    def settle(self, end_of_round: bool, now: bool = False) -> None:
        """Measure the model whole if the estimate cannot be trusted any more.

        After a pass: when a write's depth in the model was not known; after a
        round, also when containers were written (shared parts grow the JSON
        text more than the estimate says).
        """
        if not (now or self.unsure or (end_of_round and self.shared)):
            return
        try:
            self._measured(measure(self.model, max_bytes=self.limits.max_model_bytes,
                                   max_depth=self.limits.max_json_depth))
        except JsonLimitError as exc:
            raise DataLimitError(self._grown(exc), exc.kind) from None
        self.shared = self.unsure = False
        if end_of_round:
            self.growth.clear()

    def _grown(self, exc: JsonLimitError) -> str:
        limits = self.limits
        what = {"size": f"the model grew {_larger(limits.max_model_bytes, 'max_model_bytes')}",
                "depth": f"the model is nested {_deeper(limits)}{_at(exc.path)}",
                }.get(exc.kind, f"the model contains itself{_at(exc.path)}")
        busiest = ", ".join(f"{who} ({size} bytes)" for who, size in self.growth.most_common(5))
        return f"{what}; rules that wrote the most: {busiest or 'none'}"


def _larger(cap: int, option: str) -> str:
    return f"larger than {cap} bytes as JSON ([engine] {option})"


def _deeper(limits: Limits) -> str:
    return f"deeper than {limits.max_json_depth} levels ([engine] max_json_depth)"


def _at(path: str | None) -> str:
    return f" at {path}" if path else ""
