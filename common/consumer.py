"""Running handlers for queues, through broker outages: :class:`Consumer`.

The receiving side of :mod:`fornace.common.broker`, used by the daemons (the
API stores results, reports and job events; the conductor runs tasks).  A
message is acknowledged only after its handler returned; a bad message (a
:class:`ContractError`) is set aside -- handed to the consumer's dead-letter
store, or logged without its body -- and acknowledged, so it cannot loop;
any other failure requeues it after a pause (a bounded number of times, if
asked).  Handlers may get one message or a batch of the messages waiting on
their queue.
"""
from __future__ import annotations

import collections
import concurrent.futures
import logging
import socket
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import kombu

from fornace.common.broker import (RECONNECT_MAX, RECONNECT_START, RECONNECT_STEP, Broker,
                                   close_quietly, decode_message, kombu_queue,
                                   queue_type_error, raw_text)
from fornace.common.contract import ContractError
from fornace.common.secrets import find_secrets, mask_text

LOG = logging.getLogger(__name__)


class Requeue(Exception):
    """Raised by a handler to give its message back to the queue on purpose (its
    process is stopping, say): requeued like a failure, but logged without a
    traceback and never counted towards ``max_failures``."""


@dataclass(frozen=True)
class Delivery:
    """What a handler learns about a message besides its body."""
    message_id: str | None
    queue: str
    redelivered: bool = False  # given back by a consumer before (AMQP, folder, memory://)
    headers: Mapping[str, Any] = field(default_factory=dict)


Handler = Callable[[Any, Delivery], None]
#: What a batch handler says of each message of its batch, in order: None
#: (handled: acked), a :class:`ContractError` (a bad message: set aside, acked) or
#: another exception (requeued).  Returning None says "all handled".
Outcomes = Sequence[BaseException | None] | None
BatchHandler = Callable[[list[tuple[Any, Delivery]]], Outcomes]
#: Where bad messages go (see :class:`Consumer`): called with ``[(body,
#: delivery, why)]`` (``body`` decoded, or the text of one that is not JSON);
#: returning means they are kept, and they are acked; raising requeues them.
SetAside = Callable[[list[tuple[Any, Delivery, BaseException]]], None]
MAX_FAILURES_KEPT = 10_000  # messages whose failures are counted at once
BATCH_SIZE = 100            # default most messages a batch handler gets at once


class Consumer:
    """Runs handlers for queues until ``stop`` is set, through broker outages.

    ``handlers`` maps queue names to ``handler(body, delivery)``; ``body`` is
    the decoded JSON, ``delivery`` a :class:`Delivery` (message id, queue…).

    * A message is acked only after its handler returned.
    * A handler raising :class:`ContractError` marks a bad message: it is
      set aside and acked, so it cannot loop.  So is a body that is not JSON,
      unless ``raw_bodies`` asks for it to be handed over as text (the agent
      answers such a plan with an error).  Set aside means handed to
      ``set_aside`` (a dead-letter store: :data:`SetAside`), or without one
      logged (id and error, never the body); a ``set_aside`` that raises
      (its store out of reach) gets the messages requeued instead.
    * Any other exception is logged (secrets of the body masked), and the
      message is requeued after ``requeue_delay`` seconds.  With
      ``max_failures``, a message (by queue and message id) that failed that
      many times in a row, each time with an error that ``transient`` does
      not excuse (default: none is), is set aside instead: a safety net
      against a message that fails for ever.  Of the messages of a batch
      that share one error, only the first is counted: the later ones were
      not tried (see below).
    * Handlers run one at a time in one worker thread, while this loop keeps
      the connection's heartbeats going, so a handler may take hours.  A
      handler is never interrupted: after ``stop`` the running one finishes
      (and is acked) before :meth:`run` returns; handlers that can be long
      should watch the same event.
    * When the broker goes away the consumer reconnects with backoff;
      messages taken but not acked then are redelivered by the broker.

    Batches.  A consumer that stores what it receives pays a database
    transaction per message; ``batch_handlers`` maps queue names (not also in
    ``handlers``) to ``handler(items)`` that get up to ``batch_size`` waiting
    messages of their queue at once, ``items`` being ``[(body, delivery)]`` in
    arrival order (a queue's order is kept; batches of different queues are
    not ordered among themselves, as single messages are not).  Such a queue
    gets its own channel with a prefetch of ``2 * batch_size`` (at least
    ``prefetch``), so the next batch is already here while one is handled;
    a batch is whatever is waiting: nothing waits to fill one.  The rules
    above hold for each message of a batch:

    * a body that is not JSON is dropped (logged, acked) alone, before the
      handler; the rest of the batch goes on (``raw_bodies`` hands it over);
    * the handler returns None (every message handled) or one outcome per
      message, in order: None (handled), a :class:`ContractError` (a bad
      message: set aside alone and acked) or another exception (that
      message failed: requeued).  A handler raising fails the whole batch;
    * handled messages are acked as soon as the handler returned; failed ones
      are requeued after ``requeue_delay``, in order, followed by the
      messages of the same queue that arrived meanwhile, so that on RabbitMQ
      (whose classic queues put a requeued message back at its place) the
      queue's order holds; quorum queues requeue at the tail, so there it
      holds for what this consumer held (up to the prefetch), not past it.
      A handler that must keep its messages in order therefore stops
      at the first failure and gives every later message the same exception
      (not tried).  memory:// and folder brokers requeue at the tail, for
      single messages as for batches.

    ``ready`` is set while the consumer is subscribed to all its queues.
    """

    def __init__(self, broker: Broker | str, handlers: Mapping[str, Handler],
                 stop: threading.Event, prefetch: int = 1, *,
                 batch_handlers: Mapping[str, BatchHandler] | None = None,
                 batch_size: int = BATCH_SIZE,
                 requeue_delay: float = 1.0, poll_interval: float = 0.5,
                 raw_bodies: bool = False, set_aside: SetAside | None = None,
                 max_failures: int | None = None,
                 transient: Callable[[BaseException], bool] = lambda exc: False) -> None:
        batch_handlers = dict(batch_handlers or {})
        if not handlers and not batch_handlers:
            raise ValueError("a consumer needs at least one queue handler")
        if set(handlers) & set(batch_handlers):
            raise ValueError(f"queues with both a handler and a batch handler: "
                             f"{', '.join(sorted(set(handlers) & set(batch_handlers)))}")
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.broker = broker if isinstance(broker, Broker) else Broker(broker)
        self.handlers = dict(handlers)
        self.batch_handlers = batch_handlers
        self.batch_size = batch_size
        self.stop = stop
        self.prefetch = prefetch
        self.requeue_delay = requeue_delay
        self.poll_interval = poll_interval
        self.raw_bodies = raw_bodies
        self.set_aside = set_aside
        self.max_failures = max_failures
        self.transient = transient
        # (queue, message id) -> failures in a row (max_failures), oldest first
        self._failures: collections.OrderedDict = collections.OrderedDict()
        self.ready = threading.Event()
        self._pending: collections.deque = collections.deque()
        self._in_hand: list[Any] = []   # the batch being handled, not yet settled
        self._worker: Any = None        # the handlers' thread, while running

    @property
    def batch_prefetch(self) -> int:
        """The prefetch of a batch queue: the batch handled and the next one."""
        return max(self.prefetch, 2 * self.batch_size)

    def run(self) -> None:
        delay = RECONNECT_START
        with concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="fornace-handler") as worker:
            self._worker = worker   # set_aside runs there too
            while not self.stop.is_set():
                conn = None
                errors: tuple = ()
                try:
                    # every node of a cluster is tried; the handlers' messages are
                    # on the quorum queues of whichever answers
                    conn = self.broker.open_connection()
                    errors = conn.connection_errors + conn.channel_errors
                    self._subscribe(conn)
                    delay = RECONNECT_START
                    self._loop(conn, worker)
                except Exception as exc:  # noqa: BLE001 -- the consumer must go on
                    self.ready.clear()
                    if self.stop.is_set():
                        break
                    errors = errors or _errors_of(self.broker)
                    if queue_type_error(exc, self.broker.queue_type):   # an operator's to fix
                        LOG.error("broker %s: %s; trying again in %.1f s", self.broker.display,
                                  self.broker.describe(exc), delay)
                    elif isinstance(exc, errors):
                        LOG.warning("broker %s: %s: %s; reconnecting in %.1f s",
                                    self.broker.display, type(exc).__name__, exc, delay)
                    else:
                        LOG.exception("consumer on %s failed; reconnecting in %.1f s",
                                      self.broker.display, delay)
                    self.stop.wait(delay)
                    delay = min(delay + RECONNECT_STEP, RECONNECT_MAX)
                finally:
                    self.ready.clear()
                    self._give_back()
                    if conn is not None:
                        close_quietly(conn)

    # -- one connection --------------------------------------------------------
    def _subscribe(self, conn: kombu.Connection) -> None:
        self._consumers = []
        channel = conn.channel() if self.handlers else None
        for name in self.handlers:
            self._consume(channel, name, self.prefetch)
        for name in self.batch_handlers:
            # a channel of its own: memory:// and folder brokers apply a prefetch
            # to the whole channel, RabbitMQ to each consumer
            self._consume(conn.channel(), name, self.batch_prefetch)
        self.ready.set()
        LOG.debug("consuming %s on %s", ", ".join([*self.handlers, *self.batch_handlers]),
                  self.broker.display)

    def _consume(self, channel: Any, name: str, prefetch: int) -> None:
        consumer = kombu.Consumer(channel, queues=[kombu_queue(name, self.broker.queue_type)],
                                  on_message=self._receiver(name), prefetch_count=prefetch)
        consumer.consume()
        self._consumers.append(consumer)

    def _receiver(self, queue: str) -> Callable[[Any], None]:
        def receive(message: Any) -> None:
            self._pending.append((queue, message))
        return receive

    def _loop(self, conn: kombu.Connection, worker: concurrent.futures.Executor) -> None:
        while not self.stop.is_set():
            if self._pending:
                queue, message = self._pending.popleft()
                if queue in self.batch_handlers:
                    self._handle_batch(conn, worker, queue, self._take_batch(conn, queue,
                                                                             message))
                else:
                    self._handle(conn, worker, queue, message)
                continue
            self._pump(conn, self.poll_interval)

    def _pump(self, conn: kombu.Connection, timeout: float) -> None:
        """Read from the broker (deliveries, heartbeats) for up to ``timeout``."""
        try:
            conn.drain_events(timeout=timeout)
        except socket.timeout:
            pass
        conn.heartbeat_check()

    def _delivery(self, queue: str, message: Any) -> Delivery:
        return Delivery(message_id=message.properties.get("message_id"), queue=queue,
                        redelivered=_redelivered(message),
                        headers=dict(message.headers or {}))

    def _decoded(self, queue: str, message: Any) -> tuple[Any, Delivery, ContractError | None]:
        """A message's body and delivery, and why it is bad: a body that is not
        JSON (its text is the body then, to be set aside, unless
        ``raw_bodies`` asks for it to be handed over)."""
        delivery = self._delivery(queue, message)
        try:
            return decode_message(message, queue), delivery, None
        except ContractError as exc:
            return raw_text(message), delivery, None if self.raw_bodies else exc

    def _handle(self, conn: kombu.Connection, worker: concurrent.futures.Executor,
                queue: str, message: Any) -> None:
        body, delivery, bad = self._decoded(queue, message)
        outcome: BaseException | None = bad
        if bad is None:
            future = worker.submit(self.handlers[queue], body, delivery)
            self._wait(conn, future, f"message {delivery.message_id} on {queue!r}")
            outcome = future.exception()
        self._settle(conn, queue, [(body, delivery)], [message], [outcome])

    def _sit_out_requeue_delay(self, conn: kombu.Connection) -> None:
        """Wait ``requeue_delay`` (less after ``stop``), the connection kept alive."""
        deadline = time.monotonic() + self.requeue_delay
        while not self.stop.is_set() and time.monotonic() < deadline:
            self._pump(conn, min(self.poll_interval, max(deadline - time.monotonic(), 0.01)))

    # -- batches -----------------------------------------------------------------
    def _take_batch(self, conn: kombu.Connection, queue: str, first: Any) -> list[Any]:
        """``first`` and the messages of ``queue`` waiting behind it, in order.

        What the broker has already pushed is read first (without waiting), so
        a batch holds everything that is here, up to ``batch_size``.
        """
        self._read_waiting(conn)
        batch, others = [first], collections.deque()
        while self._pending:
            entry = self._pending.popleft()
            if entry[0] == queue and len(batch) < self.batch_size:
                batch.append(entry[1])
            else:
                others.append(entry)
        self._pending.extend(others)
        return batch

    def _read_waiting(self, conn: kombu.Connection) -> None:
        """Take the deliveries already received (in the socket), without waiting."""
        for _ in range(2 * self.batch_size):
            try:
                conn.drain_events(timeout=0)
            except socket.timeout:
                break
        conn.heartbeat_check()

    def _handle_batch(self, conn: kombu.Connection, worker: concurrent.futures.Executor,
                      queue: str, messages: list[Any]) -> None:
        self._in_hand = messages
        # bodies that are not JSON are set aside first, alone; those that cannot
        # be (the dead-letter store out of reach) are requeued with the failed ones
        entries = [(*self._decoded(queue, message), message) for message in messages]
        kept = {id(message): why for _, _, message, why in self._put_aside(
            conn, queue, [(body, delivery, message, bad) for body, delivery, bad, message in entries
                    if bad is not None])}
        entries = [(body, delivery, None if bad is None else kept[id(message)], message)
                   for body, delivery, bad, message in entries
                   if bad is None or id(message) in kept]
        items = [(body, delivery) for body, delivery, bad, _ in entries if bad is None]
        outcomes: list[BaseException | None] = [bad for _, _, bad, _ in entries]
        if items:
            future = worker.submit(self.batch_handlers[queue], items)
            self._wait(conn, future, _batch_name(items, queue))
            handled = iter(_outcomes(future, len(items)))
            outcomes = [next(handled) if bad is None else bad for _, _, bad, _ in entries]
        if entries:
            self._settle(conn, queue, [(body, delivery) for body, delivery, _, _ in entries],
                         [message for *_, message in entries], outcomes)
        self._in_hand = []

    def _settle(self, conn: kombu.Connection, queue: str, items: list[tuple[Any, Delivery]],
                messages: list[Any], outcomes: list[BaseException | None]) -> None:
        """Ack what was handled, set aside the bad ones (and those that failed
        too often), requeue the failed ones in order."""
        failed: list[tuple[Any, Delivery, Any, BaseException]] = []
        bad: list[tuple[Any, Delivery, Any, BaseException]] = []
        counted: set[int] = set()
        for (body, delivery), message, outcome in zip(items, messages, outcomes):
            if outcome is None:
                self._failures.pop((queue, delivery.message_id), None)
                message.ack()
                continue
            if not isinstance(outcome, (ContractError, Requeue)) and id(outcome) not in counted:
                # the first message with this error failed; those after it
                # with the same one were not tried (see the class's doc)
                counted.add(id(outcome))
                outcome = self._count_failure(delivery, outcome)
            (bad if isinstance(outcome, ContractError) else failed).append(
                (body, delivery, message, outcome))
        kept = self._put_aside(conn, queue, bad)
        if kept:    # the dead-letter store failed: they come again
            order = {id(message): index for index, message in enumerate(messages)}
            failed = sorted(failed + kept, key=lambda entry: order[id(entry[2])])
        if not failed:
            return
        self._log_failures(queue, failed)
        self._sit_out_requeue_delay(conn)
        for _, _, message, _ in failed:
            message.reject(requeue=True)
        if queue in self.batch_handlers:
            self._give_back(queue)   # what came after the failed ones goes back behind them

    def _count_failure(self, delivery: Delivery, exc: BaseException) -> BaseException:
        """``exc``, or a ContractError once the message failed ``max_failures``
        times in a row with errors that are not ``transient``."""
        if self.max_failures is None or delivery.message_id is None or self.transient(exc):
            return exc
        key = (delivery.queue, delivery.message_id)
        count = self._failures.pop(key, 0) + 1
        if count >= self.max_failures:
            first = (str(exc).splitlines() or [""])[0][:300]
            return ContractError(f"failed {count} times in a row, last with "
                                 f"{type(exc).__name__}: {first}")
        self._failures[key] = count
        while len(self._failures) > MAX_FAILURES_KEPT:
            self._failures.popitem(last=False)
        return exc

    def _put_aside(self, conn: kombu.Connection, queue: str,
                   bad: list[tuple[Any, Delivery, Any, BaseException]],
                   ) -> list[tuple[Any, Delivery, Any, BaseException]]:
        """Set aside bad messages and ack them (:data:`SetAside`); those that
        could not be set aside are returned, with why, to be requeued."""
        if not bad:
            return []
        if self.set_aside is not None:
            # in the worker thread, like a handler: this loop keeps the heartbeats
            future = self._worker.submit(self.set_aside, [(body, delivery, why)
                                                          for body, delivery, _, why in bad])
            self._wait(conn, future, f"setting aside {_ids([d for _, d, _, _ in bad])} "
                                     f"on {queue!r}")
            exc = future.exception()
            if exc is not None:   # they are requeued
                return [(body, delivery, message, exc) for body, delivery, message, _ in bad]
        else:
            for body, delivery, _, why in bad:
                self._drop(delivery, why, find_secrets(body))
        for _, _, message, _ in bad:
            message.ack()
        return []

    def _log_failures(self, queue: str,
                      failed: list[tuple[Any, Delivery, Any, BaseException]]) -> None:
        """One error per distinct exception, naming its messages (secrets masked)."""
        groups: dict[int, list[tuple[Any, Delivery, Any, BaseException]]] = {}
        for entry in failed:
            groups.setdefault(id(entry[3]), []).append(entry)
        for group in groups.values():
            exc = group[0][3]
            if isinstance(exc, Requeue):   # given back on purpose: no error, no traceback
                LOG.info("%s on %r given back: %s", _ids([d for _, d, _, _ in group]), queue,
                         exc)
                continue
            secrets: set[str] = set()
            for body, *_ in group:
                find_secrets(body, secrets)
            LOG.error("handler for %s on %r failed; requeuing %s in %.1f s:\n%s",
                      _ids([d for _, d, _, _ in group]), queue,
                      "it" if len(group) == 1 else "them", self.requeue_delay,
                      mask_text("".join(traceback.format_exception(exc)).rstrip(), secrets))

    # -- waiting, dropping, giving back ------------------------------------------
    def _wait(self, conn: kombu.Connection, future: concurrent.futures.Future,
              what: str) -> None:
        """Wait for a handler, keeping the connection alive meanwhile.

        Deliveries for other queues that arrive meanwhile wait in
        ``_pending``.  When the connection breaks, the handler is still let
        finish, then the error goes up (the broker will redeliver).
        """
        while True:
            done, _ = concurrent.futures.wait([future], timeout=self.poll_interval)
            if done:
                return
            try:
                self._pump(conn, 0.05)
            except Exception as exc:
                LOG.warning("connection lost while %s was handled (%s); "
                            "it will be delivered again", what, exc)
                concurrent.futures.wait([future])
                raise

    def _drop(self, delivery: Delivery, exc: BaseException, secrets: Any = ()) -> None:
        LOG.error("dropping bad message %s on %r: %s", delivery.message_id, delivery.queue,
                  mask_text(str(exc), secrets))

    def _give_back(self, queue: str | None = None) -> None:
        """Requeue, in arrival order, the deliveries taken but not handled
        (memory:// would lose them): those of ``queue``, or all of them."""
        if queue is None:
            taken = [*self._in_hand, *(message for _, message in self._pending)]
            self._in_hand = []
            self._pending.clear()
        else:
            taken = [message for name, message in self._pending if name == queue]
            kept = [entry for entry in self._pending if entry[0] != queue]
            self._pending.clear()
            self._pending.extend(kept)
        for message in taken:
            if message.acknowledged:    # settled before the connection broke
                continue
            try:
                message.reject(requeue=True)
            except Exception:  # noqa: BLE001 -- the connection is gone: the broker requeues
                pass



def _outcomes(future: concurrent.futures.Future, count: int) -> list[BaseException | None]:
    """One outcome per message of a batch from its handler's future (see
    :class:`Consumer`): a raising handler, or one that answers with the wrong
    number of outcomes, fails every message."""
    exc = future.exception()
    if exc is not None:
        return [exc] * count
    outcomes = future.result()
    if outcomes is None:
        return [None] * count
    outcomes = list(outcomes)
    if len(outcomes) != count or not all(o is None or isinstance(o, BaseException)
                                         for o in outcomes):
        wrong = TypeError(f"a batch handler must return None or one outcome (None or an "
                          f"exception) per message: got {len(outcomes)} for {count} messages")
        return [wrong] * count
    return outcomes


def _ids(deliveries: Sequence[Delivery], shown: int = 5) -> str:
    """``message a``, or ``messages a, b, c and 7 more`` (for logs)."""
    ids = [str(d.message_id) for d in deliveries]
    if len(ids) == 1:
        return f"message {ids[0]}"
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return f"messages {', '.join(ids[:shown])}{more}"


def _batch_name(items: Sequence[tuple[Any, Delivery]], queue: str) -> str:
    return f"a batch of {len(items)} ({_ids([d for _, d in items])}) on {queue!r}"


def _errors_of(broker: Broker) -> tuple:
    """The errors of ``broker``'s transport that a reconnection may cure (for an
    error raised before a connection existed: none of its nodes answered)."""
    conn = broker.connection()
    return conn.connection_errors + conn.channel_errors


def _redelivered(message: Any) -> bool:
    """Whether the broker gave ``message`` to a consumer before: AMQP says so in
    its delivery info; kombu's virtual transports (the folder broker,
    memory://) mark the stored message itself when it goes back to its queue
    (a reject, a consumer that stopped)."""
    if message.delivery_info.get("redelivered"):
        return True
    raw = getattr(message, "_raw", None)
    return bool(raw.get("redelivered")) if isinstance(raw, dict) else False
