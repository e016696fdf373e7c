"""The real Heat side: python-heatclient against an OpenStack Heat endpoint.

Murano 0.2 semantics (see ``StackExecutor``): one merged template per round;
the stack ``e<envId>`` is created when absent, otherwise its current template
is fetched from Heat, the round's template is deep-merged into it (existing
resources stay) and the stack is updated; then the stack is polled (with a
doubling back-off) until no ``*_IN_PROGRESS`` status remains.  Anything but
``CREATE_COMPLETE`` / ``UPDATE_COMPLETE`` -- a failed status, a time-out, an
HTTP error -- is a :class:`StackFailure`.  ``remove`` fetches the current
template the same way, drops the resources (``cfn.remove_resources``)
and updates the stack with it (PATCH: the stack's parameters stay).

An optional resource registry (and ``files`` for provider templates) is sent
with every create and update, so the 0.2 templates can run on a Heat without
Nova (``AWS::EC2::Instance`` -> ``OS::Heat::None`` or a provider template).

Tokens and passwords are never logged.
"""
from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import time
from typing import Any, Callable, Iterator

from fornace.common import identity, jsonlimits
from fornace.conductor.executors.base import StackExecutor, StackFailure, StackRequest
from fornace.conductor.executors.cfn import merge, remove_resources

LOG = logging.getLogger(__name__)

SUCCESS = {"CREATE": "CREATE_COMPLETE", "UPDATE": "UPDATE_COMPLETE"}
VERSION_KEYS = ("AWSTemplateFormatVersion", "HeatTemplateFormatVersion",
                "heat_template_version")
# How many polls a finished-looking status that predates our call is ignored
# (a legacy, non-convergence engine may not have marked the stack yet).
STALE_POLLS = 3


def _heat_errors() -> tuple[type[BaseException], ...]:
    """Exceptions of heatclient/keystoneauth that mean "Heat said no"."""
    from heatclient import exc as heat_exc
    from keystoneauth1 import exceptions as ks_exc
    return (heat_exc.BaseException, ks_exc.ClientException)


def _not_found() -> type[BaseException]:
    from heatclient import exc as heat_exc
    return heat_exc.HTTPNotFound


def _error_text(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text[len("ERROR: "):] if text.startswith("ERROR: ") else text


@contextlib.contextmanager
def _refusals(stack_name: str) -> Iterator[None]:
    """What Heat (or Keystone) refuses inside the block, as a StackFailure of the stack."""
    try:
        yield
    except StackFailure:
        raise
    except _heat_errors() as exc:
        text = _error_text(exc)
        raise StackFailure(f"stack {stack_name}: {text}", text) from None


def load_environment(value: str | dict | None) -> tuple[dict[str, Any], dict[str, str]]:
    """``[heat] resource_registry``: a JSON string or a YAML/JSON env file path.

    A JSON object is the resource registry itself (or a whole environment when
    it has a ``resource_registry`` key).  A file is a Heat environment file;
    provider templates it names by relative path are read (relative to the
    file) into ``files``, as ``heat stack-create -e`` does.
    Returns ``(environment, files)``.
    """
    if value is None or value == "" or value == {}:
        return {}, {}
    if isinstance(value, dict):
        data: Any = value
    else:
        text = value.strip()
        if text.startswith("{"):
            try:
                data = jsonlimits.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"[heat] resource_registry: invalid JSON: {exc}") from None
            except jsonlimits.JsonLimitError as exc:
                raise ValueError(f"[heat] resource_registry: {exc}") from None
        else:
            path = os.path.abspath(os.path.expanduser(text))
            if not os.path.isfile(path):
                raise ValueError(f"[heat] resource_registry: no such file {path}")
            from heatclient.common import template_utils
            files, environment = template_utils.process_environment_and_files(env_path=path)
            return dict(environment or {}), dict(files or {})
    if not isinstance(data, dict):
        raise ValueError("[heat] resource_registry must be a JSON object")
    if "resource_registry" in data or "parameter_defaults" in data:
        return copy.deepcopy(data), {}
    return {"resource_registry": copy.deepcopy(data)}, {}


class HeatStacks(StackExecutor):
    """Stacks on a real Heat through a python-heatclient ``Client``."""

    def __init__(self, client: Any, resource_registry: dict[str, Any] | None = None,
                 files: dict[str, str] | None = None, poll_start: float = 0.5,
                 poll_max: float = 5.0, timeout: float = 1800.0, *,
                 environment: dict[str, Any] | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.environment: dict[str, Any] = copy.deepcopy(environment or {})
        if resource_registry:
            self.environment.setdefault("resource_registry", {}).update(resource_registry)
        self.files = dict(files or {})
        self.poll_start = max(float(poll_start), 0.01)
        self.poll_max = max(float(poll_max), self.poll_start)
        self.timeout = float(timeout)  # 0 or less: wait without limit (as 0.2 did)
        self._sleep = sleep
        self._clock = clock

    # -- construction from configuration ----------------------------------
    @classmethod
    def factory(cls, conf: Any) -> Callable[[Any], "HeatStacks"]:
        """A client per task: Heat is called for the task's user (its trust or token),
        in the environment's region (the model's ``region``) when it has one."""
        return lambda task: cls.from_config(conf, task.token, task.tenant_id,
                                            getattr(task, "trust_id", None),
                                            region=task_region(task))

    @classmethod
    def from_config(cls, conf: Any, token: str | None = None, tenant_id: str | None = None,
                    trust_id: str | None = None, region: str | None = None) -> "HeatStacks":
        """A client from ``[heat]`` acting as :func:`heat_session` says.

        ``region``: the Heat of that region of the catalog (the environment's
        region), instead of ``[heat] region_name``.

        Endpoint: ``[heat] url`` (``%(tenant_id)s`` is replaced by the task's
        tenant), else the ``orchestration`` entry of the catalog of the token
        the session gets.  Without any Keystone the URL is used directly with
        the task's token (or none: a no-auth Heat).
        """
        identity.ensure(conf, "heat")   # its TLS options
        heat = conf.heat
        url = heat.url
        if url and "%(tenant_id)s" in url:
            if not tenant_id:
                raise ValueError("[heat] url needs %(tenant_id)s but the task has no tenant")
            url = url.replace("%(tenant_id)s", tenant_id)
        environment, files = load_environment(heat.resource_registry)
        options = dict(poll_start=heat.poll_start, poll_max=heat.poll_max,
                       timeout=heat.stack_timeout, environment=environment, files=files)
        from heatclient import client as heat_client
        session = heat_session(conf, token, tenant_id, trust_id)
        if session is None:
            if not url:
                raise ValueError("[heat] needs url, or a Keystone to find Heat in its catalog "
                                 "([keystone_authtoken] with trusts, or [heat] auth_type "
                                 "and auth_url)")
            client = heat_client.Client("1", endpoint=url, token=token or "",
                                        insecure=heat.insecure, ca_file=heat.cafile)
            return cls(client, **options)
        region_name = region or heat.region_name
        region = {"region_name": region_name} if region_name else {}
        if not url:
            try:
                url = session.get_endpoint(service_type="orchestration",
                                           interface=heat.interface, **region)
            except Exception as exc:   # keystoneauth1: Keystone refused or unreachable
                raise ValueError(f"cannot find Heat in the Keystone catalog: "
                                 f"{_error_text(exc)}") from None
            if not url:
                raise ValueError("no orchestration endpoint in the Keystone catalog "
                                 f"(interface {heat.interface}"
                                 + (f", region {region_name})" if region else ")"))
        client = heat_client.Client("1", session=session, endpoint=url,
                                    interface=heat.interface, **region)
        return cls(client, **options)

    # -- StackExecutor ----------------------------------------------------
    def apply(self, request: StackRequest) -> dict[str, Any]:
        name = request.stack_name
        deadline = self._deadline()
        with _refusals(name):
            stack = self._find(name)
            if stack is None:
                stack_id = self._create(request)
                final = self._wait(stack_id, "CREATE", None, deadline)
                return self._outputs(name, stack_id, final, "CREATE")
            stack_id, before = self._ready(stack, deadline)
            current = self.client.stacks.template(stack_id) or {}
            template = self._versioned(merge(current, copy.deepcopy(request.template)))
            LOG.info("updating stack %s (%d resources)", name,
                     len(template.get("Resources") or {}))
            self.client.stacks.update(
                stack_id, template=template, parameters=dict(request.parameters),
                existing=False, disable_rollback=True, **self._extras())
            final = self._wait(stack_id, "UPDATE", before, deadline)
            return self._outputs(name, stack_id, final, "UPDATE")

    def remove(self, stack_name: str, resources: list[str]) -> dict[str, Any]:
        """Update the stack to its current template less the resources.

        A PATCH update (``existing=True``): Heat keeps the stack's parameters,
        which the caller of ``remove`` does not have.
        """
        deadline = self._deadline()
        with _refusals(stack_name):
            stack = self._find(stack_name)
            if stack is None:
                return {}
            stack_id, before = self._ready(stack, deadline)
            current = self.client.stacks.template(stack_id) or {}
            removal = remove_resources(current, resources, stack_name)
            if removal.empty:
                LOG.info("stack %s: no resource left; deleting it", stack_name)
                self.delete(stack_name)
                return {}
            if not removal.changed:
                return _outputs_of(self.client.stacks.get(stack_id))
            LOG.info("stack %s: removing %s", stack_name, ", ".join(removal.resources))
            self.client.stacks.update(
                stack_id, template=self._versioned(removal.template), existing=True,
                disable_rollback=True, **self._extras())
            final = self._wait(stack_id, "UPDATE", before, deadline)
            return self._outputs(stack_name, stack_id, final, "UPDATE")

    def stack_names(self) -> list[str]:
        with _refusals("(list)"):
            return sorted(stack.stack_name for stack in self.client.stacks.list())

    def describe(self, stack_name: str) -> str:
        with _refusals(stack_name):
            stack = self._find(stack_name)
        return f"Heat stack {stack.id}, {stack.stack_status}" if stack is not None else "gone"

    def delete(self, stack_name: str) -> None:
        deadline = self._deadline()
        with _refusals(stack_name):
            stack = self._find(stack_name)
            if stack is None or stack.stack_status == "DELETE_COMPLETE":
                return
            stack_id = f"{stack.stack_name}/{stack.id}"
            LOG.info("deleting stack %s", stack_name)
            self.client.stacks.delete(stack_id)
            final = self._wait(stack_id, "DELETE", None, deadline, gone_ok=True)
        if final is not None and final.stack_status != "DELETE_COMPLETE":
            reason = getattr(final, "stack_status_reason", "") or final.stack_status
            raise StackFailure(f"stack {stack_name} ended {final.stack_status}: {reason}",
                               reason)

    # -- helpers ----------------------------------------------------------
    def _create(self, request: StackRequest) -> str:
        """Start creating the stack; its ``name/id``."""
        template = self._versioned(copy.deepcopy(request.template))
        LOG.info("creating stack %s (%d resources)", request.stack_name,
                 len(template.get("Resources") or {}))
        created = self.client.stacks.create(
            stack_name=request.stack_name, template=template,
            parameters=dict(request.parameters), disable_rollback=True, **self._extras())
        return f"{request.stack_name}/{created['stack']['id']}"

    def _ready(self, stack: Any, deadline: float) -> tuple[str, tuple]:
        """``name/id`` of a stack no longer in progress, and its status before our update.

        Heat refuses to update a stack while an action runs on it.
        """
        stack_id = f"{stack.stack_name}/{stack.id}"
        if stack.stack_status.endswith("_IN_PROGRESS"):
            LOG.info("stack %s is %s; waiting before updating", stack.stack_name,
                     stack.stack_status)
            stack = self._wait(stack_id, None, None, deadline)
        return stack_id, (stack.stack_status, getattr(stack, "updated_time", None))

    def _outputs(self, name: str, stack_id: str, final: Any, expected: str) -> dict[str, Any]:
        """The outputs of a stack whose create/update ended; StackFailure unless it succeeded."""
        if final.stack_status != SUCCESS[expected]:
            reason = getattr(final, "stack_status_reason", "") or final.stack_status
            raise StackFailure(f"stack {name} ended {final.stack_status}: {reason}", reason)
        return _outputs_of(self.client.stacks.get(stack_id))

    def _deadline(self) -> float:
        return self._clock() + self.timeout if self.timeout > 0 else float("inf")

    def _extras(self) -> dict[str, Any]:
        extras: dict[str, Any] = {}
        if self.environment:
            extras["environment"] = copy.deepcopy(self.environment)
        if self.files:
            extras["files"] = dict(self.files)
        return extras

    @staticmethod
    def _versioned(template: dict[str, Any]) -> dict[str, Any]:
        """Heat refuses a template without a format version; 0.2 ones are CFN."""
        if not any(key in template for key in VERSION_KEYS):
            template = {"AWSTemplateFormatVersion": "2010-09-09", **template}
        return template

    def _find(self, name: str) -> Any:
        try:
            stack = self.client.stacks.get(name, resolve_outputs=False)
        except _not_found():
            return None
        return None if stack.stack_status == "DELETE_COMPLETE" else stack

    def _wait(self, stack_id: str, expected: str | None, before: tuple | None,
              deadline: float, gone_ok: bool = False) -> Any:
        """Poll until the stack leaves ``*_IN_PROGRESS`` (None: gone, if ok)."""
        delay = self.poll_start
        stale = STALE_POLLS
        while True:
            try:
                stack = self.client.stacks.get(stack_id, resolve_outputs=False)
            except _not_found():
                if gone_ok:
                    return None
                raise
            status = stack.stack_status
            if not status.endswith("_IN_PROGRESS"):
                # a final status left over from before our call: not ours yet
                leftover = expected is not None and (
                    not status.startswith(expected + "_")
                    or (before is not None
                        and (status, getattr(stack, "updated_time", None)) == before))
                if not leftover or stale <= 0:
                    return stack
                stale -= 1
            remaining = deadline - self._clock()
            if remaining <= 0:
                name = stack_id.split("/")[0]
                raise StackFailure(
                    f"timed out after {self.timeout:g}s waiting for stack {name} "
                    f"(status {status})", f"timeout in {status}")
            self._sleep(min(delay, remaining))
            delay = min(delay * 2, self.poll_max)


def _outputs_of(stack: Any) -> dict[str, Any]:
    """Output key -> value of a stack fetched with its outputs resolved."""
    outputs = getattr(stack, "outputs", None) or []
    return {o["output_key"]: o.get("output_value") for o in outputs
            if isinstance(o, dict) and "output_key" in o}


def task_region(task: Any) -> str | None:
    """The region the API put in the task's object model (the environment's,
    given at its creation), or None."""
    model = getattr(task, "model", None)
    region = model.get("region") if isinstance(model, dict) else None
    return region if isinstance(region, str) and region.strip() else None


def heat_session(conf: Any, token: str | None = None, tenant_id: str | None = None,
                 trust_id: str | None = None) -> Any:
    """The keystoneauth1 session a task acts on Heat with, first that applies:

    1. its trust (contract 1.6): the ``[keystone_authtoken]`` service user scoped
       to the trust -- tokens that act for the environment's user and are renewed as
       they expire, however long the deployment, heal or scale;
    2. its user's token, rescoped to the task's project (Murano 0.2 tasks;
       it dies with the token);
    3. the ``[heat]`` credentials (``auth_type`` set): a service account;
    4. None: no Keystone at all (``[heat] url`` with the token as is).

    ``[heat]`` TLS options (cafile, insecure...) apply.
    """
    auth: Any = None
    if trust_id:
        if not identity.configured(conf):
            raise ValueError("the task acts through a Keystone trust but the conductor has "
                             "no [keystone_authtoken] service user (auth_type, auth_url, username, "
                             "password...)")
        auth = identity.trust_auth(conf, trust_id)
    elif token and identity.configured(conf):
        auth = identity.token_auth(conf, token, tenant_id)
    elif identity.plugin_options(conf, "heat") is not None:
        auth = identity.auth_of(conf, "heat")
    if auth is None:
        return None
    return identity.session_of(conf, "heat", auth)
