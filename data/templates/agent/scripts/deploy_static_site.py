"""Serve a one-page static site on a port of this unit (a FormatVersion 2.0 plan script).

Arguments (environment variables): ``port``, ``title``, optional ``hostname``
(the unit's, shown on the page, so the units of a farm can be told apart).
The site lives in
``$FORNACE_WORK_DIR/site``; the server listens on ``$FORNACE_INSTANCE_ADDRESS``
(set by the local cloud, which gives each unit its own loopback address) or
on every address of a real VM.  Deploying again replaces the running server
(``site-server.pid``), so the script can run any number of times.  Prints
``serving URL``.  The plan also ships ``fornace_unit.py``.
"""
import html
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fornace_unit as unit  # noqa: E402  (shipped in the same plan)

START_TIMEOUT = 15.0


def main() -> int:
    return unit.run(deploy)


def deploy(args):
    port = unit.integer(args, "port", None, 1, 65535)
    title = unit.argument(args, "title") or "Fornace"
    work = unit.work_dir()
    site = work / "site"
    site.mkdir(parents=True, exist_ok=True)
    write_page(site / "index.html", str(title), str(unit.argument(args, "hostname") or ""))
    pid_file, log_path = work / "site-server.pid", work / "site-server.log"
    bind, probe = unit.addresses()
    unit.stop_recorded(pid_file)
    process, offset = unit.start_detached(
        [sys.executable, "-m", "http.server", str(port), "--bind", bind,
         "--directory", str(site)],
        work, log_path, unit.child_environment(args), pid_file,
        banner="static site on {}:{}".format(bind, port))
    if not unit.listening(probe, port, process, START_TIMEOUT):
        unit.stop_recorded(pid_file)
        raise unit.Failure(unit.with_tail(
            "the web server did not start on {}:{}".format(bind, port), log_path, offset))
    return "serving http://{}:{}/".format(unit.url_host(probe), port)


def write_page(path: Path, title: str, hostname: str) -> None:
    text = html.escape(title)
    hostname = hostname.strip()
    served_by = "" if hostname in ("", "$hostname") else \
        "<p>Served by {}</p>\n".format(html.escape(hostname))
    path.write_text("<!doctype html>\n<title>{0}</title>\n<h1>{0}</h1>\n{1}".format(
        text, served_by), encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
