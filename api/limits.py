"""Caps on units: how many one service, and one environment, may have.

``[api] max_units_per_service`` and ``[api] max_units_per_environment``
bound what a configuration session may hold and what a ``scale`` job may
add (each unit is an instance to boot: a typo of 3000 for 3 must not reach
the cloud).  A change is refused (400, naming the service, the count and the
option) only when it *grows* a count past its cap, so an environment already
above a lowered cap can still be edited and shrunk.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fornace.api.errors import BadRequest
from fornace.common.modelview import find_service, services_of

SERVICE_OPTION = "[api] max_units_per_service"
ENVIRONMENT_OPTION = "[api] max_units_per_environment"


def _key(service: Any, index: int) -> str:
    if isinstance(service, dict):
        for field in ("id", "name"):
            if isinstance(service.get(field), (str, int)):
                return f"{field}:{service[field]}"
    return f"index:{index}"


def _label(service: Any, index: int, with_id: bool = True) -> str:
    """The name and id of a service (a new one's id, not stored yet, left out)."""
    if not isinstance(service, dict):
        return f"#{index}"
    name, service_id = service.get("name"), service.get("id")
    if not with_id and name:
        return str(name)
    if name and service_id and name != service_id:
        return f"{name} ({service_id})"
    return str(name or service_id or f"#{index}")


def _units(service: Any) -> int:
    units = service.get("units") if isinstance(service, dict) else None
    return len(units) if isinstance(units, list) else 0


def unit_counts(services: Any) -> dict[str, int]:
    """The number of units of every service of a session's list."""
    if not isinstance(services, list):
        return {}
    return {_key(service, index): _units(service) for index, service in enumerate(services)}


@dataclass(frozen=True)
class UnitLimits:
    """The caps (``[api] max_units_per_service`` / ``max_units_per_environment``)."""

    per_service: int = 100
    per_environment: int = 500

    def check_services(self, env_id: str, before: dict[str, int], services: list) -> None:
        """Refuse an edit of a session's services that grows a count past its cap;
        ``before``: :func:`unit_counts` of the services before the edit."""
        grown = []
        for index, service in enumerate(services):
            count, key = _units(service), _key(service, index)
            if count <= before.get(key, 0):
                continue
            grown.append((_label(service, index, with_id=key in before), count))
            if count > self.per_service:
                raise BadRequest(f"service {grown[-1][0]} would have {count} units: at most "
                                 f"{self.per_service} are allowed per service "
                                 f"({SERVICE_OPTION})")
        total = sum(_units(service) for service in services)
        if grown and total > self.per_environment and total > sum(before.values()):
            name, count = grown[0]
            raise BadRequest(f"environment {env_id} would have {total} units with service "
                             f"{name} at {count}: at most {self.per_environment} are "
                             f"allowed per environment ({ENVIRONMENT_OPTION})")

    def check_scale(self, model: dict[str, Any], service_id: str, delta: int) -> None:
        """Refuse a scale job that would grow a count past its cap."""
        service = find_service(model, service_id)
        if delta <= 0 or service is None:
            return
        label = _label(service, 0)
        count = _units(service) + delta
        if count > self.per_service:
            raise BadRequest(f"action scale: parameter 'delta' would give service {label} "
                             f"{count} units ({_units(service)} + {delta}): at most "
                             f"{self.per_service} are allowed per service ({SERVICE_OPTION})")
        total = sum(_units(s) for s in services_of(model)) + delta
        if total > self.per_environment:
            raise BadRequest(f"action scale: parameter 'delta' would give environment "
                             f"{model.get('id')} {total} units, service {label} {count}: at most "
                             f"{self.per_environment} are allowed per environment "
                             f"({ENVIRONMENT_OPTION})")
