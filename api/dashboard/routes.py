"""The dashboard's pages and form posts (the login's are in ``loginroutes``).

GET routes render pages (and ``.../live`` JSON for the progress script);
lists take their filter and page as query parameters.  POST routes check the
form token, call the Store or Jobs, and redirect (Post/Redirect/Get) with a
message -- except the service and action forms, which come back with their
errors shown at the fields, and an action that removes what runs, which
first comes back as a confirmation page posting the same values again.
What removes things is reached through a confirmation page (deleting an
environment, removing a service: a GET page whose form POSTs).
"""
from __future__ import annotations

import functools
from typing import Any, Callable

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from fornace.api import specs
from fornace.api.dashboard import (actionform, csrf, display, serviceform, traceview, urls,
                                   views)
from fornace.api.dashboard.formdata import read_form
from fornace.api.dashboard.access import caller
from fornace.api.dashboard.pages import fragment, redirect, render
from fornace.api.dashboard.sessions import ensure_session, open_session
from fornace.api.errors import ApiError, BadRequest, NotFound, Unauthorized
from fornace.api.stores.jobs import Jobs
from fornace.api.routing import EnvironmentCreate, flag, run
from fornace.api.stores.store import Store

router = APIRouter()
_run = run   # a request that finds a connection dead is run once more


def _store(request: Request) -> Store:
    return request.app.state.store


async def _catalog(request: Request, env_id: str) -> Any:
    """The environment's type catalog (with its pinned packages' types); the
    caller was allowed to see the environment already."""
    return await _run(_store(request).environment_catalog, env_id)


def _jobs(request: Request) -> Jobs:
    return request.app.state.jobs


def _env_path(env_id: str) -> str:
    return urls.path("environments", env_id)


async def _attempt(request: Request, back: str, done: str, call: Callable, *args: Any,
                   live: bool = False) -> Response:
    """Run a change; back to ``back`` with ``done`` (``live``: it started a job),
    or with the API's error message."""
    try:
        await _run(call, *args)
    except Unauthorized:
        raise
    except ApiError as exc:
        return redirect(request, back, exc.message, "error")
    return redirect(request, back, done, live=live)


def _live(request: Request, template: str, values: dict[str, Any]) -> JSONResponse:
    """What the progress script polls: a region's new HTML, whether to go on
    (``values["busy"]``), the server's time and how the page's job ended
    (``values["outcome"]``: what replaces a "started" message)."""
    response = JSONResponse({"html": fragment(request, template, **values),
                             "busy": bool(values["busy"]), "at": display.now(),
                             "outcome": values.get("outcome")},
                            headers={"Cache-Control": "no-store"})
    csrf.keep(request, response)   # the region's forms carry the session's token
    return response


# -- environments ----------------------------------------------------------------------

def _list_params(request: Request, *names: str) -> dict[str, str | None]:
    """The filter and page query parameters of a list."""
    return {name: request.query_params.get(name) for name in names}


def _env_list_args(request: Request) -> dict[str, str | None]:
    params = _list_params(request, "q", "status", "page", "per_page")
    params["query"] = params.pop("q")
    return params


async def _environment_list(request: Request) -> dict[str, Any]:
    """The environments page's values: the user's project, or with
    ``?all_tenants=1`` every project (for whom the policy allows it: 403 else)."""
    ctx = await caller(request, "environment:list")
    rules = request.app.state.policy
    every = flag(request.query_params.get("all_tenants"))
    if every:
        rules.authorize(ctx, "environment:list_all_tenants", "")
    page = await _run(lambda: views.environment_rows(_store(request), _jobs(request), ctx,
                                                     every_tenant=every,
                                                     **_env_list_args(request)))
    return {**page, "may_list_all": rules.allows(ctx, "environment:list_all_tenants", "")}


@router.get("/")
async def environments(request: Request) -> Response:
    return render(request, "environments.html", **await _environment_list(request))


@router.get("/live")
async def environments_live(request: Request) -> Response:
    return _live(request, "_environments.html", await _environment_list(request))


@router.post("/environments")
async def create_environment(request: Request) -> Response:
    ctx = await caller(request, "environment:create")
    form = await read_form(request)
    region = (form.get("region") or "").strip() or None   # empty: the conductor's default
    try:
        body = EnvironmentCreate(name=form.get("name"), region=region)
    except ValidationError as exc:
        field = "region" if exc.errors()[0]["loc"][:1] == ("region",) else "name"
        problem = "; ".join(e["msg"] for e in exc.errors() if e["loc"][:1] == (field,))
        return redirect(request, "/", f"The environment {field} is not valid: {problem}",
                        "error")
    name = body.name.strip()
    env = await _run(_store(request).environments.create, ctx, name, body.region)
    where = f" in region {body.region}" if body.region else ""
    return redirect(request, _env_path(env["id"]), f"Environment {name} created{where}.")


@router.get("/environments/{env_id}")
async def environment(env_id: str, request: Request) -> Response:
    ctx = await caller(request, "environment:show", env_id=env_id)
    page = await _run(views.environment_overview, _store(request), _jobs(request), ctx, env_id)
    return render(request, "environment.html", **page)


@router.get("/environments/{env_id}/live")
async def environment_live(env_id: str, request: Request) -> Response:
    ctx = await caller(request, "environment:show", env_id=env_id)
    page = await _run(views.environment_overview, _store(request), _jobs(request), ctx, env_id)
    return _live(request, "_environment.html", page)


def _back(form: Any, env_id: str) -> str:
    """Where a button of the list or of the environment page returns to."""
    return "/" if form.get("back") == "list" else _env_path(env_id)


@router.post("/environments/{env_id}/deploy")
async def deploy(env_id: str, request: Request) -> Response:
    ctx = await caller(request, "session:deploy", "session:configure", env_id=env_id)
    form = await read_form(request)
    detection = form.get("change_detection") or None
    store = _store(request)

    def start() -> None:
        store.config_sessions.deploy(ctx, env_id, ensure_session(store, ctx, env_id), detection)
    return await _attempt(request, _back(form, env_id), "Deployment started.", start,
                          live=True)


@router.post("/environments/{env_id}/abandon")
async def abandon(env_id: str, request: Request) -> Response:
    ctx = await caller(request, "job:abandon", env_id=env_id)
    form = await read_form(request)
    return await _attempt(request, _back(form, env_id), "The running job was abandoned.",
                          _jobs(request).abandon, ctx, env_id)


@router.get("/environments/{env_id}/delete")
async def confirm_delete(env_id: str, request: Request) -> Response:
    ctx = await caller(request, "environment:delete", env_id=env_id)
    page = await _run(views.deletion, _store(request), _jobs(request), ctx, env_id)
    return render(request, "confirm_delete.html", **page)


@router.post("/environments/{env_id}/delete")
async def delete_environment(env_id: str, request: Request) -> Response:
    ctx = await caller(request, "environment:delete", env_id=env_id)
    form = await read_form(request)
    forget = form.get("abandon") == "true"
    try:   # gone: never deployed, or forgotten
        gone = await _run(_store(request).environments.delete, ctx, env_id, forget)
    except Unauthorized:
        raise
    except ApiError as exc:
        return redirect(request, _env_path(env_id), exc.message, "error")
    if forget:
        return redirect(request, "/", "Environment removed without tearing it down.")
    if gone:
        return redirect(request, "/", "Environment deleted (it was never deployed).")
    return redirect(request, "/", "Environment deletion started.", live=True)


@router.post("/environments/{env_id}/session/discard")
async def discard_session(env_id: str, request: Request) -> Response:
    ctx = await caller(request, "session:delete", env_id=env_id)
    await read_form(request)
    store = _store(request)

    def discard() -> None:
        session = open_session(store, ctx, env_id)
        if session is None:
            raise BadRequest("there are no pending changes to discard")
        store.config_sessions.delete(ctx, env_id, session["id"])
    return await _attempt(request, _env_path(env_id), "Pending changes discarded.", discard)


# -- services ----------------------------------------------------------------------------

def _service_page(request: Request, env: dict[str, Any], form: serviceform.ServiceForm,
                  service_id: str | None = None, status: int = 200) -> Response:
    return render(request, "service_form.html", status=status, env=env, form=form,
                  service_id=service_id)


async def _form_context(request: Request, ctx: Any, env_id: str, exclude: str | None = None,
                        ) -> tuple[dict[str, Any], list[serviceform.ServiceChoice]]:
    """The environment and the services a service of it may depend on."""
    store = _store(request)

    def load() -> tuple[dict[str, Any], list[serviceform.ServiceChoice]]:
        return (store.environments.get(ctx, env_id),
                views.service_choices(store, ctx, env_id, exclude))
    return await _run(load)


@router.get("/environments/{env_id}/services/new")
async def new_service(env_id: str, request: Request,
                      type_name: str = Query("", alias="type")) -> Response:
    ctx = await caller(request, "service:create", env_id=env_id)
    env, others = await _form_context(request, ctx, env_id)
    catalog = await _catalog(request, env_id)
    spec = serviceform.spec_of(type_name, catalog)
    if spec is None:
        return render(request, "choose_type.html", env=env,
                      types=serviceform.type_choices(catalog))
    return _service_page(request, env, serviceform.new_form(spec, others))


@router.post("/environments/{env_id}/services/new")
async def add_service(env_id: str, request: Request) -> Response:
    ctx = await caller(request, "service:create", "session:configure", env_id=env_id)
    form = await read_form(request)
    store = _store(request)
    env, others = await _form_context(request, ctx, env_id)
    catalog = await _catalog(request, env_id)
    spec = serviceform.spec_of(form.get("type"), catalog)
    if spec is None:
        raise BadRequest(f"unknown service type {form.get('type')[:80]!r}")
    service, errors = serviceform.read_service(spec, form, None, others)
    # off the event loop: the type's schema (its patterns) may come from a package
    errors.update(await _run(
        serviceform.problems, spec, service,
        functools.partial(specs.validate_create, catalog=catalog), errors))

    def save() -> Any:
        session_id = ensure_session(store, ctx, env_id)
        return store.services.post(ctx, env_id, "/", service, session_id)
    return await _save_service(request, env, spec, form, None, others, errors, save)


async def _save_service(request: Request, env: dict[str, Any], spec: specs.TypeSpec,
                        form: Any, stored: dict[str, Any] | None,
                        others: list[serviceform.ServiceChoice],
                        errors: dict[str, str], save: Callable[[], Any]) -> Response:
    """Store the service, or show the form again as it was filled in, with
    every error at its field."""
    if not errors:
        try:
            saved = await _run(save)
        except Unauthorized:
            raise
        except ApiError as exc:
            errors = {serviceform.api_error_input(exc): exc.message}
        else:
            return redirect(request, _env_path(env["id"]),
                            f"Service {saved.get('name') or saved.get('id')} saved in the "
                            f"session: deploy to apply it.")
    again = serviceform.submitted_form(spec, form, stored, errors, others)
    return _service_page(request, env, again, (stored or {}).get("id"), status=400)


async def _stored_service(request: Request, ctx: Any, env_id: str,
                          service_id: str) -> tuple[dict[str, Any], dict[str, Any],
                                                    specs.TypeSpec]:
    """The environment, the service as the caller sees it (masked) and its type."""
    store = _store(request)

    def load() -> tuple[dict[str, Any], dict[str, Any]]:
        session = open_session(store, ctx, env_id)
        env = store.environments.get(ctx, env_id)
        service = store.services.get(ctx, env_id, "/" + service_id,
                                     session["id"] if session else None)
        return env, service
    env, service = await _run(load)
    if not isinstance(service, dict):
        raise NotFound(f"service {service_id} not found")
    spec = serviceform.spec_of(str(service.get("type")), await _catalog(request, env_id))
    if spec is None:
        raise BadRequest(f"services of type {str(service.get('type'))[:80]!r} cannot be "
                         f"edited from the dashboard")
    return env, service, spec


@router.get("/environments/{env_id}/services/{service_id}/edit")
async def edit_service(env_id: str, service_id: str, request: Request) -> Response:
    ctx = await caller(request, "service:update", env_id=env_id)
    env, service, spec = await _stored_service(request, ctx, env_id, service_id)
    _, others = await _form_context(request, ctx, env_id, service_id)
    return _service_page(request, env, serviceform.stored_form(spec, service, others),
                         service_id)


@router.post("/environments/{env_id}/services/{service_id}/edit")
async def update_service(env_id: str, service_id: str, request: Request) -> Response:
    ctx = await caller(request, "service:update", "session:configure", env_id=env_id)
    form = await read_form(request)
    env, stored, spec = await _stored_service(request, ctx, env_id, service_id)
    _, others = await _form_context(request, ctx, env_id, service_id)
    service, errors = serviceform.read_service(spec, form, stored, others)
    store = _store(request)
    catalog = await _catalog(request, env_id)
    errors.update(await _run(
        serviceform.problems, spec, service,
        functools.partial(specs.validate_update, catalog=catalog), errors))

    def save() -> Any:
        session_id = ensure_session(store, ctx, env_id)
        return store.services.put(ctx, env_id, "/" + service_id, service, session_id)
    return await _save_service(request, env, spec, form, stored, others, errors, save)


@router.get("/environments/{env_id}/services/{service_id}/delete")
async def confirm_remove_service(env_id: str, service_id: str, request: Request) -> Response:
    ctx = await caller(request, "service:delete", env_id=env_id)
    page = await _run(views.removal, _store(request), ctx, env_id, service_id)
    return render(request, "confirm_remove.html", **page)


@router.post("/environments/{env_id}/services/{service_id}/delete")
async def remove_service(env_id: str, service_id: str, request: Request) -> Response:
    ctx = await caller(request, "service:delete", "session:configure", env_id=env_id)
    await read_form(request)
    store = _store(request)

    def remove() -> None:
        session_id = ensure_session(store, ctx, env_id)
        store.services.delete(ctx, env_id, "/" + service_id, session_id)
    return await _attempt(request, _env_path(env_id),
                          "Service removed in the session: deploy to apply it.", remove)


# -- actions and jobs ---------------------------------------------------------------------

@router.get("/environments/{env_id}/actions")
async def choose_action(env_id: str, request: Request) -> Response:
    ctx = await caller(request, "job:run_action", env_id=env_id)
    env = await _run(_store(request).environments.get, ctx, env_id)
    return render(request, "choose_action.html", env=env, actions=actionform.actions())


def _known_action(name: str) -> None:
    if not actionform.known(name):
        names = ", ".join(n for n, _ in actionform.actions())
        raise NotFound(f"unknown action {name[:80]!r}: the actions are {names}")


@router.get("/environments/{env_id}/actions/{name}")
async def action_form(env_id: str, name: str, request: Request) -> Response:
    ctx = await caller(request, "job:run_action", env_id=env_id)
    _known_action(name)
    env = await _run(_store(request).environments.get, ctx, env_id)
    params = actionform.params_of(name, env, await _catalog(request, env_id))
    return render(request, "action_form.html", env=env, action=name, params=params,
                  doc=actionform.DESCRIPTIONS.get(name, ""), error=None)


@router.post("/environments/{env_id}/actions/{name}")
async def run_action(env_id: str, name: str, request: Request) -> Response:
    ctx = await caller(request, "job:run_action", env_id=env_id)
    _known_action(name)
    form = await read_form(request)
    env = await _run(_store(request).environments.get, ctx, env_id)
    catalog = await _catalog(request, env_id)
    values, params, errors = actionform.read_params(name, form, env, catalog)
    status = 400
    ask = None if errors else actionform.confirmation(name, values, env, catalog)
    if ask is not None and form.get(actionform.CONFIRMED) != "yes":
        return render(request, "confirm_action.html", env=env, action=name, confirm=ask,
                      pairs=actionform.resubmitted(params), confirmed=actionform.CONFIRMED)
    if not errors:
        try:
            job = await _run(_jobs(request).run_action, ctx, env_id, name, values)
        except Unauthorized:
            raise
        except ApiError as exc:
            errors = {actionform.error_param(exc.message, params): exc.message}
            status = exc.status
        else:
            return redirect(request, urls.path("environments", env_id, "jobs", job["id"]),
                            f"Job {name} started.", live=True)
    for param in params:
        param.error = errors.get(param.name)
    return render(request, "action_form.html", status=status, env=env, action=name,
                  params=params, doc=actionform.DESCRIPTIONS.get(name, ""),
                  error=errors.get(actionform.GENERAL))


@router.get("/environments/{env_id}/jobs/{job_id}")
async def job(env_id: str, job_id: str, request: Request) -> Response:
    ctx = await caller(request, "job:show", env_id=env_id)
    page = await _run(views.job_page, _store(request), _jobs(request), ctx, env_id, job_id)
    return render(request, "job.html", **await _task_rules(request, ctx, page))


async def _task_rules(request: Request, ctx: Any, page: dict[str, Any]) -> dict[str, Any]:
    """The job page's values with ``task_rules`` (change id -> the rule that queued
    the task's action) once the job ended, for whom the policy shows traces."""
    page["task_rules"] = {}
    job, env = page["job"], page["env"]
    if job["finished"] is not None and request.app.state.policy.allows(
            ctx, "job:trace", env.get("tenant_id")):
        document = await _run(traceview.trace_of, _jobs(request), ctx, env["id"], job["id"])
        if document is not None:
            page["task_rules"] = traceview.rules_of_tasks(document)
    return page


@router.get("/environments/{env_id}/jobs/{job_id}/trace")
async def job_trace(env_id: str, job_id: str, request: Request) -> Response:
    ctx = await caller(request, "job:show", "job:trace", env_id=env_id)
    page = await _run(traceview.trace_page, _store(request), _jobs(request), ctx, env_id,
                      job_id)
    return render(request, "trace.html", **page)


@router.get("/environments/{env_id}/jobs/{job_id}/live")
async def job_live(env_id: str, job_id: str, request: Request) -> Response:
    ctx = await caller(request, "job:show", env_id=env_id)
    page = await _run(views.job_page, _store(request), _jobs(request), ctx, env_id, job_id)
    return _live(request, "_job.html", await _task_rules(request, ctx, page))


@router.get("/deployments")
async def deployments(request: Request) -> Response:
    ctx = await caller(request, "job:list")
    params = _list_params(request, "kind", "env", "q", "state", "page", "per_page")
    page = await _run(lambda: views.all_jobs(
        _store(request), _jobs(request), ctx, kind=params["kind"], env_id=params["env"],
        query=params["q"], state=params["state"], page=params["page"],
        per_page=params["per_page"]))
    return render(request, "deployments.html", **page)
