"""tools/probe_inputs.py in full: every hostile input refused cleanly.

Operator inputs to `fornace workflow check/simulate` (under a memory and a
time limit), command-line inputs and API requests to a `fornace up` of its
own; the tool judges each from the outside (no traceback, a non-zero exit or
the expected HTTP status with a JSON error, a message that says where,
nothing changed, no secret shown).
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(1200)   # above the tool's own 900 s limit
def test_every_hostile_input_is_refused_cleanly():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "probe_inputs.py")],
                          capture_output=True, text=True, timeout=900)
    lines = done.stdout.strip().splitlines()
    summary = lines[-1] if lines else ""
    found = re.fullmatch(r"(\d+) tries: (\d+) clean, (\d+) not clean", summary)
    assert found, done.stdout[-4000:] + done.stderr[-4000:]
    tries, clean, unclean = map(int, found.groups())
    assert tries >= 100 and clean == tries and unclean == 0, "\n".join(lines[-40:])
    assert done.returncode == 0
