"""Free TCP ports of 127.0.0.1 for the tools' private servers (an API, RabbitMQ
nodes, PostgreSQL servers): one piece of code for every tool that starts one.

A port is free when the system gives it to a socket bound to port 0; it is
given back at once, so a server started right after takes it.  Several ports
wanted together are held open together while they are chosen: no two are the
same.
"""
from __future__ import annotations

import contextlib
import socket

HOST = "127.0.0.1"


def spare_ports(count: int, host: str = HOST) -> list[int]:
    """``count`` different TCP ports of ``host``, free right now."""
    with contextlib.ExitStack() as held:
        sockets = [held.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind((host, 0))
        return [sock.getsockname()[1] for sock in sockets]


def free_port(host: str = HOST) -> int:
    """A TCP port of ``host`` that is free right now."""
    return spare_ports(1, host)[0]
