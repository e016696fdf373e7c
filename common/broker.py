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
returned (:mod:`fornace.common.consumer` runs the handlers) -- a message whose
handler was cut short by a crash or a lost connection is delivered again,
possibly to another consumer.

Message names and bodies belong to :mod:`fornace.common.contract`.  Nothing here
logs a body unmasked or a password (see :mod:`fornace.common.secrets`).
"""
from __future__ import annotations

import collections
import functools
import logging
import socket
import threading
import time
import uuid
from typing import Any, Iterable, Mapping

import kombu
import kombu.common
from kombu import compression

from fornace.common import contract, folderbroker
from fornace.common.brokerurl import is_folder_url
from fornace.common.contract import ContractError

LOG = logging.getLogger(__name__)

#: kombu retry policy of :meth:`Broker.publish` (about 40 s of retrying).
RETRY_POLICY = {"interval_start": 0.5, "interval_step": 1, "interval_max": 5, "max_retries": 10}
CONFIRM_TIMEOUT = 30.0      # seconds to wait for the broker to confirm a publish
RECONNECT_START = 0.5       # reconnection backoff of consumers: 0.5, 1.5, 2.5 ... 5 s
RECONNECT_STEP = 1.0
RECONNECT_MAX = 5.0



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
                close_quietly(self._connection)
            self._connection = self._producer = None

    def __enter__(self) -> "Broker":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # -- consuming -------------------------------------------------------------
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
                    body = raw_text(message)
                taken.append((body, message.properties.get("message_id")))
                message.ack()
                deadline = time.monotonic() + timeout
        finally:
            close_quietly(conn)
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
            close_quietly(conn)
        return counts

    def delete(self, queue: str) -> None:
        """Delete ``queue`` and its messages."""
        conn = self.connection(heartbeat=0)
        try:
            kombu_queue(queue)(conn.channel()).delete()
        finally:
            close_quietly(conn)


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
            close_quietly(conn)
            raise
        self._conn = conn

    def _take(self, message: Any) -> tuple[Any, str | None]:
        try:
            body = decode_message(message, self.queue)
        except ContractError:
            body = raw_text(message)
        message.ack()
        return body, message.properties.get("message_id")

    def close(self) -> None:
        self._buffer.clear()    # unacked: the broker delivers them again
        if self._conn is not None:
            close_quietly(self._conn)
            self._conn = None



def raw_text(message: Any) -> Any:
    body = message.body
    return body.decode("utf-8", "replace") if isinstance(body, bytes) else body


def close_quietly(conn: kombu.Connection) -> None:
    try:
        conn.release()
    except Exception:  # noqa: BLE001
        LOG.debug("error closing the broker connection", exc_info=True)
