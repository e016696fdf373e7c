"""The client commands' connection options refused before anything is sent:
one line naming the option, exit status 2, the token never quoted."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from clikit import one_line_error


def fornace(*args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("OS_", "FORNACE_"))}
    return subprocess.run([sys.executable, "-m", "fornace.cli", *args], capture_output=True,
                          text=True, timeout=120, env={**environment, **env})


@pytest.mark.parametrize("url, said", [
    ("http://[::1", "is no URL: Invalid IPv6 URL"),
    ("http://host:x/", "is no URL: Port could not be cast to integer value as 'x'"),
    ("http://127.0.0.1:99999", "is no URL: Port out of range 0-65535"),
    ("http:///v1", "is no URL: a host and no spaces or control characters"),
    ("http://host/a b", "is no URL: a host and no spaces or control characters"),
])
def test_malformed_url(url, said):
    line = one_line_error(fornace("env", "list", "--url", url), 2)
    assert line.startswith(f"fornace: --url {url!r} {said}")


def test_token_that_cannot_be_a_header_is_refused_unquoted():
    done = fornace("env", "list", "--url", "http://127.0.0.1:1", "--token", "sek\nret")
    assert one_line_error(done, 2) == ("fornace: --token (FORNACE_TOKEN) cannot be sent: it "
                                       "holds a line break, a control or a non-ASCII character")
    assert "sek" not in done.stderr
    from_environment = fornace("env", "list", "--url", "http://127.0.0.1:1",
                               FORNACE_TOKEN="sek\rret")
    assert "sek" not in from_environment.stderr and from_environment.returncode == 2


def test_tenant_that_cannot_be_a_header():
    done = fornace("status", "e1", "--url", "http://127.0.0.1:1", FORNACE_TENANT="t\n1")
    assert one_line_error(done, 2) == ("fornace: --tenant (FORNACE_TENANT) 't\\n1' cannot be "
                                       "sent: it holds a line break, a control or a non-ASCII "
                                       "character")
