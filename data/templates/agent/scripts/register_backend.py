"""Register a farm unit with the farm's load balancer (a FormatVersion 2.0 plan script).

Runs on the load balancer's unit.  Arguments (the JSON object on stdin; also
environment variables): ``name`` (the unit's hostname) and ``url`` (where it
serves: ``http://address:port``).  Adds the backend to
``$FORNACE_WORK_DIR/proxy/backends.json``, or updates the URL of the backend of
that name, and replaces the file atomically; the running proxy re-reads it
on its next request.  Registering again is harmless.  Prints what was
registered and how many backends there are now.
"""
import os
import sys
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fornace_unit as unit  # noqa: E402  (shipped in the same plan)


def register(args):
    name = unit.argument(args, "name")
    url = unit.argument(args, "url")
    if not isinstance(name, str) or not name.strip():
        raise unit.Failure("no backend name given")
    parts = urllib.parse.urlsplit(url if isinstance(url, str) else "")
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or not parts.hostname or port is None:
        raise unit.Failure("unit {}: {!r} is not an http://address:port URL (does the unit "
                           "have an address?)".format(name, url))
    folder = unit.work_dir() / "proxy"
    if not (folder / "fornace_proxy.py").is_file():
        raise unit.Failure("no load balancer was deployed on this unit")
    with unit.backends_file(folder) as (backends, save):
        for backend in backends:
            if backend.get("name") == name:
                backend["url"] = url
                break
        else:
            backends.append({"name": name, "url": url})
        save(backends)
    return "registered {} ({}) with the load balancer: {} backend(s)".format(
        name, url, len(backends))


if __name__ == "__main__":
    sys.exit(unit.run(register))
