"""Message broker plumbing (kombu), shared by the API, the conductor and the agent.

``Broker("memory://")`` is kombu's in-process transport: every connection of
one process shares its queues, so the API, the conductor and simulated agents
can run as threads of one process.  ``Broker("filesystem:///some/folder")``
keeps messages as files in a folder, shared by the processes of one machine
(:mod:`fornace.common.folderbroker`; the local cloud's agents are such processes).
``Broker("amqp://user:pw@host:5672//")`` talks to RabbitMQ;
``Broker("amqp://...@mq1//;amqp://...@mq2//")`` to a RabbitMQ cluster (kombu's
failover URL, :mod:`fornace.common.brokerurl`): each connection goes to the
first node that answers, the node that answered last tried first.  With
``queue_type="quorum"`` every queue is declared as a quorum queue (replicated
on the cluster's nodes), else as a classic one; a queue that exists with the
other type is refused with a :class:`QueueTypeError` naming it.

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
import contextlib
import functools
import logging
import re
import socket
import threading
import time
import uuid
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import amqp
import amqp.exceptions
import amqp.spec

import kombu
import kombu.common
import kombu.serialization
from kombu import compression

from fornace.common import contract, folderbroker
from fornace.common.brokerurl import AMQP_PORT, hosts, is_folder_url, masked
from fornace.common.contract import ContractError
from fornace.common.errors import FornaceError

LOG = logging.getLogger(__name__)

#: kombu retry policy of :meth:`Broker.publish` (about 40 s of retrying).
RETRY_POLICY = {"interval_start": 0.5, "interval_step": 1, "interval_max": 5, "max_retries": 10}
CONFIRM_TIMEOUT = 30.0      # seconds to wait for the broker to confirm a publish
RECONNECT_START = 0.5       # reconnection backoff of consumers: 0.5, 1.5, 2.5 ... 5 s
RECONNECT_STEP = 1.0
RECONNECT_MAX = 5.0
#: ``[broker] queue_type``: how the durable queues are declared.
CLASSIC, QUORUM = "classic", "quorum"
QUEUE_TYPES = (CLASSIC, QUORUM)
PERSISTENT = kombu.entity.PERSISTENT_DELIVERY_MODE
#: what loses a batch's confirmation (besides the connection's own errors); a
#: ChannelError: its channel went with a connection lost meanwhile (a node of a
#: cluster gone) -- the batch goes again on a new connection
_CONFIRM_FAILURES: tuple[type[BaseException], ...] = (
    amqp.exceptions.MessageNacked, amqp.exceptions.ChannelError, socket.timeout,
    TimeoutError, OSError)


class QueueTypeError(FornaceError):
    """A queue exists on the broker with another type than ``[broker] queue_type``
    (RabbitMQ's PRECONDITION_FAILED on ``x-queue-type``)."""


def kombu_queue(name: str, queue_type: str = CLASSIC) -> kombu.Queue:
    """The durable queue ``name``; ``tasks`` is bound to the direct exchange ``tasks``.

    Every other queue (results, reports, agent queues) is reached through the
    default exchange with its own name as routing key.  A quorum queue says
    so (``x-queue-type``); a classic one carries no argument, as before
    ``queue_type`` existed, so the queues those versions made still match.
    Every queue is durable and none exclusive or auto-deleted: what quorum
    queues require.
    """
    return _kombu_queue(name, contract.TASKS, queue_type)


@functools.lru_cache(maxsize=1024)   # the same few names for every message (users bind copies)
def _kombu_queue(name: str, tasks: str, queue_type: str) -> kombu.Queue:
    arguments = {"x-queue-type": QUORUM} if queue_type == QUORUM else None
    if name == tasks:
        exchange = kombu.Exchange(tasks, "direct", durable=True)
        return kombu.Queue(tasks, exchange, routing_key=tasks, durable=True,
                           queue_arguments=arguments)
    return kombu.Queue(name, kombu.Exchange(""), routing_key=name, durable=True,
                       auto_delete=False, queue_arguments=arguments)


_MISMATCH = re.compile(r"inequivalent arg 'x-queue-type' for queue '(?P<queue>.*?)' in vhost "
                       r"'(?P<vhost>.*?)': .*current is (?:the value )?(?P<current>none|'[^']*')")


def queue_type_error(exc: BaseException, queue_type: str) -> QueueTypeError | None:
    """What a broker error means when a queue exists with another type than
    ``queue_type``: a :class:`QueueTypeError` naming the queue, both types, the
    option and the way out; None for any other error."""
    found = _MISMATCH.search(str(exc))
    if found is None:
        return None
    current = found["current"].strip("'")
    current = CLASSIC if current == "none" else current
    queue, vhost = found["queue"], found["vhost"]
    return QueueTypeError(
        f"queue {queue!r} exists on the broker as a {current} queue, but [broker] queue_type "
        f"is {queue_type} (virtual host {vhost!r}): once no message of it is needed, delete "
        f"it (rabbitmqctl delete_queue -p {vhost} {queue}) for it to be declared again, or "
        f"set queue_type = {current}")


def describe(exc: BaseException, queue_type: str = CLASSIC) -> str:
    """``Type: message`` of a broker error, or the :class:`QueueTypeError` it means."""
    mismatch = queue_type_error(exc, queue_type)
    return str(mismatch) if mismatch else f"{type(exc).__name__}: {exc}"


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


def _pauses(policy: Mapping[str, Any]) -> float:
    """Seconds kombu's retries under ``policy`` pause in all (on one host)."""
    start = policy.get("interval_start", 0)
    step = policy.get("interval_step", 1)
    most = policy.get("interval_max", 5)
    return sum(min(start + step * n, most) for n in range(policy.get("max_retries") or 0))


class Broker:
    """One broker endpoint; use one instance per thread.

    ``heartbeat`` (seconds) applies to consuming connections, whose loop
    drives it; ``confirm`` turns on publisher confirms (AMQP only);
    ``queue_type`` is ``[broker] queue_type`` (:data:`QUEUE_TYPES`).  A bad
    ``url`` raises :class:`~fornace.common.brokerurl.BrokerUrlError`.
    """

    def __init__(self, url: str = "memory://", heartbeat: int = 30, confirm: bool = True, *,
                 retry_policy: Mapping[str, Any] | None = None,
                 confirm_timeout: float = CONFIRM_TIMEOUT, queue_type: str = CLASSIC) -> None:
        if queue_type not in QUEUE_TYPES:
            raise ValueError(f"[broker] queue_type {queue_type!r} is not one of "
                             f"{', '.join(QUEUE_TYPES)}")
        self._hosts = [host.url for host in hosts(url)]   # checks the URL
        self.url = url
        self.queue_type = queue_type
        self.heartbeat = heartbeat
        self.confirm = confirm
        self.retry_policy = {**RETRY_POLICY, **(retry_policy or {})}
        self.confirm_timeout = confirm_timeout
        self._lock = threading.RLock()
        self._connection: kombu.Connection | None = None
        self._producer: kombu.Producer | None = None
        self._batch_channel: _ConfirmedChannel | None = None   # :meth:`publish_many`'s

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
        """A new (not yet connected) kombu connection to this broker; of a
        cluster's nodes, the one that answered last comes first (kombu moves on
        to the next one, round-robin, when a node does not answer)."""
        heartbeat = self.heartbeat if heartbeat is None else heartbeat
        if self.in_folder:
            return kombu.Connection(transport=folderbroker.Transport, heartbeat=heartbeat,
                                    transport_options=folderbroker.transport_options(self.url))
        options: dict[str, Any] = {}
        if self.in_memory:
            options["polling_interval"] = 0.05
        elif self.confirm:
            options["confirm_publish"] = True
        url = ";".join(self._hosts) if self._hosts else self.url
        return kombu.Connection(url, heartbeat=heartbeat, transport_options=options)

    def open_connection(self, heartbeat: int | None = None) -> kombu.Connection:
        """A new connection, connected: every node of a cluster is tried once
        (kombu's ``connect()`` tries two), the first that answers is kept, and
        the next connections try it first.  Raises the last node's error."""
        conn = self.connection(heartbeat)
        try:
            # max_retries counts the tries after the first; no pause between
            # nodes: the caller paces its reconnections
            conn.ensure_connection(max_retries=max(len(conn.alt), 1) - 1, interval_start=0,
                                   interval_step=0, interval_max=0,
                                   reraise_as_library_errors=False)
        except Exception:
            close_quietly(conn)
            raise
        self._prefer(conn)
        return conn

    def _prefer(self, conn: kombu.Connection) -> None:
        """Put the node ``conn`` reached first in the list (a dead node first
        would cost every later connection its connect timeout)."""
        if len(self._hosts) < 2:
            return
        for index, host in enumerate(hosts(";".join(self._hosts))):
            if (host.host, host.port) == (conn.hostname, conn.port or AMQP_PORT):
                self._hosts = self._hosts[index:] + self._hosts[:index]
                return

    @property
    def display(self) -> str:
        """The URL with the password of every host masked, for logs."""
        return masked(self.url)

    def describe(self, exc: BaseException) -> str:
        """``Type: message`` of a broker error, or the queue type mismatch it means."""
        return describe(exc, self.queue_type)

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
        target = kombu_queue(queue, self.queue_type)
        errback = self._errback(message_id, queue)

        def send() -> None:
            self._publish_one(target, body, message_id, errback)
        self._retrying(send, errback)
        LOG.debug("published message %s to %r", message_id, queue)
        return message_id

    def publish_many(self, queue: str, messages: Sequence[tuple[dict[str, Any], str]]) -> None:
        """Send ``messages`` (``(body, message_id)``) to ``queue``, in order,
        each a persistent message of its own; return once the broker confirmed
        them all.

        One confirmation is waited for per call, not one per message: a job's
        reports and events go out by the hundred, and a round trip each made
        the broker's confirms the job's pace.  A nack, a lost connection or no
        confirmation within ``confirm_timeout`` sends the whole call's
        messages again (same ids: consumers store by id), through the same
        reconnections and host list as :meth:`publish`; what still fails
        after them raises.
        """
        if not messages:
            return
        target = kombu_queue(queue, self.queue_type)
        errback = self._errback(f"{messages[0][1]} (and {len(messages) - 1} more)", queue)

        def send() -> None:
            if self.local or not self.confirm:
                self._publish_unconfirmed(target, messages)
            else:
                self._publish_confirmed(target, messages)
        self._retrying(send, errback)
        LOG.debug("published %d messages to %r", len(messages), queue)

    @staticmethod
    def _errback(what: str, queue: str) -> Callable[[Exception, float], None]:
        def errback(exc: Exception, interval: float) -> None:
            LOG.warning("publishing message %s to %r failed (%s: %s); retrying in %.1f s",
                        what, queue, type(exc).__name__, exc, interval)
        return errback

    def _retrying(self, send: Callable[[], None],
                  errback: Callable[[Exception, float], None]) -> None:
        """Call ``send`` until it succeeds, reconnecting with backoff.

        kombu moves to the next host of a failover URL without waiting, so its
        retries can all be spent in milliseconds while a cluster elects new
        queue leaders: kombu's tries are repeated, with backoff, for as long
        as its own pauses would have lasted on one host."""
        deadline = time.monotonic() + _pauses(self.retry_policy)
        pause = self.retry_policy.get("interval_start", RETRY_POLICY["interval_start"])
        while True:
            try:
                with self._lock:
                    send()
                return
            except kombu.exceptions.OperationalError as exc:
                if time.monotonic() + pause > deadline:
                    raise
                errback(exc, pause)
                self.close()                  # a new connection, through the host list
                time.sleep(pause)
                pause = min(pause * 2, self.retry_policy.get("interval_max", RECONNECT_MAX))

    def _publish_one(self, target: kombu.Queue, body: dict[str, Any], message_id: str,
                     errback: Callable[[Exception, float], None]) -> None:
        """One message through kombu's producer (a confirm of its own when on)."""
        options: dict[str, Any] = {}
        if not self.local and self.confirm:
            options["confirm_timeout"] = self.confirm_timeout
        producer = self._get_producer()
        with self._queue_types():
            producer.publish(body, exchange=target.exchange, routing_key=target.routing_key,
                             declare=[target], serializer="json",
                             delivery_mode=kombu.entity.PERSISTENT_DELIVERY_MODE,
                             message_id=message_id, retry=True,
                             retry_policy={**self.retry_policy, "errback": errback},
                             **options)

    def _publish_unconfirmed(self, target: kombu.Queue,
                             messages: Sequence[tuple[dict[str, Any], str]]) -> None:
        """``messages`` on the producer's channel, no confirms (the folder and
        memory transports, or confirms off): the queue declared once, not per
        message through kombu's retrying wrapper."""
        producer = self._get_producer()
        channel = producer.channel
        with self._queue_types():
            kombu.common.maybe_declare(target, channel)
        _send_each(channel.basic_publish, channel, target, messages)

    def _publish_confirmed(self, target: kombu.Queue,
                           messages: Sequence[tuple[dict[str, Any], str]]) -> None:
        """``messages`` on this connection's batch channel (in confirm mode),
        then one wait until the broker acked the last of them.  Any failure is
        an ``OperationalError`` (the caller reconnects and sends them again)."""
        producer = self._get_producer()
        conn = self._connection
        failures = _CONFIRM_FAILURES + tuple(conn.recoverable_connection_errors
                                             + conn.recoverable_channel_errors)
        try:
            producer.channel   # connects (kombu's retry policy), or raises OperationalError
            if self._batch_channel is None or self._batch_channel.channel.connection is None:
                # none yet, or it went with its connection: kombu reconnected since
                self._batch_channel = _ConfirmedChannel(conn.channel())
            confirmed = self._batch_channel
            channel = confirmed.channel
            with self._queue_types():
                kombu.common.maybe_declare(target, channel)
            tags = confirmed.expect(len(messages))
            _send_each(channel._basic_publish,   # the publish without its own confirm
                       channel, target, messages)
            self._await_confirms(confirmed, tags)
        except QueueTypeError:
            raise
        except kombu.exceptions.OperationalError:
            raise
        except failures as exc:
            raise kombu.exceptions.OperationalError(
                f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__) from exc

    def _await_confirms(self, confirmed: "_ConfirmedChannel", tags: range) -> None:
        """Wait until the broker acked every delivery tag of ``tags`` (a nack or
        ``confirm_timeout`` raises)."""
        deadline = time.monotonic() + self.confirm_timeout
        while not confirmed.settled(tags):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout(f"no confirmation of message(s) {tags.start}-"
                                     f"{tags.stop - 1} within {self.confirm_timeout:g} s")
            # any frame ends a wait; the channel's listeners count the confirms
            confirmed.channel.wait([amqp.spec.Basic.Ack, amqp.spec.Basic.Nack],
                                   timeout=remaining)

    def connect(self, queues: Iterable[str] = ()) -> None:
        """Open the publishing connection and its channel now, and declare
        ``queues``: the first publish to them then waits for no handshake
        (kombu opens both lazily, at the first publish)."""
        with self._lock:
            producer = self._get_producer()
            channel = producer.channel   # resolves kombu's channel promise: connects
            with self._queue_types():
                for name in queues:
                    kombu.common.maybe_declare(kombu_queue(name, self.queue_type), channel)

    @contextlib.contextmanager
    def _queue_types(self) -> Iterator[None]:
        """A declaration refused for a queue of the other type raises
        :class:`QueueTypeError` (the channel is gone: the connection is reset)."""
        try:
            yield
        except Exception as exc:
            mismatch = queue_type_error(exc, self.queue_type)
            if mismatch is None:
                raise
            self.close()
            raise mismatch from exc

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
            self._batch_channel = None

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
        conn = self.open_connection(heartbeat=0)
        try:
            bound = kombu_queue(queue, self.queue_type)(conn.channel())
            with self._queue_types():
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

    def inbox(self, queue: str, prefetch: int = 100, heartbeat: int = 0) -> "Inbox":
        """The messages of ``queue`` as the broker pushes them (see :class:`Inbox`)."""
        return Inbox(self, queue, prefetch, heartbeat)

    def consumers(self, queues: list[str]) -> dict[str, int] | None:
        """How many consumers listen on each queue (0 for a queue that does not
        exist); None where the transport cannot tell (memory)."""
        if self.in_folder:
            return folderbroker.consumer_counts(self.url, queues)
        if self.in_memory:
            return None
        counts: dict[str, int] = {}
        conn = self.open_connection(heartbeat=0)
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
        conn = self.open_connection(heartbeat=0)
        try:
            kombu_queue(queue, self.queue_type)(conn.channel()).delete()
        finally:
            close_quietly(conn)


def _send_each(publish: Callable[..., Any], channel: Any, target: kombu.Queue,
               messages: Sequence[tuple[dict[str, Any], str]]) -> None:
    """Each of ``messages`` as a persistent JSON message of its own with its id,
    as kombu's producer sends one."""
    exchange = target.exchange.name
    for body, message_id in messages:
        content_type, encoding, data = kombu.serialization.dumps(body, "json")
        publish(channel.prepare_message(data, None, content_type, encoding, {},
                                        {"delivery_mode": PERSISTENT, "message_id": message_id}),
                exchange=exchange, routing_key=target.routing_key)


class _ConfirmedChannel:
    """A py-amqp channel in confirm mode and the delivery tags it waits for.

    The broker's acks are counted by the channel's listeners, not by a wait:
    py-amqp reads what came in (acks among it) before every publish, so the
    acks of a batch's first messages may arrive while its last ones go out.
    An ack or nack is ``multiple`` when it settles every tag up to its own.
    """

    def __init__(self, channel: Any) -> None:
        self.channel = channel
        self.sent = 0                      # the last delivery tag given out
        self.unsettled: set[int] = set()
        self.nacked: set[int] = set()
        channel.confirm_select()
        channel.events["basic_ack"].add(self._ack)
        channel.events["basic_nack"].add(self._nack)

    def expect(self, count: int) -> range:
        """The delivery tags of the next ``count`` publishes."""
        tags = range(self.sent + 1, self.sent + count + 1)
        self.sent += count
        self.unsettled.update(tags)
        return tags

    def _settle(self, delivery_tag: int, multiple: bool) -> set[int]:
        done = ({tag for tag in self.unsettled if tag <= delivery_tag} if multiple
                else {delivery_tag} & self.unsettled)
        self.unsettled -= done
        return done

    def _ack(self, delivery_tag: int, multiple: bool) -> None:
        self._settle(delivery_tag, multiple)

    def _nack(self, delivery_tag: int, multiple: bool) -> None:
        self.nacked |= self._settle(delivery_tag, multiple)

    def settled(self, tags: range) -> bool:
        """True once the broker acked all of ``tags``; raises when it nacked one."""
        refused = [tag for tag in tags if tag in self.nacked]
        if refused:
            self.nacked.difference_update(tags)
            raise amqp.exceptions.MessageNacked(
                f"the broker refused {len(refused)} of {len(tags)} message(s)")
        return not any(tag in self.unsettled for tag in tags)


class Inbox:
    """One queue's messages, pushed by the broker as they arrive.

    For a caller that waits for answers (the conductor waiting for agent
    results): :meth:`get` returns as soon as a message is there, instead of
    polling.  A message is acknowledged when it is returned.  A lost
    connection is reopened on the next :meth:`get` (with a short pause);
    messages that were pushed but not returned then come again.

    ``heartbeat`` (seconds, 0: none) is the AMQP heartbeat of its connection,
    driven by :meth:`get`: a process that stops calling it (frozen by SIGSTOP,
    its VM paused) loses the connection after about that long, and the broker
    gives the messages pushed to it and not yet returned to the queue's other
    consumers -- without it they stay with the frozen process until it dies.
    """

    def __init__(self, broker: Broker, queue: str, prefetch: int = 100,
                 heartbeat: int = 0) -> None:
        self.broker = broker
        self.queue = queue
        self.prefetch = prefetch
        self.heartbeat = heartbeat
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
                if self.heartbeat:
                    self._conn.heartbeat_check()   # sends ours, checks the broker's
                    remaining = min(remaining, self.heartbeat / 4)
                self._conn.drain_events(timeout=remaining)
            except socket.timeout:
                continue
            except Exception as exc:  # noqa: BLE001 -- classified below
                conn = self._conn or self.broker.connection()
                if not isinstance(exc, conn.connection_errors + conn.channel_errors):
                    raise
                LOG.log(logging.ERROR if queue_type_error(exc, self.broker.queue_type)
                        else logging.WARNING, "broker %s: %s while waiting on %r; reconnecting",
                        self.broker.display, self.broker.describe(exc), self.queue)
                self.close()
                time.sleep(min(RECONNECT_START, max(deadline - time.monotonic(), 0)))

    def open(self) -> None:
        """Subscribe now (else the first :meth:`get` does); the broker starts pushing."""
        if self._conn is not None:
            return
        conn = self.broker.open_connection(heartbeat=self.heartbeat)
        try:
            consumer = kombu.Consumer(conn.channel(),
                                      queues=[kombu_queue(self.queue, self.broker.queue_type)],
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
