"""The one loop that stores results, reports and job events
(:mod:`fornace.api.messagestore`): contract errors set aside, the rest in one
transaction, one by one when that fails, stopping at the first transient
failure (the database out of reach); what fails alone for good set aside."""
from __future__ import annotations

import pytest
from sqlalchemy.exc import DataError, IntegrityError, InterfaceError, OperationalError

from fornace.api.messagestore import store_all, store_message, store_messages, transient
from fornace.common.contract import ContractError


class Recorder:
    """A store that records its calls; ``broken`` items fail, alone or in a batch."""

    def __init__(self, broken: set = frozenset(), batch_fails: bool = False,
                 error: type = RuntimeError) -> None:
        self.broken = broken
        self.error = error
        self.batch_fails = batch_fails
        self.together_calls: list[list] = []
        self.alone_calls: list = []
        self.stored: list = []

    def together(self, items):
        self.together_calls.append(list(items))
        if self.batch_fails or self.broken & set(items):
            raise RuntimeError("the batch failed")
        self.stored += items

    def alone(self, item):
        self.alone_calls.append(item)
        if item in self.broken:
            raise self.error(f"{item} failed")
        self.stored.append(item)


def parse(body, message_id):
    if not isinstance(body, str):
        raise ContractError(f"message {message_id}: body must be a string")
    return body


def test_bodies_the_contract_refuses_are_set_aside_with_their_reason():
    store = Recorder()
    outcomes = store_messages([("a", "1"), (7, "2"), ("c", "3")], parse, store.together,
                              store.alone, "things")
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], ContractError)
    assert str(outcomes[1]) == "message 2: body must be a string"
    assert store.together_calls == [["a", "c"]]       # the others, in one transaction
    assert store.alone_calls == []


def test_a_batch_that_fails_is_stored_one_by_one(caplog):
    store = Recorder(batch_fails=True)
    assert store_all(["a", "b", "c"], store.together, store.alone, "things") == [None] * 3
    assert store.alone_calls == ["a", "b", "c"] and store.stored == ["a", "b", "c"]
    assert "storing 3 things in one transaction failed (RuntimeError: the batch failed)" \
        in caplog.text


class Unreachable(ConnectionError):
    """The database out of reach (a transient failure)."""


def test_one_by_one_the_first_transient_failure_stops_the_rest_untried():
    store = Recorder(broken={"b"}, error=Unreachable)
    outcomes = store_messages([("a", "1"), (0, "x"), ("b", "2"), ("c", "3")], parse,
                              store.together, store.alone, "things")
    assert outcomes[0] is None
    assert isinstance(outcomes[1], ContractError)     # a bad message is no failure
    assert isinstance(outcomes[2], Unreachable) and outcomes[3] is outcomes[2]
    assert store.alone_calls == ["a", "b"]            # "c" comes again after "b"
    assert store.stored == ["a"]


def test_a_single_message_is_stored_alone():
    store = Recorder()
    assert store_all(["a"], store.together, store.alone, "things") == [None]
    assert store.together_calls == [] and store.alone_calls == ["a"]
    assert store_all([], store.together, store.alone, "things") == []


def test_one_message_raises_what_stopped_it():
    store = Recorder(broken={"b"}, error=Unreachable)

    def batch(messages):
        return store_messages(messages, parse, store.together, store.alone, "things")

    store_message(batch, "a", "1")
    with pytest.raises(ContractError, match="body must be a string"):
        store_message(batch, None, "2")
    with pytest.raises(Unreachable, match="b failed"):
        store_message(batch, "b", "3")
    assert store.stored == ["a"]


@pytest.mark.parametrize("error, reason", [
    (DataError("INSERT INTO statuses ...", {"text": "P@ssw0rd"},
               Exception("value too long for type character varying(64)\nmore")),
     "the database cannot hold its values: value too long for type character varying(64)"),
    (ValueError("invalid literal for int() with base 10: 'x'"),
     "storing it failed: ValueError: invalid literal for int() with base 10: 'x'"),
    (IntegrityError("INSERT INTO job_tasks ...", {"log": "P@ssw0rd"},
                    Exception('duplicate key value violates unique constraint "pk"\nDETAIL')),
     'storing it failed: IntegrityError: duplicate key value violates unique constraint "pk"'),
    (KeyError("services"), "storing it failed: KeyError: 'services'")])
def test_an_item_that_fails_alone_for_good_is_set_aside_and_the_rest_go_on(error, reason):
    """A value its column cannot hold, or whatever else than the database out
    of reach fails for one item alone, would fail at every redelivery and
    hold back the items behind it for ever: set aside (a ContractError naming
    the error by its first line, not the statement's parameters), the next
    items stored."""
    stored = []

    def together(items):
        raise RuntimeError("the batch failed")

    def alone(item):
        if item == "poison":
            raise error
        stored.append(item)

    outcomes = store_all(["a", "poison", "c"], together, alone, "things")
    assert outcomes[0] is None and outcomes[2] is None and stored == ["a", "c"]
    assert isinstance(outcomes[1], ContractError) and str(outcomes[1]) == reason


def test_what_is_transient():
    """The database out of reach, a connection lost, a deadlock: requeued
    (nothing lost); the rest is set aside."""
    lost = Exception("server closed the connection unexpectedly")
    assert transient(OperationalError("SELECT 1", {}, lost))
    assert transient(InterfaceError("SELECT 1", {}, lost))
    assert transient(ConnectionRefusedError())
    invalidated = DataError("SELECT 1", {}, lost, connection_invalidated=True)
    assert transient(invalidated)
    assert not transient(DataError("INSERT", {}, Exception("NUL")))
    assert not transient(IntegrityError("INSERT", {}, Exception("duplicate key")))
    assert not transient(ValueError("x"))
