"""The API on a real port (uvicorn in a thread), for clients that speak HTTP:
muranoclient, the CLI's client, raw sockets and the browser."""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

import uvicorn

from apikit import free_port
from fornace.api.protocol import http_protocol
from waiting import wait_for


@contextlib.contextmanager
def serving(app: Any, http: type | None = None, access_log: bool = False) -> Iterator[str]:
    """Serve ``app`` as ``fornace api`` does (its HTTP protocol, unless ``http``
    names another; ``access_log``: a line per request, as [api] access_log,
    into the process's logging); yield its URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="info" if access_log else "warning",
                                           access_log=access_log,
                                           **({"log_config": None} if access_log else {}),
                                           http=http or http_protocol()))
    thread = threading.Thread(target=server.run, name=f"api-{port}", daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started or not thread.is_alive(),
                 f"the API to listen on port {port}", timeout=30)
        assert server.started, f"the API could not listen on port {port}"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
