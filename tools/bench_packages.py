#!/usr/bin/env python3
"""What a pinned workflow package costs a deployment (not a test).

One in-process conductor (simulated cloud and agents, an SQLite database
holding the packages) deploys an environment of one ``linuxWebServer``
service with ``--units`` units, the path a task takes: published on the
broker, the conductor runs the workflows, the result comes back.  Three
kinds of deployment are timed, alternating (``--repeat`` each, after a
warm-up): without a package; pinned to a new version each time (the
conductor reads it from the database, checks its sha256, unpacks it and
loads its workflows during the job); pinned to a version it has loaded
already.  The package is the built-in catalog itself (every workflow,
template and script, with its ``types.json``), so its workflows replace the
data folder's files one for one and the deployment does the same work.

    python tools/bench_packages.py                   # 100 units, 5 runs each
    python tools/bench_packages.py --units 20 --repeat 9
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import statistics
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_trace import DATA, deploy  # noqa: E402  (a tools/ sibling)

from fornace.common.db.engine import make_engine, session_factory, upgrade  # noqa: E402
from fornace.common.db.models import Package  # noqa: E402
from fornace.conductor.daemon import Conductor, ConductorSettings  # noqa: E402
from fornace.conductor.executors.simulator import SimulatedCloud  # noqa: E402
from fornace.conductor.session import Settings  # noqa: E402

PARTS = ("workflows", "templates", "init-scripts", "types.json")


def archive(version: str) -> bytes:
    """The built-in catalog as package ``bench`` ``version``."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as packed:
        packed.writestr("package.json", json.dumps({"name": "bench", "version": version}))
        for path in sorted(DATA.rglob("*")):
            relative = path.relative_to(DATA)
            if path.is_file() and relative.parts[0] in PARTS and "__pycache__" not in \
                    relative.parts:
                packed.write(path, str(relative))
    return buffer.getvalue()


def store(sessions, version: str) -> dict[str, str]:
    """A new version in the packages table; the task's reference to it."""
    data = archive(version)
    digest = hashlib.sha256(data).hexdigest()
    with sessions.begin() as db:
        package = Package(name="bench", version=version, description="", tenant_id="bench",
                          public=False, content_type="application/zip", digest=digest,
                          size=len(data), files=[], data=data, uploaded_by="bench")
        db.add(package)
        db.flush()
        return {"id": package.id, "name": "bench", "version": version, "digest": digest}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--units", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--broker", default="memory://bench-packages")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="fornace-bench-") as folder:
        url = f"sqlite:///{folder}/bench.sqlite"
        upgrade(url)
        sessions = session_factory(make_engine(url))
        daemon = Conductor(ConductorSettings(
            broker_url=args.broker, data_dir=DATA, max_environments=1, agents="simulator",
            database_url=url, engine=Settings(agent_timeout=600)),
            lambda task: SimulatedCloud().executors()[0])
        daemon.start()
        if not daemon.wait_ready():
            raise SystemExit("the conductor did not start")
        times: dict[str, list[float]] = {"none": [], "new": [], "loaded": []}
        loaded = store(sessions, "0.0.0")
        try:
            for run in range(args.repeat + 1):
                fresh = store(sessions, f"1.0.{run}")
                for kind, packages in (("none", None), ("new", [fresh]),
                                       ("loaded", [loaded])):
                    took, _trace = deploy(args.broker, args.units, packages)
                    if run:                              # the first of each: a warm-up
                        times[kind].append(took)
        finally:
            daemon.shutdown()
    size = len(archive("0"))
    print(f"deployment of {args.units} units through the conductor (simulated cloud), "
          f"median of {args.repeat} runs each; the package: {size:,} bytes zipped")
    base = statistics.median(times["none"])
    for kind, label in (("none", "no package"), ("new", "a new version (loaded in the job)"),
                        ("loaded", "a version loaded before")):
        median = statistics.median(times[kind])
        print(f"  {label:34} {median * 1000:8.1f} ms  {median / base - 1:+6.1%}   "
              f"({', '.join(f'{t * 1000:.0f}' for t in times[kind])})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
