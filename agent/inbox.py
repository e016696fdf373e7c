"""The unit's input queue as the agent's state machine reads it: one plan at a time.

The agent subscribes with prefetch 1, takes a plan, runs it and acks it only
once its answer is journaled and published (or, for an incomplete plan,
journaled for the re-run).  While a plan runs the machine keeps pumping the
connection (:meth:`PlanInbox.pump`), so heartbeats go on during hour-long
scripts and a lost broker is noticed.  Broker errors are raised as they
come; the machine answers them by going back to INIT.
"""
from __future__ import annotations

import collections
import socket
from dataclasses import dataclass
from typing import Any

import kombu

from fornace.common.broker import Broker, decode_message, kombu_queue
from fornace.common.contract import ContractError


@dataclass
class PlanMessage:
    body: Any                  # decoded JSON, or the raw text of a body that is not JSON
    message_id: str | None
    message: Any               # the kombu message, to ack


class PlanInbox:
    def __init__(self, broker: Broker, queue: str) -> None:
        self.broker = broker
        self.queue = queue
        self._conn: kombu.Connection | None = None
        self._buffer: collections.deque = collections.deque()

    @property
    def is_open(self) -> bool:
        return self._conn is not None

    def open(self) -> None:
        """Subscribe (prefetch 1); the broker starts pushing plans."""
        if self._conn is not None:
            return
        conn = self.broker.open_connection()   # every node of a cluster is tried
        try:
            consumer = kombu.Consumer(conn.channel(),
                                      queues=[kombu_queue(self.queue, self.broker.queue_type)],
                                      on_message=self._buffer.append, prefetch_count=1)
            consumer.consume()
        except Exception:
            _release(conn)
            raise
        self._conn = conn

    def get(self, timeout: float) -> PlanMessage | None:
        """The next plan, or None when none came within ``timeout`` seconds."""
        if not self._buffer:
            self.pump(timeout)
        if not self._buffer:
            return None
        message = self._buffer.popleft()
        try:
            body = decode_message(message, self.queue)
        except ContractError:    # answered as MalformedPlan by the agent
            body = message.body
        return PlanMessage(body, message.properties.get("message_id"), message)

    def pump(self, timeout: float) -> None:
        """Read from the broker for up to ``timeout`` s (deliveries, heartbeats)."""
        if self._conn is None:
            raise ConnectionError("the input queue is not subscribed")
        try:
            self._conn.drain_events(timeout=timeout)
        except socket.timeout:
            pass
        self._conn.heartbeat_check()

    def ack(self, plan: PlanMessage) -> None:
        plan.message.ack()

    def give_back(self, plan: PlanMessage) -> None:
        """Requeue a plan that could not be handled (memory:// would not on close)."""
        try:
            plan.message.reject(requeue=True)
        except Exception:  # noqa: BLE001 -- the connection is gone: the broker requeues
            pass

    def close(self) -> None:
        """Give back the plans taken but not handled, and disconnect."""
        while self._buffer:
            message = self._buffer.popleft()
            try:
                message.reject(requeue=True)
            except Exception:  # noqa: BLE001 -- the connection is gone: the broker requeues
                pass
        if self._conn is not None:
            _release(self._conn)
            self._conn = None


def _release(conn: kombu.Connection) -> None:
    try:
        conn.release()
    except Exception:  # noqa: BLE001 -- closing a broken connection
        pass
