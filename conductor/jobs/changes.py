"""Change detection: reconfigure what changed, and only that.

When an agent command succeeds, the unit it configured keeps (in
``status.configs[template]``) a digest of the command's inputs (its
mappings), a digest of the unit's description (its service's fields and its
own, ``state`` left out), its change id, its (masked) result and the
``state`` keys the workflow's ``<success>`` block set.  Sensitive values
are left out of both digests (Unfurl does the same).  It also keeps the
command's *sources* (:mod:`fornace.conductor.jobs.sources`): the digests of
the workflow file, agent template and scripts that configured the unit, and
the package version (or ``data folder``) each came from.

Before the next deployment, :func:`prepare` compares each unit's description
digest with the one its commands used, and their sources with those the
job's data would run now: where either differs, the ``state`` keys those
commands set are removed, so the workflows -- which configure what is not
marked configured -- configure the unit again (reason ``reconfigure``, or
what changed: ``script deploy_kv.py changed in kvstore 1.1.0 (was kvstore
1.0.0)``).  A config recorded without sources is not known to have changed.
When a command is about to be sent, :func:`unchanged` tells whether the same
template already ran on that unit with the same inputs (and sources): then
it is not sent again; its recorded result is replayed to the workflow.

Modes (``--change-detection``): ``evaluate`` (default; a unit whose status
is ``customized`` is left alone), ``always`` (customized or not), ``skip``
(no comparison at all: only what the workflows choose to run runs).
"""
from __future__ import annotations

import hashlib
from typing import Any

from fornace.common.modelview import find_object, iter_units, services_of
from fornace.common.canonicaljson import canonical_json
from fornace.common.secrets import is_secret_key, masked, masked_json
from fornace.conductor.jobs.nodestatus import flag, status_of
from fornace.conductor.jobs.sources import RunSources, changed_sources

_NOT_INPUTS = {"units", "state", "temp", "status", "created", "updated"}
_NOT_UNIT_INPUTS = {"state", "temp", "status"}


def _text(value: Any) -> str:
    return masked_json(value)


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _digest(value: Any) -> str:
    return _hash(_text(value))


def service_text(service: dict[str, Any]) -> str:
    """The part of a description that all units of ``service`` share."""
    return _text({k: v for k, v in service.items() if k not in _NOT_INPUTS})


def description_digest(service: dict[str, Any], unit: dict[str, Any] | None = None,
                       shared: str | None = None) -> str:
    """What the user described for this unit (or service): its service's
    fields and its own (``shared``: :func:`service_text` of the service, when
    the caller has it).  The same digest as ``_digest({"service": ..., "unit": ...})``."""
    own = {} if unit is None else {k: v for k, v in unit.items() if k not in _NOT_UNIT_INPUTS}
    return _hash(f'{{"service":{shared or service_text(service)},"unit":{_text(own)}}}')


def command_digest(template: str, mappings: dict[str, Any]) -> str:
    if isinstance(mappings, dict) and any(is_secret_key(key) for key in mappings):
        # masked already: the text needs no scan for secret names
        return _hash(canonical_json({"template": template, "mappings": masked(mappings)}))
    return _digest({"template": template, "mappings": mappings})


def configs(unit: dict[str, Any]) -> dict[str, Any]:
    status = status_of(unit)
    found = status.get("configs")
    if not isinstance(found, dict):
        found = status["configs"] = {}
    return found


def prepare(model: dict[str, Any], mode: str = "evaluate",
            sources: RunSources | None = None) -> dict[str, str]:
    """Undo the ``configured`` marks of units whose description changed, or
    (``sources``: what the job runs) whose commands' sources did.

    Returns ``{unit id: reason}`` for those units: ``reconfigure`` (the
    description changed) or the sources that changed.
    """
    reasons: dict[str, str] = {}
    if mode == "skip":
        return reasons
    owners = [(service, None, service) for service in services_of(model)]
    owners += [(service, unit, unit) for service, unit in iter_units(model)]
    for service, unit, owner in owners:
        if mode == "evaluate" and flag(owner, "customized"):
            continue
        status = owner.get("status")
        known = status.get("configs") if isinstance(status, dict) else None
        if not isinstance(known, dict) or not known:
            continue
        current = description_digest(service, unit)
        for config in known.values():
            if not isinstance(config, dict):
                continue
            reason = "reconfigure" if config.get("inputs") != current else None
            moved = changed_sources(config.get("sources"), sources.current) \
                if sources is not None else None
            if moved:
                config["rerun"] = moved    # not replayed: its template or scripts differ
                reason = reason or moved
            if reason:
                for mark in config.get("sets") or []:
                    _unset(model, mark)
                config["stale"] = True
                reasons.setdefault(str(owner["id"]), reason)
    return reasons


def config_key(template: str, target_unit: str) -> str:
    return f"{template}@{target_unit}"


def unchanged(owner: dict[str, Any] | None, key: str, digest: str, mode: str) -> dict | None:
    """The recorded config when this exact command already ran for ``owner``
    (the unit or service the rule matched)."""
    if owner is None or mode == "always":
        return None
    config = configs(owner).get(key)
    if isinstance(config, dict) and config.get("digest") == digest and config.get("ok") \
            and not config.get("rerun"):
        return config
    return None


def record(owner: dict[str, Any], service: dict[str, Any], unit: dict[str, Any] | None,
           key: str, digest: str, change_id: str, sets: list[dict[str, str]], result: Any,
           ok: bool, inputs: str | None = None,
           sources: dict[str, dict[str, str]] | None = None) -> None:
    """Remember a command that ran for ``owner`` (``unit``, or ``service`` when None);
    ``inputs``: :func:`description_digest` of them, when the caller knows it;
    ``sources``: what the command came from (:meth:`RunSources.of_command`)."""
    previous = configs(owner).get(key)
    if isinstance(previous, dict) and not sets:
        sets = previous.get("sets") or []   # a replay sets the same marks again
    if inputs is None:
        inputs = description_digest(service, unit)
    config = {"digest": digest, "inputs": inputs, "changeId": change_id, "sets": sets,
              "ok": ok, "result": masked(result)}
    if sources:
        config["sources"] = sources
    configs(owner)[key] = config


def marks(model: dict[str, Any], paths: list[str]) -> list[dict[str, str]]:
    """``services.0.units.1.state.x`` -> ``{object: <unit id>, path: state.x}``
    (only ``state`` keys: ``temp`` is per deployment anyway)."""
    found: list[dict[str, str]] = []
    for path in paths:
        parts = path.split(".")
        owner, rest = _owner(model, parts)
        if owner is not None and rest and rest[0] == "state":
            mark = {"object": str(owner["id"]), "path": ".".join(rest)}
            if mark not in found:
                found.append(mark)
    return found


def _owner(model: dict[str, Any], parts: list[str]) -> tuple[dict | None, list[str]]:
    if len(parts) < 3 or parts[0] != "services" or not parts[1].isdigit():
        return None, []
    services = model.get("services")
    try:
        service = services[int(parts[1])]
    except (TypeError, IndexError, KeyError):
        return None, []
    if len(parts) >= 5 and parts[2] == "units" and parts[3].isdigit():
        try:
            return service["units"][int(parts[3])], parts[4:]
        except (TypeError, IndexError, KeyError):
            return None, []
    return service, parts[2:]


def _unset(model: dict[str, Any], mark: Any) -> None:
    if not isinstance(mark, dict):
        return
    target = find_object(model, mark.get("object"))
    path = str(mark.get("path") or "").split(".")
    if target is None or not path[0]:
        return
    for key in path[:-1]:
        target = target.get(key) if isinstance(target, dict) else None
    if isinstance(target, dict):
        target.pop(path[-1], None)
