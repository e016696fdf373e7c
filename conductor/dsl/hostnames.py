"""Hostnames for new units (``generate-hostname``).

A pattern with ``#`` gets its first ``#`` replaced by a per-service counter
starting at 1; a pattern without ``#`` is used as is; no pattern gives a
random name.  Unlike 0.2 the counter skips names already taken by units of
the model, so scaling a service out in a later deployment cannot produce a
second ``web1``.
"""
from __future__ import annotations

import random
import string
from typing import Any, Callable

_FIRST = string.ascii_lowercase
_REST = string.ascii_lowercase + string.digits


def random_hostname(rng: random.Random | None = None) -> str:
    rng = rng or random.SystemRandom()
    return rng.choice(_FIRST) + "".join(rng.choice(_REST) for _ in range(13))


def model_hostnames(model: dict[str, Any]) -> set[str]:
    """Hostnames units of the model already have (``state.hostname``)."""
    taken = set()
    services = model.get("services")
    for service in services if isinstance(services, list) else []:
        units = service.get("units") if isinstance(service, dict) else None
        for unit in units if isinstance(units, list) else []:
            state = unit.get("state") if isinstance(unit, dict) else None
            if isinstance(state, dict) and isinstance(state.get("hostname"), str):
                taken.add(state["hostname"])
    return taken


class HostnameGenerator:
    def __init__(self, taken: Callable[[], set[str]]) -> None:
        self._load_taken = taken
        self._taken: set[str] | None = None
        self._counters: dict[Any, int] = {}

    def generate(self, pattern: str | None, service_id: str | None) -> str:
        if self._taken is None:
            self._taken = self._load_taken()
        if not pattern:
            name = random_hostname()
            while name in self._taken:
                name = random_hostname()
        elif "#" not in pattern:
            name = pattern
        else:
            counter = self._counters.get(service_id, 0)
            while True:
                counter += 1
                name = pattern.replace("#", str(counter), 1)
                if name not in self._taken:
                    break
            self._counters[service_id] = counter
        self._taken.add(name)
        return name
