"""The one loop that stores what the conductor sends back: results, reports
and job events, each message parsed with the contract, then stored in
batches.

One rule for contract errors: a body the contract refuses cannot be stored
and never will be; it is set aside with its :class:`ContractError` (the
reason) as its outcome, and the consumer logs and drops it (acked, so never
retried), as :class:`fornace.common.consumer.Consumer` documents.  The others
are stored in one transaction; when that fails, one by one
(:func:`store_all`), so that one message never loses the others.  One
that the database refuses alone (a value its column cannot hold) is set
aside the same way: retried, it would be refused for ever, and keep the
messages behind it waiting.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Sequence, TypeVar

from sqlalchemy.exc import DataError

from fornace.common.contract import ContractError

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
    a ContractError for an item whose values the database refuses alone (a
    :class:`~sqlalchemy.exc.DataError`: a text too long for its column, a
    NUL PostgreSQL cannot hold; it never will, so it is set aside like a
    body the contract refuses, and the next items go on), or the exception
    that stopped it one by one.  That stops the batch: the later items get
    the same exception, untried, so that what comes from one queue is stored
    in its order (the consumer requeues them behind the failed one).  A
    single item goes straight to ``alone``.
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
        except DataError as exc:   # retried, it would be refused again, for ever
            outcomes.append(refused_values(exc))
            continue
        except Exception as exc:  # noqa: BLE001 -- the consumer logs and requeues it
            return outcomes + [exc] * (len(items) - index)
        outcomes.append(None)
    return outcomes


def refused_values(exc: DataError) -> ContractError:
    """Why a message whose values the database refuses is set aside (the
    driver's first line: the rest quotes the statement's parameters)."""
    return ContractError(f"the database cannot hold its values: "
                         f"{str(exc.orig or exc).splitlines()[0][:300]}")
