"""A command whose output is piped into a reader that stops (``fornace --help |
head``) ends quietly with exit status 0: no BrokenPipeError traceback."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["workflow", "--help"]])
def test_output_into_a_closed_pipe_ends_without_a_traceback(argv):
    read, write = os.pipe()
    os.close(read)   # the reader is gone before the first byte: every write fails
    try:
        done = subprocess.run([sys.executable, "-m", "fornace.cli", *argv], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=120, check=False)
    finally:
        os.close(write)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr
