"""The agent core: plan in, journal, run, journal, answer.

:meth:`Agent.process` handles one plan body and is what the tests drive
directly; :meth:`Agent.handle` is the :class:`conductor.broker.Consumer`
handler around it, and :meth:`Agent.serve` the whole loop.  Plans are
handled one at a time, in queue order (prefetch 1, one handler thread), and
a plan message is acked only once its answer is journaled and published
(for a reboot plan: journaled; the answer goes out after the restart).
"""
from __future__ import annotations

import hashlib
import json
import logging
import shlex
import subprocess
import threading
from typing import Any, Callable

from conductor import contract
from conductor.broker import Broker, Consumer, Delivery

from .config import AgentSettings
from .journal import Journal
from .plan import PlanError, decode_body, parse_plan, plan_id
from .runner import Runner

LOG = logging.getLogger(__name__)

EXIT_REBOOT = 3   # ``fornace agent`` exit code after a plan asked for a reboot

Publisher = Callable[[str, dict[str, Any]], None]   # (plan id, result)


def exception_result(kind: str, message: str) -> dict[str, Any]:
    return {"IsException": True, "Result": [kind, message]}


class Agent:
    def __init__(self, settings: AgentSettings, publish: Publisher | None = None) -> None:
        self.settings = settings
        settings.work_dir.mkdir(parents=True, exist_ok=True)
        self.journal = Journal(settings.journal, keep=settings.journal_keep)
        self.runner = Runner(settings)
        self.publish = self._publish_to_broker if publish is None else publish
        self.reboot_requested: str | None = None   # id of the plan that asked
        self._broker: Broker | None = None

    # -- the core --------------------------------------------------------------
    def process(self, body: Any, message_id: str | None = None) -> dict[str, Any]:
        """Answer one plan (running it at most once) and return the answer."""
        try:
            parsed_body: Any = decode_body(body)
            key = plan_id(parsed_body) or message_id
        except PlanError:
            parsed_body, key = None, message_id
        if key is None:   # nothing to correlate with: key by content
            key = "sha256:" + hashlib.sha256(_bytes(body)).hexdigest()
        entry = self.journal.get(key)
        if entry is not None and entry.result is not None:
            LOG.info("plan %s was answered before; sending the journaled answer again", key)
            self._send(key, entry.result)
            return entry.result
        if entry is not None and entry.started:
            result = exception_result(
                "AgentInterrupted", "the agent stopped while this plan ran; it is not run "
                                    "a second time")
            self.journal.result(key, result)
            self._send(key, result)
            return result

        self.journal.started(key)
        reboot = False
        try:
            plan = parse_plan(parsed_body if parsed_body is not None else body)
        except PlanError as exc:
            LOG.warning("plan %s cannot run: %s: %s", key, exc.kind, exc)
            result = exception_result(exc.kind, str(exc))
        else:
            try:
                result = self.runner.run_plan(plan, key)
            except Exception as exc:   # noqa: BLE001 -- the agent itself failed
                LOG.exception("plan %s: the agent failed running it", key)
                result = exception_result(type(exc).__name__, f"the agent failed: {exc}")
            failed = result["IsException"] or any(e["IsException"] for e in result["Result"])
            reboot = plan.reboot == 2 or (plan.reboot == 1 and not failed)
        contract.parse_plan_result(result)   # our own answers follow the contract
        self.journal.result(key, result, reboot=reboot)
        if reboot:
            LOG.info("plan %s asks for a reboot; its answer is sent after the restart", key)
            self.reboot_requested = key
        else:
            self._send(key, result)
        return result

    def _send(self, key: str, result: dict[str, Any]) -> None:
        self.publish(key, result)
        self.journal.sent(key)

    def startup(self) -> None:
        """After a (re)start: send the answers journaled but not sent, oldest first."""
        for entry in self.journal.unsent():
            LOG.info("sending the journaled answer of plan %s", entry.id)
            self._send(entry.id, entry.result)
        for entry in self.journal.reboots_pending():
            self.journal.rebooted(entry.id)

    def reboot(self) -> None:
        """Carry out a reboot request: the configured command, or only a log line."""
        command = self.settings.reboot_command.strip()
        if not command:
            LOG.warning("plan %s asked for a reboot; no [agent] reboot_command is set, so "
                        "the agent only exits (code %d)", self.reboot_requested, EXIT_REBOOT)
            return
        LOG.warning("plan %s asked for a reboot: running %r", self.reboot_requested, command)
        try:
            subprocess.run(shlex.split(command), check=False, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            LOG.error("reboot command %r failed: %s", command, exc)

    # -- over the broker -----------------------------------------------------------
    def broker(self) -> Broker:
        if self._broker is None:
            self._broker = AgentBroker(self.settings.broker_url, ssl=self.settings.broker_ssl)
        return self._broker

    def _publish_to_broker(self, key: str, result: dict[str, Any]) -> None:
        message_id = None if key.startswith("sha256:") else key
        self.broker().publish(self.settings.result_queue, result, message_id)

    def handle(self, body: Any, delivery: Delivery) -> None:
        """Consumer handler: returns (-> ack) once the answer is journaled and sent."""
        if self.reboot_requested is not None:
            # a plan taken after a reboot request waits for the restart
            raise RebootPending(f"plan {delivery.message_id} arrived after a reboot request")
        self.process(body, delivery.message_id)
        if self.reboot_requested is not None and self._stop is not None:
            self._stop.set()

    _stop: threading.Event | None = None

    def serve(self, stop: threading.Event, ready: threading.Event | None = None) -> int:
        """Consume the input queue until ``stop`` or a reboot request; the exit code."""
        if not self.settings.input_queue or not self.settings.result_queue:
            raise ValueError("input_queue and result_routing_key must be configured")
        self._stop = stop
        self.startup()
        try:
            self.broker().connect()   # the first answer then goes out at once
        except Exception as exc:  # noqa: BLE001 -- publishing retries later
            LOG.warning("cannot connect to the broker yet: %s", exc)
        consumer = Consumer(self.broker(), {self.settings.input_queue: self.handle}, stop,
                            prefetch=1, raw_bodies=True)   # a non-JSON plan gets an answer
        if ready is not None:
            threading.Thread(target=_mirror, args=(consumer.ready, ready, stop),
                             daemon=True).start()
        try:
            consumer.run()
        finally:
            self.close()
        if self.reboot_requested is not None:
            self.reboot()
            return EXIT_REBOOT
        return 0

    def close(self) -> None:
        if self._broker is not None:
            self._broker.close()
            self._broker = None


class RebootPending(Exception):
    pass


class AgentBroker(Broker):
    """A :class:`Broker` that can reach RabbitMQ over TLS (``broker_ssl``)."""

    def __init__(self, url: str, ssl: bool = False, **options: Any) -> None:
        super().__init__(url, **options)
        self.ssl = ssl

    def connection(self, heartbeat: int | None = None):
        conn = super().connection(heartbeat)
        if self.ssl and not self.local:
            conn.ssl = True
        return conn


def _mirror(source: threading.Event, target: threading.Event, stop: threading.Event) -> None:
    while not stop.is_set():
        if source.wait(0.05):
            target.set()
            return


def _bytes(body: Any) -> bytes:
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    if isinstance(body, str):
        return body.encode("utf-8", "replace")
    return json.dumps(body, sort_keys=True, default=str).encode()
