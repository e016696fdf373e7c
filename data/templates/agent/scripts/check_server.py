"""Is a server of this unit healthy? (a FormatVersion 2.0 plan script, operation ``check``).

Arguments (the JSON object on stdin; also environment variables): ``server``
(``site``, ``app`` or ``proxy``), ``port``, optional ``address`` (the unit's;
probed), ``path`` (default ``/``) and ``timeout`` (seconds, default 5); see
``fornace_servers.py``.  Prints one JSON line, ``{"status": "ok" | "degraded"
| "error", "detail": "..."}``, and exits 0 for ok and degraded, 1 for error
(the line is then also written to stderr, which the agent quotes in the
command's error).  Bad arguments are an error too.  The plan also ships
``fornace_servers.py`` and ``fornace_unit.py``.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fornace_servers as servers  # noqa: E402  (shipped in the same plan)
import fornace_unit as unit  # noqa: E402


def main():
    try:
        status, detail = servers.check(unit.arguments())
    except unit.Failure as exc:
        status, detail = "error", str(exc)
    line = json.dumps({"status": status, "detail": detail})
    print(line)
    if status == "error":
        print(line, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
