"""A bounded retry across database failures that pass by themselves."""
from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError, OperationalError

from fornace.common.db.engine import make_engine
from fornace.common.db.outages import retried, transient
from services import postgres_url

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


def test_a_server_found_read_only_is_an_outage_and_its_connection_is_dropped():
    """A standby (or a demoted primary behind one address) refuses writes with
    "cannot execute ... in a read-only transaction": it passes once the pool
    reaches the new primary, so it is transient, and the connection is dropped
    rather than handed out again to fail the same way."""
    engine = make_engine(postgres_url())
    try:
        with engine.begin() as connection:
            connection.execute(text("CREATE TABLE IF NOT EXISTS ro_probe (n integer)"))
        with engine.connect() as connection:   # this pooled connection becomes read-only
            connection.execute(text("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY"))
            connection.commit()
            with pytest.raises(Exception) as caught:
                connection.execute(text("INSERT INTO ro_probe VALUES (1)"))
        assert "read-only transaction" in str(caught.value)
        assert transient(caught.value)
        assert caught.value.connection_invalidated
        with engine.begin() as connection:     # a fresh connection: the write goes through
            connection.execute(text("INSERT INTO ro_probe VALUES (2)"))
    finally:
        with engine.begin() as connection:
            connection.execute(text("DROP TABLE IF EXISTS ro_probe"))
        engine.dispose()
