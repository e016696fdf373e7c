"""A configuration session's services (Murano 0.2): read, add, replace and
remove them, or a value at any path below them.  Ids go as later Murano
clients give them too: in an object's ``"?"`` header, or as ``===id1===``
placeholders (:mod:`fornace.api.objectheaders`).

Every edit is all or nothing, checked whole before it is stored
(:mod:`fornace.api.servicechecks`: specs, names, ``dependsOn``; the unit
limits; the nesting depth); edits of one session take turns.  What comes
back is masked as a part of the whole list (secret fields go by key).

The object model as a whole (services and ``defaultNetworks``) is edited
with a JSON patch too, as later Murano clients' ``model edit`` sends it
(:meth:`Services.patch_model`, :mod:`fornace.api.modelpatch`), under the
same checks.
"""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Callable

from fornace.api import modelpatch, networks, objectheaders, specs, tree
from fornace.api.context import Context, session_allowed
from fornace.api.errors import BadRequest, NotFound
from fornace.api.jobstate import BUSY, busy_error
from fornace.api.limits import unit_counts
from fornace.api.namelocks import sqlite_write_lock
from fornace.api.servicechecks import (add_services, checked, checked_services,
                                       dangling_dependencies,
                                       duplicate_ids, forget_dependency,
                                       refuse_new_dangling_dependencies,
                                       refuse_new_duplicate_ids, refuse_taken_service_names,
                                       revalidate, service_names)
from fornace.api.views import iso
from fornace.common.catalog import Catalog
from fornace.common.namedchecks import describe
from fornace.common.db.models import utcnow

if TYPE_CHECKING:
    from fornace.api.stores.store import Store


class Services:
    """The services of ``store``'s environments and configuration sessions."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._sessions = store.sessions

    def get(self, ctx: Context, env_id: str, path: str, session_id: str | None) -> Any:
        """The value at ``path`` of the services (a session's, with ``session_id``;
        during the first deployment, those it deploys)."""
        with self._sessions() as db:
            env = self.store.environment(db, ctx, env_id)
            description = self.store.shown_description(db, ctx, env, session_id)
            return masked_at(description.get("services") or [], tree.split(path),
                             self.store.catalog_of(db, env.id))

    def post(self, ctx: Context, env_id: str, path: str, data: Any,
             session_id: str | None) -> Any:
        """Add a service (or a list of them) at the top, or items to a list below."""
        segments = tree.split(path)
        data = objectheaders.with_new_ids(data)

        def change(services: list, catalog: Catalog) -> Any:
            now = iso(utcnow())
            if not segments and isinstance(data, list):
                return add_services(services, data, now, catalog)
            if not segments:
                checked(specs.validate_create, data, catalog)
                service = checked(specs.prepare_new, data, now, services)
                services.append(service)
                return service
            target = tree.get(services, segments)
            if not isinstance(target, list):
                raise BadRequest(f"{path} is not a list: POST adds items to lists")
            items = data if isinstance(data, list) else [data]
            target.extend(copy.deepcopy(items))
            revalidate(services, segments, now, catalog)
            return data
        return self._edit(ctx, env_id, session_id, change)

    def put(self, ctx: Context, env_id: str, path: str, data: Any,
            session_id: str | None) -> Any:
        """Replace the whole list, or the value at ``path`` (``***`` keeps a secret)."""
        segments = tree.split(path)
        data = objectheaders.with_new_ids(data)

        def change(services: list, catalog: Catalog) -> Any:
            now = iso(utcnow())
            if not segments:
                if not isinstance(data, list):
                    raise BadRequest("PUT on /services takes the whole list of services")
                new = specs.keep_secrets(copy.deepcopy(data), services, catalog)
                for index, item in enumerate(new):
                    checked(specs.validate_update, item, catalog, index=index)
                new = [checked(specs.prepare_units, item, index=index)
                       for index, item in enumerate(new)]
                services[:] = new
                return new
            try:
                old = tree.get(services, segments)
            except NotFound:
                old = None
            # with its key, so that PUT .../adminPassword "***" keeps the password
            key = segments[-1]
            value = specs.keep_secrets({key: copy.deepcopy(data)}, {key: old},
                                       catalog)[key]
            tree.put(services, segments, value)
            revalidate(services, segments, now, catalog)
            return masked_at(services, segments, catalog)
        return self._edit(ctx, env_id, session_id, change)

    def delete(self, ctx: Context, env_id: str, path: str, session_id: str | None) -> None:
        """Remove every service, one (the others' ``dependsOn`` forget it) or a value."""
        segments = tree.split(path)

        def change(services: list, catalog: Catalog) -> None:
            if not segments:
                services.clear()
                return None
            removed = tree.get(services, segments) if len(segments) == 1 else None
            tree.delete(services, segments)
            if len(segments) > 1:
                revalidate(services, segments, iso(utcnow()), catalog)
            if isinstance(removed, dict) and removed.get("id") is not None:
                forget_dependency(services, str(removed["id"]))
            return None
        self._edit(ctx, env_id, session_id, change)

    def patch_model(self, ctx: Context, env_id: str, body: Any,
                    session_id: str | None) -> None:
        """Apply a JSON patch to the session's object model (Murano's ``PATCH
        .../model/``, :mod:`fornace.api.modelpatch`): its services then pass the
        checks a ``PUT`` of the whole list passes, its ``defaultNetworks`` those
        of a creation (:mod:`fornace.api.networks`); all or nothing."""
        changes = modelpatch.parsed(objectheaders.with_new_ids(body))

        def change(description: dict, catalog: Catalog) -> None:
            old = copy.deepcopy(description.get("services"))
            modelpatch.apply(description, changes)
            services = description.get("services")
            if not isinstance(services, list):
                raise BadRequest(f"services: must be a list of services, not "
                                 f"{describe(services)}", field="services")
            description["services"] = checked_services(services, old, iso(utcnow()), catalog)
            if any(c.segments[0] == networks.FIELD for c in changes):
                given = description.get(networks.FIELD)
                problem = networks.networks_problem(given)
                if problem is not None:
                    raise BadRequest(f"{problem[0]}: {problem[1]}", field=problem[0])
                if given is None:
                    description.pop(networks.FIELD, None)
                else:
                    description[networks.FIELD] = networks.prepared_networks(given)
        self._edit_model(ctx, env_id, session_id, change)

    def _edit(self, ctx: Context, env_id: str, session_id: str | None,
              change: Callable[[list, Catalog], Any]) -> Any:
        """Apply ``change`` to a copy of the session's services; store it if valid
        (:meth:`_edit_model`); what it returns, masked."""
        def on_services(description: dict, catalog: Catalog) -> Any:
            services = description.setdefault("services", [])
            if not isinstance(services, list):
                raise BadRequest("the environment's services are not a list")
            return specs.masked_view(change(services, catalog), catalog)
        return self._edit_model(ctx, env_id, session_id, on_services)

    def _edit_model(self, ctx: Context, env_id: str, session_id: str | None,
                    change: Callable[[dict, Catalog], Any]) -> Any:
        """Apply ``change`` to a copy of the session's object model; store it if
        its services are still valid.

        All or nothing: any error leaves the session as it was.  Edits of one
        session take turns (its row is locked), so none is lost and two cannot
        give two services one name.
        """
        with self._sessions.begin() as db:
            sqlite_write_lock(db)
            env = self.store.environment(db, ctx, env_id)
            session = self.store.config_session(db, ctx, env, session_id, editable=False,
                                                lock=True)
            if env.state in BUSY or session.state == "deploying":
                raise busy_error(db, env)
            session_allowed(ctx, env, session_id, session, editable=True)
            description = copy.deepcopy(session.description)
            old = description.get("services")
            old = old if isinstance(old, list) else []
            before = unit_counts(old)
            names = service_names(old)
            dangling = dangling_dependencies(old)
            twice = duplicate_ids(old)
            catalog = self.store.catalog_of(db, env.id)
            result = change(description, catalog)
            services = description.get("services")
            if not isinstance(services, list):
                raise BadRequest("the environment's services are not a list")
            refuse_taken_service_names(names, services)
            refuse_new_dangling_dependencies(dangling, services)
            refuse_new_duplicate_ids(twice, services)
            self.store.limits.check_services(env.id, before, services)
            if tree.depth(services) > tree.MAX_DEPTH:  # e.g. sub-path PUTs, deeper each time
                raise BadRequest(f"the services would nest more than {tree.MAX_DEPTH} levels "
                                 f"deep")
            session.description = description
            session.updated = utcnow()
            return result


def masked_at(services: list, segments: list[str], catalog: Catalog | None = None) -> Any:
    """The value at ``segments``, masked as a part of the whole list: masking goes
    by key, so ``/services/<id>/adminPassword`` alone must not come back in clear."""
    return tree.get(specs.masked_view(services, catalog), segments)
