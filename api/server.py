"""Wiring of the API process: database, broker, consumers and the web app.

The consumers of ``task-results``, ``task-reports`` and ``job-events`` run in
a background thread of the API process; the web app publishes tasks through one broker
connection per thread (kombu connections are not shared across threads).
"""
from __future__ import annotations

import logging
import threading
from typing import Any

from fastapi import FastAPI
from oslo_config import cfg

from fornace.api.app import create_app
from fornace.api.auth import KeystoneAuth, NoAuth
from fornace.api.config import catalog_file, database_url
from fornace.api.jobstore import Jobs
from fornace.api.limits import UnitLimits
from fornace.api.store import Store
from fornace.common import contract
from fornace.common.broker import Broker, Consumer, Delivery
from fornace.common.catalog import load_catalog
from fornace.common.db.engine import make_engine, session_factory, upgrade

LOG = logging.getLogger(__name__)


class ThreadBrokers:
    """A publisher with one :class:`Broker` per calling thread."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._local = threading.local()
        self._all: list[Broker] = []
        self._lock = threading.Lock()

    def broker(self) -> Broker:
        broker = getattr(self._local, "broker", None)
        if broker is None:
            broker = self._local.broker = Broker(self.url)
            with self._lock:
                self._all.append(broker)
        return broker

    def publish_task(self, body: dict, message_id: str) -> None:
        self.broker().publish(contract.TASKS, body, message_id)

    def close(self) -> None:
        with self._lock:
            for broker in self._all:
                broker.close()
            self._all.clear()


class ApiService:
    """Everything ``fornace api`` runs."""

    def __init__(self, conf: cfg.ConfigOpts, db_url: str | None = None,
                 migrate: bool = True) -> None:
        url = db_url or database_url(conf)
        if migrate:  # worker processes leave it to their parent
            upgrade(url)
        self.engine = make_engine(url)
        self.brokers = ThreadBrokers(conf.broker.url)
        self.store = Store(session_factory(self.engine), self.brokers.publish_task,
                           load_catalog(catalog_file(conf)),
                           UnitLimits(conf.api.max_units_per_service,
                                      conf.api.max_units_per_environment))
        self.jobs = Jobs(self.store)
        auth: Any = (KeystoneAuth.from_config(conf) if conf.api.auth_mode == "keystone"
                     else NoAuth(conf.api.default_tenant, conf.api.default_user))
        self.app: FastAPI = create_app(self.store, auth, conf.api.max_body_size, self.jobs,
                                       allowed_origins=conf.api.allowed_origins)
        self._stop = threading.Event()
        self._consumer: Consumer | None = None
        self._thread: threading.Thread | None = None

    def _on_result(self, body: Any, delivery: Delivery) -> None:
        # job events share the results queue: a job's last task events are then
        # stored before its result ends it (one queue keeps their order)
        if contract.is_job_event(body):
            self.jobs.apply_job_event(body, delivery.message_id)
            return
        self.store.apply_result(body, delivery.message_id)

    def _on_report(self, body: Any, delivery: Delivery) -> None:
        self.store.add_report(body, delivery.message_id)

    def _on_job_event(self, body: Any, delivery: Delivery) -> None:
        self.jobs.apply_job_event(body, delivery.message_id)

    def start_consumers(self) -> Consumer:
        """Consume results, reports and job events in a background thread."""
        self._consumer = Consumer(Broker(self.brokers.url),
                                  {contract.RESULTS: self._on_result,
                                   contract.REPORTS: self._on_report,
                                   contract.JOB_EVENTS: self._on_job_event}, self._stop)
        self._thread = threading.Thread(target=self._consumer.run, name="api-consumers",
                                        daemon=True)
        self._thread.start()
        return self._consumer

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.brokers.close()
        self.engine.dispose()
