"""A field a service type's schema declares secret (``writeOnly``) is masked by
the conductor as passwords are: its value never reaches a report, a log line
or the trace, even when a workflow writes it into a report's text."""
from __future__ import annotations

from fornace.common.catalog import builtin_catalog, catalog_with
from fornace.common.secrets import find_secrets, mask_text

NOTE = {"extends": "linuxService",
        "schema": {"properties": {"signature": {"type": "string", "writeOnly": True}}}}


def test_declared_secret_fields_are_found_like_passwords():
    catalog = catalog_with(builtin_catalog(), {"linuxNote": NOTE})
    assert "signature" in catalog.secret_fields
    assert "signature" not in builtin_catalog().secret_fields
    model = {"services": [{"type": "linuxNote", "signature": "s1gn3d-by-me",
                           "adminPassword": "P@ssw0rd1", "name": "memo"}]}
    assert find_secrets(model) == {"P@ssw0rd1"}
    found = find_secrets(model, keys=catalog.secret_fields)
    assert found == {"P@ssw0rd1", "s1gn3d-by-me"}
    assert mask_text("signed s1gn3d-by-me", found) == "signed ***"
