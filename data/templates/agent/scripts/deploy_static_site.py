"""Serve a one-page static site on a port of this unit (a FormatVersion 2.0 plan script).

Arguments (environment variables): ``port``, ``title``, optional ``hostname``
(the unit's, shown on the page, so the units of a farm can be told apart).
The site lives in
``$FORNACE_WORK_DIR/site``; the server listens on ``$FORNACE_INSTANCE_ADDRESS``
(set by the local cloud, which gives each unit its own loopback address) or
on every address of a real VM.  Deploying again replaces the running server,
so the script can run any number of times.  Prints ``serving URL``.
"""
import html
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

START_TIMEOUT = 15.0


def main() -> int:
    port = int(os.environ["port"])
    title = os.environ.get("title") or "Fornace"
    address = os.environ.get("FORNACE_INSTANCE_ADDRESS") or "0.0.0.0"
    work = Path(os.environ.get("FORNACE_WORK_DIR") or os.getcwd())
    site = work / "site"
    site.mkdir(parents=True, exist_ok=True)
    text = html.escape(title)
    hostname = (os.environ.get("hostname") or "").strip()
    served_by = "" if hostname in ("", "$hostname") else \
        f"<p>Served by {html.escape(hostname)}</p>\n"
    (site / "index.html").write_text(
        f"<!doctype html>\n<title>{text}</title>\n<h1>{text}</h1>\n{served_by}",
        encoding="utf-8")

    pid_file = work / "site-server.pid"
    stop_previous(pid_file)
    with open(work / "site-server.log", "ab") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(port), "--bind", address,
             "--directory", str(site)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, close_fds=True)
    pid_file.write_text(str(server.pid))
    probe = "127.0.0.1" if address == "0.0.0.0" else address
    if not answers(probe, port, server):
        print(f"the web server did not start on {address}:{port}; see "
              f"{work / 'site-server.log'}", file=sys.stderr)
        return 1
    print(f"serving http://{probe}:{port}/")
    return 0


def stop_previous(pid_file: Path) -> None:
    """Stop the server an earlier deployment started (if it still runs)."""
    try:
        pid = int(pid_file.read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return
    if b"http.server" not in cmdline:      # the pid now belongs to something else
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def answers(host: str, port: int, server: subprocess.Popen) -> bool:
    """Wait until the server accepts connections (False: it exited or timed out)."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if server.poll() is not None:
            return False
        try:
            socket.create_connection((host, port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.1)
    return False


if __name__ == "__main__":
    sys.exit(main())
