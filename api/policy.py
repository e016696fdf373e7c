"""Who may do what: the API's access rules, as oslo.policy defaults in code.

Every route checks one rule (:func:`authorize`) against the caller's
credentials (:func:`credentials`, from the request's
:class:`~fornace.api.context.Context`) and a target holding the ``project_id``
the call acts on (the environment's tenant; the caller's own project for
lists and creations).  The defaults let a project's members change its
environments, its readers look at them, and only the *cloud admin* -- the
admin of Keystone's bootstrap ``admin`` project in the default domain -- act
on every project.  An admin role on any other project gives no reach
outside it.

Operators change a rule in a policy file (``[oslo_policy] policy_file``,
``policy.yaml`` in the configuration folders by default; without one the
defaults apply): ``etc/policy.yaml.sample`` lists every rule with its
default and what it guards (``oslopolicy-sample-generator --namespace
fornace``).  Noauth mode goes through the same rules: its callers are
members of the project their header names, never cloud admins.
"""
from __future__ import annotations

import dataclasses
import math
import threading
import time
from typing import Any, Callable

from oslo_config import cfg
from oslo_policy import policy

from fornace.api.errors import Forbidden
from fornace.api.context import Context

CLOUD_ADMIN = "cloud_admin"
OWNER = "owner"
READER = "reader"
WRITER = "writer"

_SCOPES = ["project"]   # Fornace's tokens are scoped to a project

BASE_RULES = [
    policy.RuleDefault(
        CLOUD_ADMIN, "role:admin and project_domain_id:default and project_name:admin",
        description="The cloud's administrator: the admin role in Keystone's bootstrap "
                    "'admin' project of the default domain.  Only they act on the "
                    "environments of every project (all_tenants, tenant=, another "
                    "project's environment, another user's session)."),
    policy.RuleDefault(
        OWNER, "project_id:%(project_id)s",
        description="The caller's project is the one the call acts on (the "
                    "environment's tenant)."),
    policy.RuleDefault(
        READER, f"rule:{CLOUD_ADMIN} or rule:{OWNER}",
        description="May look: anyone of the project, whatever their role (reader "
                    "included), and the cloud admin."),
    policy.RuleDefault(
        WRITER, f"rule:{CLOUD_ADMIN} or (rule:{OWNER} and (role:member or role:admin))",
        description="May change: members and admins of the project, and the cloud "
                    "admin.  A user with only the reader role may not."),
]


def _call(name: str, check: str, description: str, *operations: tuple[str, str],
          ) -> policy.DocumentedRuleDefault:
    return policy.DocumentedRuleDefault(
        name=name, check_str=check, description=description, scope_types=_SCOPES,
        operations=[{"path": path, "method": method} for method, path in operations])


_ENV = "/environments/{env_id}"
_SESSION = _ENV + "/sessions/{session_id}"
_SERVICES = _ENV + "/services{path}"
_JOB = _ENV + "/jobs/{job_id}"
_PACKAGE = "/packages/{package_id}"
_READ, _WRITE, _ADMIN = f"rule:{READER}", f"rule:{WRITER}", f"rule:{CLOUD_ADMIN}"

API_RULES = [
    _call("environment:list", _READ, "List the environments of one's project.",
          ("GET", "/environments")),
    _call("environment:list_all_tenants", _ADMIN,
          "List the environments of every project (?all_tenants=true: the target's "
          "project_id is empty) or of another one (?tenant=ID: it is that project).",
          ("GET", "/environments?all_tenants=true"), ("GET", "/environments?tenant={id}")),
    _call("environment:create", _WRITE, "Create an environment in one's project.",
          ("POST", "/environments")),
    _call("environment:show", _READ, "Show an environment and its services.",
          ("GET", _ENV)),
    _call("environment:update", _WRITE, "Rename an environment.", ("PUT", _ENV)),
    _call("environment:delete", _WRITE,
          "Delete an environment (tear it down, or forget it with abandon=true).",
          ("DELETE", _ENV)),
    _call("environment:last_status", _READ,
          "The latest report of each service and unit of the last deployment.",
          ("GET", _ENV + "/lastStatus")),
    _call("environment:topology", _READ, "The units, services and dependencies.",
          ("GET", _ENV + "/topology")),
    _call("environment:status", _READ, "The live status and node state of every unit.",
          ("GET", _ENV + "/status")),
    _call("environment:outputs", _READ, "Where the deployed services and units answer.",
          ("GET", _ENV + "/outputs")),
    _call("environment:model", _READ, "The object model a deployment is given (secrets "
          "masked), or the one a past job was given, or a part of it; why a workflow rule "
          "matches its units or not (it quotes the model's values).",
          ("GET", _ENV + "/model"), ("GET", _ENV + "/model/{path}"), ("GET", _ENV + "/why")),
    _call("environment:model_edit", _WRITE, "Edit a configuration session's object model "
          "with a JSON patch (its services and defaultNetworks).",
          ("PATCH", _ENV + "/model"), ("PATCH", _ENV + "/model/")),
    _call("session:configure", _WRITE, "Open a configuration session.",
          ("POST", _ENV + "/configure")),
    _call("session:show", _READ, "Show a configuration session.", ("GET", _SESSION)),
    _call("session:delete", _WRITE, "Discard a configuration session.",
          ("DELETE", _SESSION)),
    _call("session:deploy", _WRITE, "Deploy a configuration session (a deploy job).",
          ("POST", _SESSION + "/deploy")),
    _call("service:show", _READ, "Read the services, or a part of one.",
          ("GET", _SERVICES)),
    _call("service:create", _WRITE, "Add services (or items below one) in a session.",
          ("POST", _SERVICES)),
    _call("service:update", _WRITE, "Replace services (or a part of one) in a session.",
          ("PUT", _SERVICES)),
    _call("service:delete", _WRITE, "Remove services (or a part of one) in a session.",
          ("DELETE", _SERVICES)),
    _call("deployment:list", _READ,
          "List the deployments of an environment, or of one's project.",
          ("GET", _ENV + "/deployments"), ("GET", "/deployments")),
    _call("deployment:show", _READ, "The reports of a deployment.",
          ("GET", _ENV + "/deployments/{deployment_id}")),
    _call("type:list", _READ, "List the service types the API knows (?environment=ID: "
          "that environment's, with its pinned packages' types).",
          ("GET", "/types"), ("GET", "/types?environment={env_id}")),
    _call("type:show", _READ, "Show a service type: its create spec (JSON Schema), "
          "operations and form hints.",
          ("GET", "/types/{name}"), ("GET", "/types/{name}?environment={env_id}")),
    _call("job:run_action", _WRITE,
          "Start a lifecycle action (install, uninstall, check, heal, scale, "
          "execute_operation, plan).",
          ("POST", _ENV + "/actions/{name}")),
    _call("job:list", _READ, "List the jobs of an environment.", ("GET", _ENV + "/jobs")),
    _call("job:show", _READ, "Show a job with its tasks and their logs.", ("GET", _JOB)),
    _call("job:trace", _READ, "Which workflow rule fired on which object during a job, "
          "round by round.", ("GET", _JOB + "/trace")),
    _call("job:tasks", _READ, "The tasks of a job, or of an environment, as TSV.",
          ("GET", _JOB + "/tasks.tsv"), ("GET", _ENV + "/tasks.tsv")),
    _call("job:abandon", _WRITE, "Give up an environment's running job.",
          ("POST", _ENV + "/abandon")),
    _call("package:list", _READ, "List the public workflow packages and one's project's.",
          ("GET", "/packages")),
    _call("package:show", _READ, "Show a workflow package (manifest, files, digest) or "
          "download its archive.",
          ("GET", _PACKAGE), ("GET", _PACKAGE + "/download")),
    _call("package:upload", _WRITE, "Upload a workflow package to one's project (a public "
          "one, ?public=true: the cloud admin only).", ("POST", "/packages")),
    _call("package:delete", _WRITE, "Delete a workflow package no environment uses (a "
          "public one: the cloud admin only).", ("DELETE", _PACKAGE)),
    _call("package:transfer", _ADMIN, "Give a workflow package name to another project: "
          "from then on only that project uploads versions of it.",
          ("PUT", "/packages/names/{name}")),
    _call("environment:packages", _READ, "The workflow package versions an environment "
          "is pinned to, and the plan of moving it to another version.",
          ("GET", _ENV + "/packages"), ("GET", _ENV + "/packages/{name}/plan")),
    _call("environment:use_package", _WRITE, "Pin an environment to a workflow package "
          "version (or move it to another one), or unpin it.",
          ("PUT", _ENV + "/packages/{name}"), ("DELETE", _ENV + "/packages/{name}")),
    _call("dead_letter:list", _ADMIN, "List the messages from the conductor that could not "
          "be stored and were set aside (every project's, or one's with ?tenant=ID).",
          ("GET", "/dead-letters")),
]


def list_rules() -> list[policy.RuleDefault]:
    """Every rule and its default (the ``oslo.policy.policies`` entry point)."""
    return BASE_RULES + API_RULES


def enforcer(conf: cfg.ConfigOpts | None = None) -> policy.Enforcer:
    """An enforcer of :func:`list_rules`, overridden by ``conf``'s policy file
    (``[oslo_policy] policy_file``, looked for in its configuration folders;
    none found: the defaults).  Without ``conf``: the defaults only, whatever
    files lie around (tests, an app made without configuration)."""
    if conf is None:
        made = policy.Enforcer(cfg.ConfigOpts(), use_conf=False)
        made.set_rules({rule.name: rule.check for rule in list_rules()}, use_conf=False)
    else:
        made = policy.Enforcer(conf)
    made.register_defaults(list_rules())
    return made


def get_enforcer() -> policy.Enforcer:
    """The enforcer of oslo.policy's tools (``oslo.policy.enforcer`` entry point:
    oslopolicy-policy-generator, oslopolicy-checker), on the configuration
    they parsed (``--config-file``)."""
    return enforcer(cfg.CONF)


def credentials(ctx: Context) -> dict[str, Any]:
    """What the rules may test of the caller (``role:``, ``project_id:``...)."""
    return {"project_id": ctx.tenant_id, "user_id": ctx.user_id, "roles": sorted(ctx.roles),
            "project_name": ctx.project_name, "project_domain_id": ctx.project_domain_id}


class Policy:
    """The rules of one app: an enforcer whose answers are remembered.

    oslo.policy takes about 0.3 ms to evaluate a rule (it inspects every
    check's signature on each call) and a request asks twice (is the caller
    the cloud admin, may they do this), so each answer is kept for the same
    credentials, rule and target project until the rules change.  The policy
    file is looked at again -- reloaded if it changed -- at most every
    ``recheck_seconds``; rules set on the enforcer directly count at once.
    """

    MAX_REMEMBERED = 50_000

    def __init__(self, rules: policy.Enforcer, recheck_seconds: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.enforcer = rules
        self.recheck_seconds = recheck_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._answers: dict[tuple, bool] = {}
        self._checked = -math.inf
        self._seen: Any = None

    def allows(self, ctx: Context, action: str, project_id: str | None = None) -> bool:
        """Whether ``action`` is allowed to ``ctx`` on ``project_id`` (default: its own)."""
        project = ctx.tenant_id if project_id is None else project_id
        key = (action, project, ctx.tenant_id, ctx.user_id, ctx.roles, ctx.project_name,
               ctx.project_domain_id)
        rules = self._refresh()
        answer = self._answers.get(key)
        if answer is None:
            answer = bool(self.enforcer.authorize(action, {"project_id": project},
                                                  credentials(ctx)))
            with self._lock:
                if len(self._answers) >= self.MAX_REMEMBERED:
                    self._answers.clear()
                if self._seen is rules:     # not an answer of rules replaced meanwhile
                    self._answers[key] = answer
        return answer

    def authorize(self, ctx: Context, action: str, project_id: str | None = None) -> None:
        """Refuse (403, naming the rule) an ``action`` the policy does not allow."""
        if not self.allows(ctx, action, project_id):
            who = ctx.user_name or ctx.user_id
            where = ctx.project_name or ctx.tenant_id
            raise Forbidden(f"{action} is not allowed: the policy refuses it to user {who} "
                            f"of project {where}")

    def with_admin(self, ctx: Context) -> Context:
        """``ctx`` with ``is_admin`` as the policy says: whether the caller passes
        ``cloud_admin``, the one rule that reaches other projects' environments
        (the Store lets only them past its tenant check)."""
        is_admin = self.allows(ctx, CLOUD_ADMIN, "")
        return ctx if ctx.is_admin is is_admin else dataclasses.replace(ctx, is_admin=is_admin)

    def _refresh(self) -> Any:
        """Reload a changed policy file (at most every ``recheck_seconds``) and
        forget the answers of rules that changed; the rules in force."""
        now = self._clock()
        if now - self._checked >= self.recheck_seconds:
            with self._lock:
                if now - self._checked >= self.recheck_seconds:
                    self._checked = now
                    self.enforcer.load_rules()
        rules = self.enforcer.rules
        if rules is not self._seen:
            with self._lock:
                self._seen = rules
                self._answers.clear()
        return rules
