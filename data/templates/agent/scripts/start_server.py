"""Start a server of this unit again (a FormatVersion 2.0 plan script, operation ``start``).

Arguments: ``server`` (``site``, ``app`` or ``proxy``), ``port``, optional
``address``; for an app also ``startCommand``, ``healthPath``, ``env``,
``name``, ``hostname``, ``startTimeout`` (see ``fornace_servers.py``).  The
server is started from what its deployment left on the unit (the site
folder, the app folder, the load balancer's folder and backend list), the
same way the deploy script starts it, and the script waits until it answers
(an app: on its health path with a 2xx/3xx status).  A server that already
runs is left alone.  Prints its URL; fails (exit 1, the end of its log on
stderr) when nothing was deployed or it does not come up.  The plan also
ships ``fornace_servers.py`` and ``fornace_unit.py``.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fornace_servers as servers  # noqa: E402  (shipped in the same plan)
import fornace_unit as unit  # noqa: E402

if __name__ == "__main__":
    sys.exit(unit.run(servers.start))
