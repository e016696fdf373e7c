"""A tiny web application for Fornace's linuxApp examples and tests (Python 3, standard library).

Listens on ``HOST``:``PORT`` (set by the deploy script).  ``GET /health``
answers ``ok``; every other path answers a greeting naming the unit
(``FORNACE_UNIT_HOSTNAME``) and the ``GREETING`` environment variable;
``POST /echo`` answers the request body.
"""
import json
import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from socketserver import ThreadingMixIn

UNIT = os.environ.get("FORNACE_UNIT_HOSTNAME") or "an unknown unit"
GREETING = os.environ.get("GREETING") or "Hello"


class Server(ThreadingMixIn, HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/health":
            self.answer(200, "ok\n", "text/plain")
        elif self.path == "/info":
            self.answer(200, json.dumps({"unit": UNIT, "greeting": GREETING,
                                         "pid": os.getpid()}) + "\n", "application/json")
        else:
            self.answer(200, "{} from {}\n".format(GREETING, UNIT), "text/plain")

    def do_POST(self):
        size = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(size).decode("utf-8", "replace")
        if self.path == "/echo":
            self.answer(200, "{} echoes: {}\n".format(UNIT, body), "text/plain")
        else:
            self.answer(404, "not found\n", "text/plain")

    def answer(self, status, text, kind):
        data = text.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", kind + "; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Unit", UNIT)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_HEAD(self):
        self.do_GET()


def main():
    host = os.environ.get("HOST") or "0.0.0.0"
    port = int(os.environ.get("PORT") or 8000)
    server = Server((host, port), Handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("hello app of {} listening on {}:{}".format(UNIT, host, port), flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
