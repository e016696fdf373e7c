"""The one loop that stores what the conductor sends back: results, reports
and job events, each message parsed with the contract, then stored in
batches.

One rule for contract errors: a body the contract refuses cannot be stored
and never will be; it is set aside with its :class:`ContractError` (the
reason) as its outcome, and the consumer acks it (never retried) and hands
it to its dead-letter table (:mod:`fornace.api.stores.deadletters`), as
:class:`fornace.common.consumer.Consumer` documents.  The others are stored
in one transaction; when that fails, one by one (:func:`store_all`), so
that one message never loses the others.  One that fails alone for any
reason but a database out of reach (:func:`transient`) -- a value its
column cannot hold, a NUL, a key it already has, a bug the message trips --
is set aside the same way: retried, it would fail for ever, and keep the
messages behind it waiting.  A database out of reach loses nothing: what it
stopped is requeued.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Sequence, TypeVar

from sqlalchemy.exc import DataError

from fornace.common.contract import ContractError
from fornace.common.db.outages import transient

LOG = logging.getLogger(__name__)

#: what storing one message of a batch came to: None (stored, or dropped as
#: its own code decided), a ContractError (a bad message, set aside) or the
#: failure that stopped it (the consumer requeues it); see :func:`store_all`
Outcome = Exception | None
Message = tuple[Any, str | None]   # (body, message id)
Item = TypeVar("Item")


def store_messages(messages: Sequence[Message], parse: Callable[[Any, str | None], Item],
                   together: Callable[[Sequence[Item]], None], alone: Callable[[Item], None],
                   what: str) -> list[Outcome]:
    """Store ``messages`` (in arrival order): each body parsed (``parse(body,
    message id)``; a ContractError sets that message aside, the error its
    outcome), the parsed ones stored by :func:`store_all`.  One outcome per
    message, in order."""
    outcomes: list[Outcome] = [None] * len(messages)
    parsed: list[Item] = []
    places: list[int] = []
    for index, (body, message_id) in enumerate(messages):
        try:
            parsed.append(parse(body, message_id))
        except ContractError as exc:
            outcomes[index] = exc
            continue
        places.append(index)
    for index, outcome in zip(places, store_all(parsed, together, alone, what)):
        outcomes[index] = outcome
    return outcomes


def store_packed(messages: Sequence[Message],
                 unpack: Callable[[Any, str | None], list[Message]],
                 store: Callable[[Sequence[Message]], list[Outcome]]) -> list[Outcome]:
    """:func:`store_messages` for messages that may each hold several (a pack:
    ``unpack(body, message id)`` gives them, or raises a ContractError): the
    held ones are stored by ``store`` as if they had come one by one, and a
    pack's outcome is theirs together (:func:`pack_outcome`)."""
    held: list[Message] = []
    spans: list[tuple[int, int, bool] | ContractError] = []   # (start, end, a pack)
    for body, message_id in messages:
        try:
            inside = unpack(body, message_id)
        except ContractError as exc:
            spans.append(exc)
            continue
        spans.append((len(held), len(held) + len(inside),
                      len(inside) != 1 or inside[0][0] is not body))
        held += inside
    outcomes = store(held) if held else []
    return [span if isinstance(span, ContractError)
            else pack_outcome(outcomes[span[0]:span[1]], [m for _, m in held[span[0]:span[1]]])
            if span[2] else outcomes[span[0]]
            for span in spans]


def pack_outcome(outcomes: Sequence[Outcome], message_ids: Sequence[str | None]) -> Outcome:
    """The outcome of a pack from those of what it holds: the failure that
    stopped one (the pack is requeued; what was stored is not stored twice),
    else a ContractError naming those set aside (the pack is set aside with
    it, what it held besides them stored), else None."""
    stopped = next((o for o in outcomes if o is not None and not isinstance(o, ContractError)),
                   None)
    if stopped is not None:
        return stopped
    refused = [(message_id, o) for message_id, o in zip(message_ids, outcomes)
               if isinstance(o, ContractError)]
    if not refused:
        return None
    message_id, first = refused[0]
    more = f" (and {len(refused) - 1} more of the pack)" if len(refused) > 1 else ""
    return ContractError(f"{message_id or 'a message of the pack'}: {first}{more}")


def store_message(store: Callable[[Sequence[Message]], list[Outcome]], body: Any,
                  message_id: str | None) -> None:
    """Store one message with the batch call ``store``; what stopped it is raised
    (a ContractError for a body the contract refuses)."""
    outcome, = store([(body, message_id)])
    if outcome is not None:
        raise outcome


def store_all(items: Sequence[Item], together: Callable[[Sequence[Item]], None],
              alone: Callable[[Item], None], what: str) -> list[Outcome]:
    """Store ``items`` in one transaction (``together``); when that fails (a
    concurrent insert, a value the database refuses), one by one (``alone``),
    so that one item never loses the others.

    One outcome per item: None (stored, or dropped as its own code decided),
    a ContractError for an item that fails alone for good (:func:`set_aside`:
    a text too long for its column, a NUL PostgreSQL cannot hold, a key it
    holds already, an error of the store code; retried it would fail again,
    so it is set aside like a body the contract refuses, and the next items
    go on), or the :func:`transient` failure (the database out of reach) that
    stopped it.  That stops the batch: the later items get the same
    exception, untried, so that what comes from one queue is stored in its
    order (the consumer requeues them behind the failed one).  A single item
    goes straight to ``alone``.
    """
    if len(items) > 1:
        try:
            together(items)
            return [None] * len(items)
        except Exception as exc:  # noqa: BLE001 -- whatever it was, one by one tells
            LOG.warning("storing %d %s in one transaction failed (%s: %.200s); storing them "
                        "one by one", len(items), what, type(exc).__name__,
                        str(exc).split("\n", 1)[0])
    outcomes: list[Outcome] = []
    for index, item in enumerate(items):
        try:
            alone(item)
        except Exception as exc:  # noqa: BLE001 -- sorted below
            if transient(exc):   # the consumer requeues it and what comes after it
                return outcomes + [exc] * (len(items) - index)
            outcomes.append(set_aside(exc))   # retried, it would fail again, for ever
            continue
        outcomes.append(None)
    return outcomes


def set_aside(exc: BaseException) -> ContractError:
    """Why a message that failed alone for good is set aside: the error's
    first line (a database error's next ones quote the statement and its
    parameters), bounded."""
    if isinstance(exc, DataError):
        return ContractError(f"the database cannot hold its values: {_first_line(exc)}")
    return ContractError(f"storing it failed: {type(exc).__name__}: {_first_line(exc)}")


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).replace("\x00", "")
    return (text.splitlines() or [""])[0][:300]
