"""Message broker plumbing (kombu), shared by the API, the conductor and the agent.

``Broker("memory://")`` is kombu's in-process transport: every connection of
one process shares its queues, so the API, the conductor and simulated agents
can run as threads of one process.  ``Broker("filesystem:///some/folder")``
keeps messages as files in a folder, shared by the processes of one machine
(:mod:`fornace.common.folderbroker`; the local cloud's agents are such processes).
``Broker("amqp://user:pw@host:5672//")`` talks to RabbitMQ.

Delivery is at least once: messages are persistent on durable queues,
publishing waits for the broker's confirmation and retries through a broker
restart, and a consumer acknowledges a message only after its handler
returned -- a message whose handler was cut short by a crash or a lost
connection is delivered again, possibly to another consumer.

Message names and bodies belong to :mod:`fornace.common.contract`.  Nothing here
logs a body unmasked or a password (see :mod:`fornace.common.secrets`).
"""
from __future__ import annotations

import collections
import concurrent.futures
import functools
import logging
import socket
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import kombu
import kombu.common
from kombu import compression

from fornace.common import contract, folderbroker
from fornace.common.brokerurl import is_folder_url
from fornace.common.contract import ContractError
from fornace.common.secrets import find_secrets, mask_text

LOG = logging.getLogger(__name__)

#: kombu retry policy of :meth:`Broker.publish` (about 40 s of retrying).
RETRY_POLICY = {"interval_start": 0.5, "interval_step": 1, "interval_max": 5, "max_retries": 10}
CONFIRM_TIMEOUT = 30.0      # seconds to wait for the broker to confirm a publish
RECONNECT_START = 0.5       # consumer reconnection backoff: 0.5, 1.5, 2.5 ... 5 s
RECONNECT_STEP = 1.0
RECONNECT_MAX = 5.0


@dataclass(frozen=True)
class Delivery:
    """What a handler learns about a message besides its body."""
    message_id: str | None
    queue: str
    redelivered: bool = False  # reliable on AMQP only (memory:// does not tell)
    headers: Mapping[str, Any] = field(default_factory=dict)


Handler = Callable[[Any, Delivery], None]
#: What a batch handler says of each message of its batch, in order: None
#: (handled: acked), a :class:`ContractError` (a bad message: logged, acked) or
#: another exception (requeued).  Returning None says "all handled".
Outcomes = Sequence[BaseException | None] | None
BatchHandler = Callable[[list[tuple[Any, Delivery]]], Outcomes]
BATCH_SIZE = 100            # default most messages a batch handler gets at once


def kombu_queue(name: str) -> kombu.Queue:
    """The durable queue ``name``; ``tasks`` is bound to the direct exchange ``tasks``.

    Every other queue (results, reports, agent queues) is reached through the
    default exchange with its own name as routing key.
    """
    return _kombu_queue(name, contract.TASKS)


@functools.lru_cache(maxsize=1024)   # the same few names for every message (users bind copies)
def _kombu_queue(name: str, tasks: str) -> kombu.Queue:
    if name == tasks:
        exchange = kombu.Exchange(tasks, "direct", durable=True)
        return kombu.Queue(tasks, exchange, routing_key=tasks, durable=True)
    return kombu.Queue(name, kombu.Exchange(""), routing_key=name, durable=True,
                       auto_delete=False)


def message_kind(queue: str) -> str:
    """The contract name of what travels on ``queue`` (for error messages)."""
    if queue == contract.TASKS:
        return "task"
    if queue == contract.RESULTS:
        return "result"
    if queue == contract.REPORTS:
        return "report"
    if queue.startswith("-execution-results-"):
        return "plan result"
    return f"message on {queue!r}"


def decode_message(message: Any, queue: str) -> Any:
    """The JSON body of a kombu message (``ContractError`` when it is not JSON)."""
    body = message.body
    compressed = (message.headers or {}).get("compression")
    if compressed:
        try:
            body = compression.decompress(body, compressed)
        except Exception as exc:  # noqa: BLE001 -- any codec error means a bad message
            raise ContractError(f"{message_kind(queue)}: cannot decompress the body "
                                f"({type(exc).__name__})", message_kind(queue)) from None
    return contract.decode(body, message_kind(queue))


def is_in_memory(url: str) -> bool:
    """True for kombu's in-process transport, which no other process reaches."""
    return url.split(":", 1)[0] == "memory"


def warn_if_in_memory(url: str, consequence: str) -> None:
    """Warn a daemon started alone on memory:// that it talks to nobody."""
    if is_in_memory(url):
        LOG.warning("[broker] url is memory://, which no other process reaches: %s. Use "
                    "'fornace up' for everything in one command, or a [broker] url shared "
                    "by the processes (filesystem:///folder or amqp://...)", consequence)


class Broker:
    """One broker endpoint; use one instance per thread.

    ``heartbeat`` (seconds) applies to consuming connections, whose loop
    drives it; ``confirm`` turns on publisher confirms (AMQP only).
    """

    def __init__(self, url: str = "memory://", heartbeat: int = 30, confirm: bool = True, *,
                 retry_policy: Mapping[str, Any] | None = None,
                 confirm_timeout: float = CONFIRM_TIMEOUT) -> None:
        self.url = url
        self.heartbeat = heartbeat
        self.confirm = confirm
        self.retry_policy = {**RETRY_POLICY, **(retry_policy or {})}
        self.confirm_timeout = confirm_timeout
        self._lock = threading.RLock()
        self._connection: kombu.Connection | None = None
        self._producer: kombu.Producer | None = None

    @property
    def in_memory(self) -> bool:
        return is_in_memory(self.url)

    @property
    def in_folder(self) -> bool:
        return is_folder_url(self.url)

    @property
    def local(self) -> bool:
        """True for the transports without a server (no confirms, no TLS)."""
        return self.in_memory or self.in_folder

    def connection(self, heartbeat: int | None = None) -> kombu.Connection:
        """A new (not yet connected) kombu connection to this broker."""
        heartbeat = self.heartbeat if heartbeat is None else heartbeat
        if self.in_folder:
            return kombu.Connection(transport=folderbroker.Transport, heartbeat=heartbeat,
                                    transport_options=folderbroker.transport_options(self.url))
        options: dict[str, Any] = {}
        if self.in_memory:
            options["polling_interval"] = 0.05
        elif self.confirm:
            options["confirm_publish"] = True
        return kombu.Connection(self.url, heartbeat=heartbeat, transport_options=options)

    @property
    def display(self) -> str:
        """The URL with the password masked, for logs."""
        return self.url if self.local else self.connection().as_uri()

    def __repr__(self) -> str:
        return f"Broker({self.display!r})"

    # -- publishing ------------------------------------------------------------
    def publish(self, queue: str, body: dict[str, Any], message_id: str | None = None) -> str:
        """Send ``body`` (JSON) as a persistent message to ``queue``; return its id.

        The queue is declared durable first, so a message for an agent that
        does not run yet waits for it.  Connection failures are retried with
        backoff (a broker restart is survived); with confirms on, this returns
        only once the broker has taken the message.
        """
        message_id = message_id or uuid.uuid4().hex
        target = kombu_queue(queue)
        with self._lock:
            producer = self._get_producer()

            def errback(exc: Exception, interval: float) -> None:
                LOG.warning("publishing message %s to %r failed (%s: %s); retrying in %.1f s",
                            message_id, queue, type(exc).__name__, exc, interval)

            options: dict[str, Any] = {}
            if not self.local and self.confirm:
                options["confirm_timeout"] = self.confirm_timeout
            producer.publish(body, exchange=target.exchange, routing_key=target.routing_key,
                             declare=[target], serializer="json",
                             delivery_mode=kombu.entity.PERSISTENT_DELIVERY_MODE,
                             message_id=message_id, retry=True,
                             retry_policy={**self.retry_policy, "errback": errback},
                             **options)
        LOG.debug("published message %s to %r", message_id, queue)
        return message_id

    def connect(self, queues: Iterable[str] = ()) -> None:
        """Open the publishing connection and its channel now, and declare
        ``queues``: the first publish to them then waits for no handshake
        (kombu opens both lazily, at the first publish)."""
        with self._lock:
            producer = self._get_producer()
            channel = producer.channel   # resolves kombu's channel promise: connects
            for name in queues:
                kombu.common.maybe_declare(kombu_queue(name), channel)

    def _get_producer(self) -> kombu.Producer:
        if self._producer is None:
            # The publishing connection is idle between messages and nothing
            # would drive its heartbeats: it goes without, relying on confirms
            # and on the retry to notice a dead connection.
            self._connection = self.connection(heartbeat=0)
            # bounds the connecting done outside ``ensure`` (default_channel)
            self._connection.transport_options.update(
                {k: v for k, v in self.retry_policy.items() if k != "errback"})
            self._producer = kombu.Producer(self._connection)
        return self._producer

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                _close_quietly(self._connection)
            self._connection = self._producer = None

    def __enter__(self) -> "Broker":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # -- consuming -------------------------------------------------------------
    def consume(self, handlers: Mapping[str, Handler], stop: threading.Event,
                prefetch: int = 1, **options: Any) -> None:
        """Run the handlers until ``stop`` is set (see :class:`Consumer`)."""
        Consumer(self, handlers, stop, prefetch, **options).run()

    def drain(self, queue: str, timeout: float = 1.0,
              count: int | None = None) -> list[tuple[Any, str | None]]:
        """Take (and ack) the messages of ``queue``: ``[(body, message_id)]``.

        Stops after ``count`` messages, or when none came for ``timeout``
        seconds.  A body that is not JSON is returned as the raw text.  For
        tests and tools.
        """
        taken: list[tuple[Any, str | None]] = []
        conn = self.connection(heartbeat=0)
        try:
            bound = kombu_queue(queue)(conn.channel())
            bound.declare()
            deadline = time.monotonic() + timeout
            while count is None or len(taken) < count:
                message = bound.get(no_ack=False)
                if message is None:
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(0.02)
                    continue
                try:
                    body = decode_message(message, queue)
                except ContractError:
                    body = _raw_text(message)
                taken.append((body, message.properties.get("message_id")))
                message.ack()
                deadline = time.monotonic() + timeout
        finally:
            _close_quietly(conn)
        return taken

    def inbox(self, queue: str, prefetch: int = 100) -> "Inbox":
        """The messages of ``queue`` as the broker pushes them (see :class:`Inbox`)."""
        return Inbox(self, queue, prefetch)

    def consumers(self, queues: list[str]) -> dict[str, int] | None:
        """How many consumers listen on each queue (0 for a queue that does not
        exist); None where the transport cannot tell (memory)."""
        if self.in_folder:
            return folderbroker.consumer_counts(self.url, queues)
        if self.in_memory:
            return None
        counts: dict[str, int] = {}
        conn = self.connection(heartbeat=0)
        try:
            channel = None
            for queue in queues:
                channel = channel or conn.channel()
                try:
                    counts[queue] = channel.queue_declare(queue=queue, passive=True).consumer_count
                except conn.channel_errors:   # no such queue: the broker closed the channel
                    counts[queue], channel = 0, None
        finally:
            _close_quietly(conn)
        return counts

    def delete(self, queue: str) -> None:
        """Delete ``queue`` and its messages."""
        conn = self.connection(heartbeat=0)
        try:
            kombu_queue(queue)(conn.channel()).delete()
        finally:
            _close_quietly(conn)


class Inbox:
    """One queue's messages, pushed by the broker as they arrive.

    For a caller that waits for answers (the conductor waiting for agent
    results): :meth:`get` returns as soon as a message is there, instead of
    polling.  A message is acknowledged when it is returned.  A lost
    connection is reopened on the next :meth:`get` (with a short pause);
    messages that were pushed but not returned then come again.
    """

    def __init__(self, broker: Broker, queue: str, prefetch: int = 100) -> None:
        self.broker = broker
        self.queue = queue
        self.prefetch = prefetch
        self._conn: kombu.Connection | None = None
        self._buffer: collections.deque = collections.deque()

    def __enter__(self) -> "Inbox":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def get(self, timeout: float) -> tuple[Any, str | None] | None:
        """``(body, message_id)`` of the next message, None after ``timeout`` s.

        A body that is not JSON comes as its raw text.
        """
        deadline = time.monotonic() + timeout
        while True:
            if self._buffer:
                return self._take(self._buffer.popleft())
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            try:
                self.open()
                self._conn.drain_events(timeout=remaining)
            except socket.timeout:
                continue
            except Exception as exc:  # noqa: BLE001 -- classified below
                conn = self._conn or self.broker.connection()
                if not isinstance(exc, conn.connection_errors + conn.channel_errors):
                    raise
                LOG.warning("broker %s: %s: %s while waiting on %r; reconnecting",
                            self.broker.display, type(exc).__name__, exc, self.queue)
                self.close()
                time.sleep(min(RECONNECT_START, max(deadline - time.monotonic(), 0)))

    def open(self) -> None:
        """Subscribe now (else the first :meth:`get` does); the broker starts pushing."""
        if self._conn is not None:
            return
        conn = self.broker.connection(heartbeat=0)
        try:
            conn.connect()
            consumer = kombu.Consumer(conn.channel(), queues=[kombu_queue(self.queue)],
                                      on_message=self._buffer.append,
                                      prefetch_count=self.prefetch)
            consumer.consume()
        except Exception:
            _close_quietly(conn)
            raise
        self._conn = conn

    def _take(self, message: Any) -> tuple[Any, str | None]:
        try:
            body = decode_message(message, self.queue)
        except ContractError:
            body = _raw_text(message)
        message.ack()
        return body, message.properties.get("message_id")

    def close(self) -> None:
        self._buffer.clear()    # unacked: the broker delivers them again
        if self._conn is not None:
            _close_quietly(self._conn)
            self._conn = None


class Consumer:
    """Runs handlers for queues until ``stop`` is set, through broker outages.

    ``handlers`` maps queue names to ``handler(body, delivery)``; ``body`` is
    the decoded JSON, ``delivery`` a :class:`Delivery` (message id, queue…).

    * A message is acked only after its handler returned.
    * A handler raising :class:`ContractError` marks a bad message: it is
      logged (id and error, never the body) and acked, so it cannot loop.
      So is a body that is not JSON, unless ``raw_bodies`` asks for it to be
      handed over as text (the agent answers such a plan with an error).
    * Any other exception is logged (secrets of the body masked), and the
      message is requeued after ``requeue_delay`` seconds.
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
      message: dropped alone, logged and acked) or another exception (that
      message failed: requeued).  A handler raising fails the whole batch;
    * handled messages are acked as soon as the handler returned; failed ones
      are requeued after ``requeue_delay``, in order, followed by the
      messages of the same queue that arrived meanwhile, so that on RabbitMQ
      (which puts a requeued message back at its place) the queue's order
      holds.  A handler that must keep its messages in order therefore stops
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
                 raw_bodies: bool = False) -> None:
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
        self.ready = threading.Event()
        self._pending: collections.deque = collections.deque()
        self._in_hand: list[Any] = []   # the batch being handled, not yet settled

    @property
    def batch_prefetch(self) -> int:
        """The prefetch of a batch queue: the batch handled and the next one."""
        return max(self.prefetch, 2 * self.batch_size)

    def run(self) -> None:
        delay = RECONNECT_START
        with concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="fornace-handler") as worker:
            while not self.stop.is_set():
                conn = self.broker.connection()
                errors: tuple = ()
                try:
                    errors = conn.connection_errors + conn.channel_errors
                    conn.connect()
                    self._subscribe(conn)
                    delay = RECONNECT_START
                    self._loop(conn, worker)
                except Exception as exc:  # noqa: BLE001 -- the consumer must go on
                    self.ready.clear()
                    if self.stop.is_set():
                        break
                    if isinstance(exc, errors):
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
                    _close_quietly(conn)

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
        consumer = kombu.Consumer(channel, queues=[kombu_queue(name)],
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
                        redelivered=bool(message.delivery_info.get("redelivered")),
                        headers=dict(message.headers or {}))

    def _decoded(self, queue: str, message: Any) -> tuple[Any, Delivery] | None:
        """A message's body and delivery; None for a body that is not JSON
        (dropped and acked, unless ``raw_bodies`` asks for its text)."""
        delivery = self._delivery(queue, message)
        try:
            return decode_message(message, queue), delivery
        except ContractError as exc:
            if not self.raw_bodies:
                self._drop(delivery, exc)
                message.ack()
                return None
            return _raw_text(message), delivery

    def _handle(self, conn: kombu.Connection, worker: concurrent.futures.Executor,
                queue: str, message: Any) -> None:
        decoded = self._decoded(queue, message)
        if decoded is None:
            return
        body, delivery = decoded
        future = worker.submit(self.handlers[queue], body, delivery)
        self._wait(conn, future, f"message {delivery.message_id} on {queue!r}")
        exc = future.exception()
        if exc is None:
            message.ack()
        elif isinstance(exc, ContractError):
            self._drop(delivery, exc, find_secrets(body))
            message.ack()
        else:
            LOG.error("handler for message %s on %r failed; requeuing it in %.1f s:\n%s",
                      delivery.message_id, queue, self.requeue_delay,
                      mask_text("".join(traceback.format_exception(exc)).rstrip(),
                                find_secrets(body)))
            self._sit_out_requeue_delay(conn)
            message.reject(requeue=True)

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
        items: list[tuple[Any, Delivery]] = []
        kept: list[Any] = []
        for message in messages:
            decoded = self._decoded(queue, message)
            if decoded is not None:
                items.append(decoded)
                kept.append(message)
        if items:
            future = worker.submit(self.batch_handlers[queue], items)
            self._wait(conn, future, _batch_name(items, queue))
            self._settle(conn, queue, items, kept, _outcomes(future, len(items)))
        self._in_hand = []

    def _settle(self, conn: kombu.Connection, queue: str, items: list[tuple[Any, Delivery]],
                messages: list[Any], outcomes: list[BaseException | None]) -> None:
        """Ack what was handled, drop the bad ones, requeue the failed ones in order."""
        failed: list[tuple[Any, Delivery, Any, BaseException]] = []
        for (body, delivery), message, outcome in zip(items, messages, outcomes):
            if outcome is None:
                message.ack()
            elif isinstance(outcome, ContractError):
                self._drop(delivery, outcome, find_secrets(body))
                message.ack()
            else:
                failed.append((body, delivery, message, outcome))
        if not failed:
            return
        self._log_failures(queue, failed)
        self._sit_out_requeue_delay(conn)
        for _, _, message, _ in failed:
            message.reject(requeue=True)
        self._give_back(queue)   # what came after the failed ones goes back behind them

    def _log_failures(self, queue: str,
                      failed: list[tuple[Any, Delivery, Any, BaseException]]) -> None:
        """One error per distinct exception, naming its messages (secrets masked)."""
        groups: dict[int, list[tuple[Any, Delivery, Any, BaseException]]] = {}
        for entry in failed:
            groups.setdefault(id(entry[3]), []).append(entry)
        for group in groups.values():
            exc = group[0][3]
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

    def _drop(self, delivery: Delivery, exc: ContractError, secrets: Any = ()) -> None:
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


def _raw_text(message: Any) -> Any:
    body = message.body
    return body.decode("utf-8", "replace") if isinstance(body, bytes) else body


def _close_quietly(conn: kombu.Connection) -> None:
    try:
        conn.release()
    except Exception:  # noqa: BLE001
        LOG.debug("error closing the broker connection", exc_info=True)
