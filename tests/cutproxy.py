"""A TCP proxy to a broker (or any server) whose connections a test can cut."""
from __future__ import annotations

import socket
import threading
from urllib.parse import urlsplit, urlunsplit


class Proxy:
    """A TCP proxy to the broker whose connections can be cut."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        self.refusing = False
        self.refused = 0          # connections closed at once while refusing
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, url: str) -> str:
        parts = urlsplit(url)
        netloc = parts.netloc.rsplit("@", 1)
        host = f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2
                                         else host))

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.refusing:
                client.close()
                self.refused += 1
                continue
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        """Break every open connection (the broker went away)."""
        with self.lock:
            sockets, self.sockets = self.sockets, []
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def close(self) -> None:
        self.listener.close()
        self.cut()


def proxy_to(url: str) -> Proxy:
    """A proxy to the host of ``url`` (an amqp:// URL); ``.url(url)`` goes through it."""
    parts = urlsplit(url)
    return Proxy((parts.hostname or "127.0.0.1", parts.port or 5672))
