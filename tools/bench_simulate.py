#!/usr/bin/env python3
"""Benchmark of the whole ``fornace workflow simulate --json`` process (not a test).

What an operator runs, start-up and output included: for each size it
writes an environment of that many units (one Active Directory service with
two units, web server services of ten units that join its domain, as
``tools/bench_engine.py`` builds them), runs ``fornace workflow simulate
--json`` on it as a subprocess with its output going to a file, checks the
JSON document (status success, every unit deployed and joined, the domain
join in one round) and prints wall seconds and peak memory.

    python tools/bench_simulate.py                       # 202, 1002, 5002 units
    python tools/bench_simulate.py --sizes 1002 --repeat 3
    python tools/bench_simulate.py --data /path/to/murano-0.2/data
        # another catalog laid out like data/ (a Murano 0.2 data folder)

With ``--data`` the checks are those that hold for any catalog of that
shape: status success and every unit in the domain.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_engine import CATALOG, DNS_IP, DOMAIN, build_model  # noqa: E402

DEFAULT_SIZES = (202, 1002, 5002)


def fornace() -> list[str]:
    script = Path(sys.executable).with_name("fornace")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from fornace.cli.main import main; sys.exit(main())"]


def run(size: int, data: Path, folder: Path) -> tuple[float, int, int, int]:
    """(seconds, peak KB, rounds, join rounds) of one run; the output is checked,
    then dropped (a child forked from a big parent counts the parent's pages)."""
    model, _ = build_model(size, 10, seed=size)
    model_path = folder / f"model{size}.json"
    model_path.write_text(json.dumps(model))
    out_path = folder / f"out{size}.json"
    command = fornace() + ["workflow", "simulate", "--data", str(data), "--model",
                           str(model_path), "--result", f"AskDnsIp={json.dumps(DNS_IP)}",
                           "--json"]
    started = time.perf_counter()
    with out_path.open("w") as out:
        process = subprocess.Popen(command, stdout=out, cwd=ROOT)
        _, status, usage = os.wait4(process.pid, 0)  # this child's own peak memory
        process.returncode = code = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - started
    assert code == 0, f"{size} units: fornace exited {code}"
    # checked in another process: a child forked from a parent holding the
    # parsed output would count the parent's pages in its peak memory
    checked = subprocess.run([sys.executable, __file__, "--check", str(out_path), str(size)],
                             capture_output=True, text=True, check=False)
    if checked.returncode != 0:
        raise SystemExit(f"{size} units: {checked.stderr.strip()}")
    rounds, joins = json.loads(checked.stdout)
    return seconds, usage.ru_maxrss, rounds, joins


def check_output(path: str, size: int) -> tuple[int, int]:
    """(rounds, join rounds) of a simulate --json document, after checking it."""
    document = json.loads(Path(path).read_text())
    assert document["status"] == "success", f"status {document['status']}"
    units = [u for s in document["model"]["services"] for u in s["units"]]
    assert len(units) == size, f"{len(units)} units in the final model"
    assert all(u.get("state", {}).get("domain") == DOMAIN for u in units
               if not u.get("isMaster")), "a unit did not join the domain"
    return len(document["rounds"]), join_rounds(document)


def join_rounds(document: dict) -> int:
    return sum(1 for entry in document["rounds"]
               if any(a["template"] == "JoinDomain" for a in entry["actions"]))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--check"]:
        print(json.dumps(check_output(argv[1], int(argv[2]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)),
                        help="total units per run, comma separated (default %(default)s)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs per size; the best time is kept (default 1)")
    parser.add_argument("--data", type=Path, default=CATALOG,
                        help="catalog folder (default: tools/bench_catalog)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if any(s < 3 for s in sizes) or args.repeat < 1:
        parser.error("sizes must be at least 3 units and --repeat at least 1")
    print(f"fornace workflow simulate --json, whole process; catalog {args.data}; "
          f"best of {args.repeat}")
    print(f"{'units':>6} {'rounds':>6} {'join rounds':>11} {'seconds':>8} {'peak MB':>8} "
          f"{'output MB':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for size in sizes:
            runs = [run(size, args.data, folder) for _ in range(args.repeat)]
            seconds = min(r[0] for r in runs)
            peak = max(r[1] for r in runs)
            _, _, rounds, joins = runs[-1]
            output = os.path.getsize(folder / f"out{size}.json") / 1e6
            print(f"{size:>6} {rounds:>6} {joins:>11} {seconds:>8.2f} {peak / 1024:>8.0f} "
                  f"{output:>9.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
