"""A bounded retry across database failures that pass by themselves."""
from __future__ import annotations

import pytest
from sqlalchemy.exc import IntegrityError, OperationalError

from fornace.common.db.outages import retried, transient

DOWN = OperationalError("SELECT 1", {}, Exception("connection refused"))


def test_a_transient_failure_is_tried_again_after_each_delay():
    calls, slept = [], []

    def call():
        calls.append(1)
        if len(calls) < 3:
            raise DOWN
        return "done"
    assert retried(call, "x", backoff=(0.5, 1.0, 2.0), sleep=slept.append) == "done"
    assert slept == [0.5, 1.0] and len(calls) == 3


def test_the_retries_are_bounded_and_the_last_failure_goes_up():
    calls, slept = [], []

    def call():
        calls.append(1)
        raise DOWN
    with pytest.raises(OperationalError):
        retried(call, "x", backoff=(0.5, 1.0), sleep=slept.append)
    assert slept == [0.5, 1.0] and len(calls) == 3


def test_another_failure_goes_up_at_once():
    calls, slept = [], []

    def call():
        calls.append(1)
        raise IntegrityError("INSERT", {}, Exception("duplicate key"))
    with pytest.raises(IntegrityError):
        retried(call, "x", backoff=(0.5,), sleep=slept.append)
    assert slept == [] and len(calls) == 1
    assert transient(DOWN) and not transient(ValueError("x"))
