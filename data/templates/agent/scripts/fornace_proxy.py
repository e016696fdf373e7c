"""The load balancer of a Fornace Linux farm: a small HTTP reverse proxy.

    python3 fornace_proxy.py --listen ADDRESS --port PORT --backends FILE

Every request (any method, with its body) is forwarded to the next backend
in round-robin order; a backend that refuses the connection (or cannot be
reached within a few seconds) is skipped for that request and the next one
is tried.  The answer comes back with the backend's status, headers and
body, plus an ``X-Fornace-Backend`` header naming the backend.  No backend
registered: 503; none reachable: 502.

The backends are a JSON file, ``{"backends": [{"name": ..., "url":
"http://host:port"}, ...]}``, re-read whenever it changes (the register
command of the farm workflow replaces it atomically), so units join without
a restart.  Standard library only (Python 3.6+).
"""
import argparse
import http.client
import json
import os
import socket
import socketserver
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, HTTPServer

CONNECT_TIMEOUT = 3.0
READ_TIMEOUT = 300.0
CHUNK = 64 * 1024
HOP_BY_HOP = frozenset(("connection", "keep-alive", "proxy-authenticate",
                        "proxy-authorization", "te", "trailer", "trailers",
                        "transfer-encoding", "upgrade", "proxy-connection"))
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


class ThreadingHTTPServer(socketserver.ThreadingMixIn, HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class Backends:
    """The backend list, re-read when its file changes; round-robin order."""

    def __init__(self, path):
        self.path = path
        self._lock = threading.Lock()
        self._signature = None
        self._items = []
        self._next = 0

    def _load(self):
        try:
            info = os.stat(self.path)
            signature = (info.st_ino, info.st_mtime_ns, info.st_ctime_ns, info.st_size)
        except OSError:
            signature = None
        if signature == self._signature:
            return
        items = []
        if signature is not None:
            try:
                with open(self.path, encoding="utf-8") as handle:
                    data = json.load(handle)
            except (OSError, ValueError) as exc:
                log("cannot read {}: {}; keeping {} backend(s)".format(
                    self.path, exc, len(self._items)))
                return
            for entry in (data.get("backends") if isinstance(data, dict) else None) or []:
                backend = parse_backend(entry)
                if backend is not None:
                    items.append(backend)
        self._signature = signature
        self._items = items
        log("backends: " + (", ".join("{} ({})".format(b[0], b[3]) for b in items)
                            or "none"))

    def rotation(self):
        """The backends, starting with the next one in round-robin order, as
        ``(position, backend)``; :meth:`served` moves the turn past the one used."""
        with self._lock:
            self._load()
            items = list(enumerate(self._items))
            if not items:
                return items
            start = self._next % len(items)
            self._next = (start + 1) % len(items)
        return items[start:] + items[:start]

    def served(self, first, position):
        """The backend at ``position`` took a request whose turn was ``first``'s: when
        backends were skipped, the next request goes to the one after it (so a dead
        backend's turn does not fall to its neighbour twice)."""
        if position == first:
            return
        with self._lock:
            if self._items:
                self._next = (position + 1) % len(self._items)


def parse_backend(entry):
    """(name, host, port, url) of a backend entry, None if unusable."""
    if not isinstance(entry, dict) or not isinstance(entry.get("url"), str):
        return None
    parts = urllib.parse.urlsplit(entry["url"])
    if parts.scheme != "http" or not parts.hostname:
        log("ignoring backend {!r}: only http://host:port URLs are supported".format(entry))
        return None
    try:
        port = parts.port or 80
    except ValueError:
        return None
    return (str(entry.get("name") or parts.netloc), parts.hostname, port, entry["url"])


class Proxy(BaseHTTPRequestHandler):
    server_version = "fornace-proxy/1.0"
    backends = None          # set by main()

    def log_message(self, fmt, *args):
        log("{} {}".format(self.address_string(), fmt % args))

    def forward(self):
        body = self._read_body()
        if body is None:
            return
        rotation = self.backends.rotation()
        if not rotation:
            self._error(503, "no backend is registered with this load balancer yet")
            return
        for position, (name, host, port, _) in rotation:
            connection = http.client.HTTPConnection(host, port, timeout=CONNECT_TIMEOUT)
            try:
                connection.connect()
            except OSError as exc:
                log("backend {} ({}:{}) skipped: {}".format(name, host, port, exc))
                connection.close()
                continue
            self.backends.served(rotation[0][0], position)
            try:
                connection.sock.settimeout(READ_TIMEOUT)
                self._relay(connection, name, host, port, body)
            finally:
                connection.close()
            return
        self._error(502, "none of the {} backend(s) of this load balancer accepts "
                         "connections".format(len(rotation)))

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = forward

    def _read_body(self):
        """The request body (b'' when none), None after answering an error."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while True:
                line = self.rfile.readline(65537)
                try:
                    size = int(line.split(b";")[0].strip() or b"x", 16)
                except ValueError:
                    self._error(400, "malformed chunked request body")
                    return None
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline(3)
        length = self.headers.get("Content-Length")
        if length is None:
            return b""
        try:
            size = int(length)
            if size < 0:
                raise ValueError
        except ValueError:
            self._error(400, "invalid Content-Length")
            return None
        return self.rfile.read(size)

    def _relay(self, connection, name, host, port, body):
        try:
            connection.putrequest(self.command, self.path, skip_host=True,
                                  skip_accept_encoding=True)
            seen_host = False
            for key, value in self.headers.items():
                lower = key.lower()
                if lower in HOP_BY_HOP or lower == "content-length":
                    continue
                seen_host = seen_host or lower == "host"
                connection.putheader(key, value)
            if not seen_host:
                connection.putheader("Host", "{}:{}".format(host, port))
            client = self.client_address[0]
            forwarded = self.headers.get("X-Forwarded-For")
            connection.putheader("X-Forwarded-For",
                                 "{}, {}".format(forwarded, client) if forwarded else client)
            connection.putheader("X-Forwarded-Proto", "http")
            if body or self.command in ("POST", "PUT", "PATCH"):
                connection.putheader("Content-Length", str(len(body)))
            connection.putheader("Connection", "close")
            connection.endheaders(body or None)
            answer = connection.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            log("backend {} failed: {}".format(name, exc))
            self._error(502, "backend {} failed: {}".format(name, exc))
            return
        self.send_response_only(answer.status, answer.reason)
        for key, value in answer.getheaders():
            if key.lower() not in HOP_BY_HOP:
                self.send_header(key, value)
        self.send_header("X-Fornace-Backend", name)
        self.send_header("Connection", "close")
        self.end_headers()
        self.log_request(answer.status)
        if self.command == "HEAD" or answer.status in (204, 304) or answer.status < 200:
            return
        try:
            while True:
                data = answer.read(CHUNK)
                if not data:
                    break
                self.wfile.write(data)
        except (OSError, http.client.HTTPException) as exc:
            log("backend {}: answer cut short: {}".format(name, exc))
        self.close_connection = True

    def _error(self, status, message):
        data = (message + "\n").encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self.close_connection = True


def log(text):
    sys.stderr.write("{} {}\n".format(time.strftime("%Y-%m-%d %H:%M:%S"), text))
    sys.stderr.flush()


def main(argv=None):
    parser = argparse.ArgumentParser(description="HTTP round-robin reverse proxy")
    parser.add_argument("--listen", default="0.0.0.0")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--backends", required=True, help="JSON file of backends")
    options = parser.parse_args(argv)
    Proxy.backends = Backends(options.backends)
    family = socket.AF_INET6 if ":" in options.listen else socket.AF_INET
    ThreadingHTTPServer.address_family = family
    server = ThreadingHTTPServer((options.listen, options.port), Proxy)
    log("listening on {}:{}, backends from {}".format(options.listen, options.port,
                                                      options.backends))
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
