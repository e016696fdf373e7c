"""Stop a server of this unit (a FormatVersion 2.0 plan script, operation ``stop``).

Argument ``server`` (``site``, ``app`` or ``proxy``, see
``fornace_servers.py``): the server the deploy script started (its pid file)
is stopped with its process group (SIGTERM, SIGKILL 10 s later), as is what
is left of a group whose first process exited.  Stopping a server that does
not run succeeds and says so.  Prints what it did.  The plan also ships
``fornace_servers.py`` and ``fornace_unit.py``.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fornace_servers as servers  # noqa: E402  (shipped in the same plan)
import fornace_unit as unit  # noqa: E402

if __name__ == "__main__":
    sys.exit(unit.run(servers.stop))
