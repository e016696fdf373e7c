#!/usr/bin/env python3
"""Start-up time of the ``fornace`` command (not a test): wall seconds of
``fornace --help`` and of a few commands that only parse their options,
best and median of N runs, and the project modules each loads.

    python tools/bench_startup.py            # 10 runs each
    python tools/bench_startup.py --repeat 30

Target: ``fornace --help`` under 0.3 s; ``fornace agent`` loads nothing of
the API or the conductor.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMANDS = (["--help"], ["--version"], ["agent", "--help"], ["workflow", "--help"],
            ["env", "--help"], ["api", "--help"])


def fornace() -> list[str]:
    script = Path(sys.executable).with_name("fornace")
    return [str(script)] if script.exists() else [sys.executable, "-m", "fornace.cli"]


def seconds(args: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(fornace() + args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=False)
    return time.perf_counter() - started


def packages_loaded(args: list[str]) -> str:
    """The fornace packages and heavy libraries the command imports."""
    code = ("import sys, runpy\nsys.argv = ['fornace', *%r]\n"
            "try:\n    runpy.run_module('fornace.cli', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "names = {m.split('.')[1] for m in sys.modules if m.startswith('fornace.')}\n"
            "heavy = [m for m in ('fastapi', 'sqlalchemy', 'lxml', 'jsonpath_ng', 'kombu', "
            "'uvicorn') if m in sys.modules]\n"
            "print(','.join(sorted(names)) + ' | ' + ','.join(heavy), file=sys.stderr)") % (args,)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    print(f"{'command':<24}{'best s':>8}{'median s':>10}  fornace packages | heavy libraries")
    for command in COMMANDS:
        runs = sorted(seconds(command) for _ in range(args.repeat))
        print(f"{'fornace ' + ' '.join(command):<24}{runs[0]:>8.3f}{statistics.median(runs):>10.3f}"
              f"  {packages_loaded(command)}")


if __name__ == "__main__":
    main()
