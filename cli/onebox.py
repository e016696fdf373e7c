"""Fornace on one machine: the API, the conductor and the local cloud together.

What ``fornace up`` and ``fornace demo`` run.  The API (uvicorn in a thread)
and the conductor (its consumer threads) share the process; the local
cloud's "VMs" are agent processes of their own.  All of them need one
broker: the configured ``[broker] url``, except that the in-process
``memory://`` default (which agent processes cannot reach) is replaced by
the folder broker ``filesystem://<state_dir>/broker``.

Stopping the box stops the API and the conductor; the local instances keep
running, as VMs outlive their orchestrator (deleting an environment stops
them).  Starting it again restarts instances of existing stacks whose
processes died, e.g. after a reboot.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from oslo_config import cfg

from fornace.common.broker import is_in_memory
from fornace.common.brokerurl import masked
from fornace.common.errors import FornaceError
from fornace.conductor.daemon import Conductor
from fornace.conductor.executors.base import StackFailure, StackRequest
from fornace.conductor.executors.localcloud import LocalStacks

LOG = logging.getLogger(__name__)


class OneBox:
    """API + conductor + local cloud; :meth:`start`, :attr:`url`, :meth:`stop`."""

    def __init__(self, conf: cfg.ConfigOpts, host: str | None = None, port: int | None = None,
                 db: str | None = None, max_environments: int | None = None) -> None:
        import uvicorn   # here, not at the top: every fornace command imports this module

        from fornace.api.protocol import http_protocol
        from fornace.api.server import ApiService
        from fornace.cli.api import package_check, rule_explain, workflow_check
        from fornace.cli.conductor import conductor_settings

        self.state_dir = Path(os.path.expanduser(conf.api.state_dir))
        self.broker_url = conf.broker.url
        if is_in_memory(self.broker_url):
            self.broker_url = f"filesystem://{self.state_dir.resolve() / 'broker'}"
            conf.set_override("url", self.broker_url, group="broker")
        self.cloud = LocalStacks.from_conf(conf)
        if host:   # the address listened on is a Host the API serves
            conf.set_override("host", host, group="api")
        self.api = ApiService(conf, db, package_check=package_check(conf),
                              workflow_check=workflow_check(conf), rule_explain=rule_explain())
        # the local cloud's instances run the agent, listening on the broker
        settings = conductor_settings(conf, max_environments, agents="amqp", db=db)
        self.conductor = Conductor(settings, lambda task: self.cloud)
        self.host = conf.api.host
        self.server = uvicorn.Server(uvicorn.Config(
            self.api.app, host=self.host, port=conf.api.port if port is None else port,
            log_level="warning", access_log=False, http=http_protocol()))
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 30.0) -> None:
        """Start everything; ``FornaceError`` when the API cannot listen."""
        self.resume_instances()
        if not self.api.start_consumers().ready.wait(timeout):
            raise FornaceError(f"the API could not subscribe on {masked(self.broker_url)}")
        self.conductor.start()
        self._thread = threading.Thread(target=self._serve, name="api-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise FornaceError(f"the API could not listen on {self.host}:"
                                   f"{self.server.config.port} (is the port in use?)")
            time.sleep(0.02)
        if not self.conductor.wait_ready(timeout):
            self.stop()
            raise FornaceError(f"the conductor could not subscribe on {masked(self.broker_url)}")

    def _serve(self) -> None:
        try:
            self.server.run()
        except SystemExit:      # uvicorn exits when it cannot bind
            LOG.error("the API server stopped")

    @property
    def url(self) -> str:
        """``http://host:port`` of the API (the real port when 0 was asked)."""
        port = self.server.config.port
        for server in getattr(self.server, "servers", []):
            for sock in server.sockets:
                port = sock.getsockname()[1]
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{port}"

    def resume_instances(self) -> int:
        """Restart the stopped instances of existing stacks; how many stacks."""
        stacks = self.cloud.stack_names()
        for name in stacks:
            try:
                self.cloud.apply(StackRequest(name, {}, {}))
            except StackFailure as exc:
                LOG.warning("local cloud: stack %s could not be resumed: %s", name, exc.message)
        return len(stacks)

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.conductor.shutdown(timeout=10)
        self.api.stop()
