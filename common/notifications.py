"""Notifications on the message bus, as OpenStack services emit them for
billing, audit and Ceilometer (Heat's ``orchestration.stack.create.end``).

Fornace says what happens to environments and their jobs through
oslo.messaging's :class:`~oslo_messaging.Notifier`, configured by
oslo.messaging's own ``[oslo_messaging_notifications]`` options: off while
``driver`` is empty (the default), ``messagingv2`` to send them to RabbitMQ
on the ``topics`` (``notifications``: queues ``notifications.info`` and
``notifications.error``), on exchange ``fornace`` (``[DEFAULT]
control_exchange``).

Where they travel, first found: ``[oslo_messaging_notifications]
transport_url``, ``[DEFAULT] transport_url``, else Fornace's own ``[broker]
url`` when it names RabbitMQ (``amqp://``, each node of a cluster).  A
``memory://`` or ``filesystem://`` broker reaches no consumer of another
process: notifications then stay off, with a warning saying what to set.

This module holds the event names, the payload builders (the fields
``doc/source/admin/notifications.rst`` documents: ids, names, states and
times, never a model, a parameter or a token) and :class:`Notifications`,
which sends them from a thread of its own: a broker out of reach delays or
drops notifications (a warning says so), never a request or a job.
"""
from __future__ import annotations

import copy
import datetime
import logging
import queue
import socket
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from oslo_config import cfg

from fornace.common import brokerurl
from fornace.common.errors import FornaceError

LOG = logging.getLogger(__name__)

GROUP = "oslo_messaging_notifications"
#: the exchange notifications go to (oslo.messaging's ``control_exchange``), as
#: Heat's go to ``heat`` and Nova's to ``nova``
EXCHANGE = "fornace"
#: connection retries of one notification (oslo.messaging's -1 retries for ever:
#: a broker away for good would keep every later notification waiting)
RETRY = 3
#: notifications waiting for the sender; past that, new ones are dropped
QUEUE_SIZE = 10000

# -- the events ---------------------------------------------------------------------
ENVIRONMENT_CREATE_END = "environment.create.end"
ENVIRONMENT_DELETE_START = "environment.delete.start"
ENVIRONMENT_DELETE_END = "environment.delete.end"
ENVIRONMENT_DELETE_ERROR = "environment.delete.error"
ENVIRONMENT_DEPLOY_START = "environment.deploy.start"
ENVIRONMENT_DEPLOY_END = "environment.deploy.end"
ENVIRONMENT_DEPLOY_ERROR = "environment.deploy.error"
ENVIRONMENT_ACTION_START = "environment.action.start"
ENVIRONMENT_ACTION_END = "environment.action.end"
ENVIRONMENT_ACTION_ERROR = "environment.action.error"

EVENTS = (ENVIRONMENT_CREATE_END, ENVIRONMENT_DELETE_START, ENVIRONMENT_DELETE_END,
          ENVIRONMENT_DELETE_ERROR, ENVIRONMENT_DEPLOY_START, ENVIRONMENT_DEPLOY_END,
          ENVIRONMENT_DEPLOY_ERROR, ENVIRONMENT_ACTION_START, ENVIRONMENT_ACTION_END,
          ENVIRONMENT_ACTION_ERROR)

#: the one job state that ends a job well; the others (completed_w_errors,
#: refused, abandoned) end it with an ``.error`` event
SUCCESS = "success"


def job_event(action: str, phase: str) -> str:
    """The event of a job of ``action`` at ``phase`` (start, end, error): a
    ``deploy`` is ``environment.deploy.*``, a ``delete`` ``environment.delete.*``,
    every other action (install, scale, heal, plan...) ``environment.action.*``."""
    subject = action if action in ("deploy", "delete") else "action"
    return f"environment.{subject}.{phase}"


def ended_event(action: str, state: str) -> str:
    """The event of a job of ``action`` that ended in ``state``."""
    return job_event(action, "end" if state == SUCCESS else "error")


# -- the payloads ---------------------------------------------------------------------

class EnvironmentLike(Protocol):
    id: str
    name: str
    tenant_id: str
    created: datetime.datetime


class JobLike(Protocol):
    id: str
    kind: str
    state: str
    started: datetime.datetime
    finished: datetime.datetime | None


@dataclass(frozen=True)
class JobFields:
    """A job's fields where no row of it is at hand (inserted by a plain
    INSERT, or changed by a plain UPDATE since it was read)."""

    id: str
    kind: str
    state: str
    started: datetime.datetime
    finished: datetime.datetime | None = None


def utc(moment: datetime.datetime | None) -> str | None:
    """A stored time (naive UTC) as ISO 8601 with its zone, to the microsecond."""
    if moment is None:
        return None
    if moment.tzinfo is not None:
        moment = moment.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return moment.isoformat(timespec="microseconds") + "Z"


def environment_payload(env: EnvironmentLike, user_id: str | None,
                        **more: Any) -> dict[str, Any]:
    """What every event says of its environment, and ``more``.

    ``tenant_id`` and ``project_id`` are the same project (Murano's name and
    today's OpenStack one); ``user_id`` is who asked (None: not known)."""
    return {"environment_id": env.id, "environment_name": env.name,
            "tenant_id": env.tenant_id, "project_id": env.tenant_id, "user_id": user_id,
            "created_at": utc(env.created), **more}


def job_payload(env: EnvironmentLike, job: JobLike, user_id: str | None,
                **more: Any) -> dict[str, Any]:
    """What a job's events say: its environment's fields, the job's id (the
    deployment id of ``GET /environments/{id}/deployments``), its action, its
    state and times."""
    return environment_payload(env, user_id, job_id=job.id, action=job.kind,
                               status=job.state, started_at=utc(job.started),
                               finished_at=utc(job.finished), **more)


def deleted_payload(env: EnvironmentLike, user_id: str | None, deleted: datetime.datetime,
                    abandoned: bool = False) -> dict[str, Any]:
    """``environment.delete.end`` of an environment removed at once (never
    deployed, or abandoned): no deletion job ran."""
    return environment_payload(env, user_id, job_id=None, action="delete", status=SUCCESS,
                               deleted_at=utc(deleted), abandoned=abandoned)


def context(user_id: str | None, tenant_id: str | None,
            request_id: str | None = None) -> dict[str, Any]:
    """The notification's context (oslo.messaging sends it beside the payload,
    each key prefixed ``_context_``): who, and the request that caused it."""
    found = {"user_id": user_id, "project_id": tenant_id, "tenant": tenant_id}
    if request_id:
        found["request_id"] = request_id
    return found


# -- the options ----------------------------------------------------------------------

def _oslo_messaging() -> Any:
    """oslo.messaging, imported on first use, with oslo.service's threading
    backend (Fornace runs no eventlet: its default backend would import it
    and patch nothing).  futurist still imports eventlet when it is installed,
    to recognise green threads, and warns that it is deprecated: those
    warnings of the import are not shown."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from oslo_service import backend

        try:
            backend.init_backend(backend.BackendType.THREADING)
        except backend.exceptions.BackendAlreadySelected:   # chosen before us: kept
            pass
        import oslo_messaging
        import oslo_messaging.opts
    oslo_messaging.set_transport_defaults(EXCHANGE)
    return oslo_messaging


def _oslo_opts() -> tuple[list[cfg.Opt], list[cfg.Opt]]:
    """oslo.messaging's notification options, and the two of ``[DEFAULT]``
    they fall back on (copies: registering them again, as oslo.messaging does
    when it makes the transport, is harmless)."""
    listed = dict(_oslo_messaging().opts.list_opts())
    defaults = [opt for opt in listed[None] if opt.dest in ("transport_url", "control_exchange")]
    return listed[GROUP], defaults


def register(conf: cfg.ConfigOpts) -> None:
    """Register ``[oslo_messaging_notifications]`` and ``[DEFAULT] transport_url``
    / ``control_exchange`` (a service does it when it starts: the commands that
    send no notification do not load oslo.messaging); ``retry`` is
    :data:`RETRY` unless set."""
    notifier_opts, default_opts = _oslo_opts()
    conf.register_opts(notifier_opts, group=GROUP)
    conf.register_opts(default_opts)
    conf.set_default("retry", RETRY, group=GROUP)


#: what the sample adds to oslo.messaging's help of an option: how Fornace reads it
_FORNACE_HELP = {
    (None, "transport_url"): "Fornace sends no RPC: this is only where notifications go "
                             "when [oslo_messaging_notifications] transport_url is unset; "
                             "unset (rabbit://), they go to [broker] url when it names "
                             "RabbitMQ.",
    (GROUP, "driver"): "Fornace: messagingv2 sends the notifications of "
                       "doc/source/admin/notifications.rst to RabbitMQ; empty, none is sent.",
    (GROUP, "transport_url"): "Fornace: unset, [DEFAULT] transport_url if set, else "
                              "[broker] url when it names RabbitMQ (amqp://; not "
                              "memory://, filesystem:// nor amqps://: then none is sent).",
    (GROUP, "retry"): "Fornace sends them from a thread of its own: a broker out of reach "
                      "delays no request and no job.",
}


def list_opts() -> list[tuple[str | None, list[cfg.Opt]]]:
    """For oslo-config-generator: the options as a Fornace service has them
    (``retry`` :data:`RETRY`, the help saying how Fornace reads them)."""
    notifier_opts, default_opts = _oslo_opts()
    listed: list[tuple[str | None, list[cfg.Opt]]] = []
    for group, opts in ((None, default_opts), (GROUP, notifier_opts)):
        shown = []
        for opt in opts:
            opt = copy.copy(opt)
            if (group, opt.dest) in _FORNACE_HELP:
                opt.help = f"{opt.help}\n\n{_FORNACE_HELP[group, opt.dest]}"
            if group == GROUP and opt.dest == "retry":
                opt.default = RETRY
            shown.append(opt)
        listed.append((group, shown))
    return listed


class NotificationsError(FornaceError):
    """A notification setting that cannot be used (the message names it)."""


def transport_url(conf: cfg.ConfigOpts, broker_url: str | None) -> str | None:
    """Where notifications go: ``[oslo_messaging_notifications] transport_url``,
    ``[DEFAULT] transport_url`` (when set: oslo.messaging's default, ``rabbit://``,
    is no one's choice), else ``broker_url`` (``[broker] url``) when it names
    RabbitMQ; None when none does."""
    if conf[GROUP].transport_url:
        return conf[GROUP].transport_url
    # oslo.messaging's own default (rabbit://: guest on localhost) is not a choice
    unset = next(opt.default for opt in _oslo_opts()[1] if opt.dest == "transport_url")
    if conf.transport_url and conf.transport_url != unset:
        return conf.transport_url
    return rabbit_url(broker_url) if broker_url else None


def rabbit_url(broker_url: str) -> str | None:
    """``[broker] url`` as an oslo.messaging transport URL (``rabbit://``, the
    nodes of a cluster between commas); None for memory://, filesystem:// and
    amqps:// (TLS: its settings are ``[oslo_messaging_rabbit]``'s, so the
    operator gives ``transport_url``)."""
    nodes = brokerurl.hosts(broker_url)
    if not nodes or any(node.scheme == "amqps" for node in nodes):
        return None
    splits = [urlsplit(part) for part in brokerurl.parts(broker_url)]
    return f"rabbit://{','.join(split.netloc for split in splits)}{splits[0].path or '/'}"


def masked(url: str) -> str:
    """A transport URL as logs show it: every host's password masked."""
    scheme, found, rest = url.partition("://")
    if not found:
        return url
    netlocs, slash, path = rest.partition("/")
    return (f"{scheme}://"
            + ",".join(brokerurl.masked(f"x://{netloc}")[4:] for netloc in netlocs.split(","))
            + slash + path)


# -- sending ------------------------------------------------------------------------

class Notifications:
    """Sends notifications from a thread of its own, in the order given.

    Without a notifier (notifications off) :attr:`enabled` is False and
    :meth:`emit` does nothing: callers test :attr:`enabled` before they
    build a payload."""

    def __init__(self, notifier: Any = None, transport: Any = None,
                 queue_size: int = QUEUE_SIZE) -> None:
        self._notifier = notifier
        self._transport = transport
        self._queue: queue.Queue[tuple[str, dict, str, dict] | None] = queue.Queue(queue_size)
        self._dropped = 0
        self._thread: threading.Thread | None = None
        if notifier is not None:
            self._thread = threading.Thread(target=self._send, name="notifications",
                                            daemon=True)
            self._thread.start()

    @property
    def enabled(self) -> bool:
        return self._notifier is not None

    @property
    def publisher_id(self) -> str | None:
        return self._notifier.publisher_id if self._notifier is not None else None

    def emit(self, event_type: str, payload: dict[str, Any], error: bool = False,
             ctxt: dict[str, Any] | None = None) -> None:
        """Queue one notification (priority ``info``, or ``error``); never
        blocks, never raises."""
        if self._notifier is None:
            return
        try:
            self._queue.put_nowait(("error" if error else "info", ctxt or {}, event_type,
                                    payload))
        except queue.Full:
            self._dropped += 1
            if self._dropped == 1 or self._dropped % 1000 == 0:
                LOG.warning("notification %s dropped: %d wait for the broker already "
                            "(%d dropped so far)", event_type, self._queue.maxsize,
                            self._dropped)

    def _send(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            priority, ctxt, event_type, payload = item
            try:
                # oslo.messaging logs a notification it could not deliver
                # (after [oslo_messaging_notifications] retry) and goes on
                getattr(self._notifier, priority)(ctxt, event_type, payload)
            except Exception as exc:   # a driver's bug must not stop the next ones
                LOG.warning("notification %s not sent: %s", event_type, exc)

    def close(self, timeout: float = 5.0) -> None:
        """Send what waits (for up to ``timeout`` seconds), then stop."""
        if self._thread is None:
            return
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            pass
        self._thread.join(timeout)
        if self._thread.is_alive():
            LOG.warning("notifications: %d not sent at shutdown", self._queue.qsize())
        elif self._transport is not None:
            self._transport.cleanup()
        self._thread = None


#: notifications off (what a store without configured notifications uses)
OFF = Notifications()


def _drivers(names: Any) -> list[str]:
    return [d for d in names or () if d and d != "noop"]


def _peek_drivers(conf: cfg.ConfigOpts) -> list[str] | None:
    """``[oslo_messaging_notifications] driver`` as the files and environment
    ``conf`` was loaded from set it, read without oslo.messaging's options
    (None: ``conf`` was not loaded from files, so they must be registered to tell)."""
    try:
        files, dirs = conf.config_file, conf.config_dir
    except cfg.NoSuchOptError:
        return None
    peek = cfg.ConfigOpts()
    peek.register_opt(cfg.MultiStrOpt("driver", default=[]), group=GROUP)
    peek(args=[], default_config_files=files or [],
         default_config_dirs=dirs or [], use_env=True)
    return list(peek[GROUP].driver)


def from_conf(conf: cfg.ConfigOpts, service: str, broker_url: str | None = None,
              host: str | None = None) -> Notifications:
    """The notifications of ``service`` (``api``...) as ``conf`` sets them: off
    unless ``[oslo_messaging_notifications] driver`` names one; published as
    ``fornace.<service>.<host>``.  A transport URL oslo.messaging refuses is
    a :class:`NotificationsError` naming the option."""
    if GROUP not in conf:
        peeked = _peek_drivers(conf)
        if peeked is not None and not _drivers(peeked):
            return OFF      # the usual case: oslo.messaging (~0.2 s to import) stays unloaded
    register(conf)
    drivers = _drivers(conf[GROUP].driver)
    if not drivers:
        return OFF
    url = transport_url(conf, broker_url)
    if url is None:
        LOG.warning("notifications are off: [oslo_messaging_notifications] driver is %s, "
                    "but no broker reaches their consumers ([broker] url is %s): set "
                    "[oslo_messaging_notifications] transport_url = rabbit://...",
                    ", ".join(drivers), brokerurl.masked(broker_url or "unset"))
        return OFF
    messaging = _oslo_messaging()
    try:
        transport = messaging.get_notification_transport(conf, url=url)
    except (messaging.InvalidTransportURL, messaging.DriverLoadFailure) as exc:
        raise NotificationsError(
            f"notifications: the transport URL {masked(url)} cannot be used "
            f"({type(exc).__name__}): set [oslo_messaging_notifications] transport_url "
            f"to rabbit://user:password@host:5672/vhost") from None
    publisher = f"fornace.{service}.{host or socket.gethostname()}"
    notifier = messaging.Notifier(transport, publisher_id=publisher)
    LOG.info("notifications: %s on %s, topics %s, exchange %s, as %s", ", ".join(drivers),
             masked(url), ", ".join(conf[GROUP].topics), conf.control_exchange,
             publisher)
    return Notifications(notifier, transport)
