"""The work one validation of a service object may do.

Checking a service against its type's schema costs about the size of the
object, except where the schema makes it cost more: ``pattern`` (each
match costs its program size times the characters, see
:mod:`fornace.common.patterns`), ``enum`` lists and ``uniqueItems``
(quadratic).  Types come from workflow packages, so a tenant could make that
work large; :class:`ValidationBudget` bounds it, in units of work and in
time, and :mod:`fornace.api.specs` turns :class:`BudgetExceeded` into a 400
"validation took too long" naming the field it stopped at.
"""
from __future__ import annotations

import time
from typing import Callable

from fornace.common.errors import FornaceError

#: Units of work one validation may spend (a pattern match at its largest is
#: 250 000, a value visited 1): tens of milliseconds at worst.
MAX_UNITS = 5_000_000
#: And the time it may take, whatever the units say: the CPU time of the
#: validating thread (``time.thread_time``), not the wall clock, so a busy
#: machine that leaves the thread waiting for a core does not fail a valid
#: service (a stall of half a second refused a 3000-unit one before its count)
MAX_SECONDS = 0.5


class BudgetExceeded(FornaceError):
    """The validation went past its budget at ``path``."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


class ValidationBudget:
    """Units and seconds left to one validation."""

    def __init__(self, units: int = MAX_UNITS, seconds: float = MAX_SECONDS,
                 clock: Callable[[], float] = time.thread_time) -> None:
        self.units = units
        self.left = units
        self.seconds = seconds
        self._clock = clock
        self._deadline = clock() + seconds

    def spend(self, units: int, path: str) -> None:
        """Take ``units`` of work for the value at ``path``; :class:`BudgetExceeded`
        when none are left or the time is up."""
        self.left -= units
        if self.left < 0:
            raise BudgetExceeded(path, f"validation took too long (more than {self.units} "
                                       f"units of work: patterns, enums, unique items)")
        if self._clock() > self._deadline:
            raise BudgetExceeded(path, f"validation took too long (more than "
                                       f"{self.seconds:g} s)")
