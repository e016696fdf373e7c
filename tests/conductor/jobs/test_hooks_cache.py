"""The job hooks' caches of description digests and topology: kept across
writes of run-time state, dropped by any write to what the user described."""
from __future__ import annotations

import pytest

from fornace.conductor.jobs import changes
from fornace.conductor.jobs.hooks import JobHooks
from fornace.conductor.jobs.records import JobRecorder


def model() -> dict:
    return {"services": [{"id": "s1", "name": "web", "type": "x", "flavor": "m1.small",
                          "units": [{"id": "u1", "name": "web1", "state": {}},
                                    {"id": "u2", "name": "web2"}]}]}


def hooks_of(data: dict) -> JobHooks:
    return JobHooks(lambda: data, JobRecorder("env", "job"), None)


@pytest.mark.parametrize("path, base, kept", [
    ("services.0.units.0.state.hostname", None, True),
    ("services.0.status.state", None, True),
    ("#unit.state.domain", "unit", True),
    ("#svc.temp.x", "service", True),
    ("#unit.flavor", "unit", False),
    ("#svc.name", "service", False),
    ("#other.state.x", "other", False),     # not a service or unit: where it is is unknown
    ("services.0.flavor", None, False),
    ("services.0.units.0.name", None, False),
])
def test_which_writes_keep_the_cached_descriptions(path, base, kept):
    data = model()
    service, unit = data["services"][0], data["services"][0]["units"][0]
    hooks = hooks_of(data)
    first = hooks._description(service, unit)
    assert first == changes.description_digest(service, unit)
    objects = {"unit": unit, "service": service, "other": {"state": {}}, None: None}
    hooks.changed(path, objects[base])
    assert bool(hooks._descriptions) is kept


def test_a_changed_description_gives_a_new_digest_after_the_write():
    data = model()
    service, unit = data["services"][0], data["services"][0]["units"][0]
    hooks = hooks_of(data)
    before = hooks._description(service, unit)
    unit["flavor"] = "m1.large"
    hooks.changed("#unit.flavor", unit)
    assert hooks._description(service, unit) != before
    assert hooks._description(service, unit) == changes.description_digest(service, unit)
