"""Wiring of the API process: database, broker, consumers and the web app.

The consumers of ``task-results``, ``task-reports`` and ``job-events`` run in
a background thread of the API process; the web app publishes tasks through one broker
connection per thread (kombu connections are not shared across threads).

They take what waits in each queue in batches (up to
:data:`fornace.common.consumer.BATCH_SIZE` messages, see
:class:`fornace.common.consumer.Consumer`) and store a batch of job events or
reports in one transaction: with one transaction per message the API, not the
conductors, was the bottleneck of large deployments (``tools/bench_events.py``).
What cannot be stored, even alone, is set aside in the dead-letter table
(:mod:`fornace.api.stores.deadletters`) and acked.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Sequence

from fastapi import FastAPI
from oslo_config import cfg

from fornace.api import policy
from fornace.api.app import create_app
from fornace.api.auth import KeystoneAuth, NoAuth
from fornace.api.trusts import Trusts
from fornace.api.config import catalog_file, package_limits
from fornace.api.dashboard.formsecret import form_secret
from fornace.api.hosts import EVERY_ADDRESS, AllowedHosts, allowed_hosts
from fornace.api.stores.jobs import Jobs
from fornace.api.limits import UnitLimits
from fornace.api.packages.store import Packages
from fornace.api.messagestore import Outcome
from fornace.common.db.outages import transient
from fornace.api.stores.store import Store
from fornace.api.packages.workflows import WorkflowFiles
from fornace.common import contract, notifications
from fornace.common.broker import Broker
from fornace.common.brokerurl import check
from fornace.common.consumer import BATCH_SIZE, Consumer, Delivery
from fornace.common import options
from fornace.common.catalog import load_catalog
from fornace.common.db.engine import make_engine, session_factory, upgrade, wait_for_database
from fornace.common.packages.checks import PackageCheck, RuleExplain, WorkflowCheck

LOG = logging.getLogger(__name__)

#: times in a row a message may fail (but for a database out of reach) before
#: it is set aside: what fails alone for good is set aside at once
#: (:mod:`fornace.api.messagestore`); this catches the rest, such as a
#: handler that fails on a whole batch
MAX_FAILURES = 5

Items = list[tuple[Any, Delivery]]


class ThreadBrokers:
    """A publisher with one :class:`Broker` per calling thread."""

    def __init__(self, url: str, queue_type: str = "classic") -> None:
        check(url)   # a bad URL stops the API's start, naming what is wrong
        self.url = url
        self.queue_type = queue_type
        self._local = threading.local()
        self._all: list[Broker] = []
        self._lock = threading.Lock()

    def new(self) -> Broker:
        """A broker of its own (``[broker] url`` and ``queue_type``), not kept here."""
        return Broker(self.url, queue_type=self.queue_type)

    def broker(self) -> Broker:
        broker = getattr(self._local, "broker", None)
        if broker is None:
            broker = self._local.broker = self.new()
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
                 migrate: bool = True, package_check: PackageCheck | None = None,
                 workflow_check: WorkflowCheck | None = None,
                 rule_explain: RuleExplain | None = None) -> None:
        """``package_check``: how uploaded workflow packages are checked (the
        command that starts the API passes the workflow checker; None: uploads
        are refused with 503).  ``workflow_check``: how the dashboard checks an
        environment's workflow files (None: they are shown unchecked).
        ``rule_explain``: how ``/environments/{id}/why`` explains a rule (None:
        that route answers 503)."""
        url = db_url or options.database_url(conf)
        if migrate:  # worker processes leave it to their parent
            wait_for_database(url, options.database_retries(conf))
            upgrade(url)
        # no ping per checkout: a request that finds a connection dead is run
        # once more (fornace.api.routing.run), a batch of messages is requeued
        self.engine = make_engine(url, pre_ping=False, pool=options.database_pool(conf))
        self.brokers = ThreadBrokers(conf.broker.url, conf.broker.queue_type)
        auth: Any = (KeystoneAuth.from_config(conf) if conf.api.auth_mode == "keystone"
                     else NoAuth(conf.api.default_tenant, conf.api.default_user))
        # keystone mode: jobs act on the cloud through trusts (fornace.api.trusts)
        trusts = Trusts(auth.keystone) if isinstance(auth, KeystoneAuth) else None
        # off unless [oslo_messaging_notifications] driver is set
        self.notifications = notifications.from_conf(conf, "api", conf.broker.url)
        self.store = Store(session_factory(self.engine), self.brokers.publish_task,
                           load_catalog(catalog_file(conf)),
                           UnitLimits(conf.api.max_units_per_service,
                                      conf.api.max_units_per_environment), trusts,
                           self.notifications)
        self.jobs = Jobs(self.store)
        # the access rules: the defaults, and what a policy file changes of them
        self.packages = Packages(self.store.sessions, package_limits(conf), package_check)
        self.workflow_files = WorkflowFiles(self.store.sessions, options.data_folder(conf),
                                            workflow_check, package_limits(conf),
                                            explain=rule_explain)
        self.app: FastAPI = create_app(self.store, auth, conf.api.max_body_size, self.jobs,
                                       allowed_origins=conf.api.allowed_origins,
                                       enforcer=policy.enforcer(conf), packages=self.packages,
                                       workflow_files=self.workflow_files,
                                       allowed_hosts=_hosts(conf),
                                       form_secret=form_secret(conf.api.dashboard_secret,
                                                               conf.api.state_dir),
                                       public_endpoint=conf.api.public_endpoint,
                                       healthcheck_conf=conf)
        self._stop = threading.Event()
        self._consumer: Consumer | None = None
        self._thread: threading.Thread | None = None

    def _on_results(self, items: Items) -> list[Outcome]:
        """Results and job events, in their order: job events share the results
        queue so that a job's last task events are stored before its result
        ends it.  Consecutive job events are stored together, each result
        alone; after a failure nothing later is tried (it comes again, in order)."""
        outcomes: list[Outcome] = []
        for run in _runs(items, contract.is_job_event):
            failure = _failure(outcomes)
            if failure is not None:
                outcomes += [failure] * len(run)
            elif contract.is_job_event(run[0][0]):
                outcomes += self.store.job_events.apply_all(_pairs(run))
            else:
                outcomes += self.store.results.apply_all(_pairs(run))
        return outcomes

    def _on_reports(self, items: Items) -> list[Outcome]:
        return self.store.reports.add_all(_pairs(items))

    def _on_job_events(self, items: Items) -> list[Outcome]:
        return self.store.job_events.apply_all(_pairs(items))

    def start_consumers(self) -> Consumer:
        """Consume results, reports and job events in a background thread."""
        self._consumer = Consumer(self.brokers.new(), {}, self._stop,
                                  batch_handlers={contract.RESULTS: self._on_results,
                                                  contract.REPORTS: self._on_reports,
                                                  contract.JOB_EVENTS: self._on_job_events},
                                  batch_size=BATCH_SIZE,
                                  set_aside=self.store.dead_letters.set_aside,
                                  max_failures=MAX_FAILURES, transient=transient)
        self._thread = threading.Thread(target=self._consumer.run, name="api-consumers",
                                        daemon=True)
        self._thread.start()
        return self._consumer

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.brokers.close()
        self.notifications.close()
        self.workflow_files.close()
        self.engine.dispose()


def _hosts(conf: cfg.ConfigOpts) -> AllowedHosts:
    """The Host headers the API serves (``[api] allowed_hosts``, its host, localhost)."""
    if conf.api.host.strip() in EVERY_ADDRESS and not conf.api.allowed_hosts:
        LOG.warning("the API listens on every address (%s) and [api] allowed_hosts is "
                    "empty: only requests for localhost are served; list the names "
                    "clients use in [api] allowed_hosts", conf.api.host)
    return allowed_hosts(conf.api.allowed_hosts, conf.api.host)


def _pairs(items: Items) -> list[tuple[Any, str | None]]:
    return [(body, delivery.message_id) for body, delivery in items]


def _runs(items: Items, together: Callable[[Any], bool]) -> list[Items]:
    """``items`` cut into runs, in order: consecutive items whose body is
    ``together`` form one run, every other item is a run of its own."""
    runs: list[Items] = []
    for item in items:
        if runs and together(item[0]) and together(runs[-1][-1][0]):
            runs[-1].append(item)
        else:
            runs.append([item])
    return runs


def _failure(outcomes: Sequence[Outcome]) -> Exception | None:
    """The failure (not a bad message) among ``outcomes``, if any."""
    return next((o for o in outcomes
                 if o is not None and not isinstance(o, contract.ContractError)), None)
