"""Why a rule of an environment's workflows matches a unit, or not.

``GET /environments/{id}/why?rule=RULE[&unit=UNIT]`` (``fornace why``) and the
dashboard's rule page ask the same thing: the rule is looked for in the
workflow files in effect for the environment
(:class:`~fornace.api.packages.workflows.WorkflowFiles`, the data folder and
its pinned packages) and evaluated on the environment's model by the
explanation the command that starts the API hands over
(:data:`~fornace.common.packages.checks.RuleExplain`; the API may not import
the conductor).  The answer quotes the model's values: it is masked as the
model route's answer is.
"""
from __future__ import annotations

from typing import Any

from fornace.api.context import Context
from fornace.api.errors import BadRequest, NotFound, Unavailable
from fornace.api.packages.workflows import WorkflowFiles
from fornace.api.stores.store import Store
from fornace.common.errors import UnknownName
from fornace.common.secrets import find_secrets, mask_text, masked

MAX_NAME = 512     # characters of a rule's or unit's name asked for


def explain_rule(store: Store, files: WorkflowFiles | None, ctx: Context, env_id: str,
                 rule: str, unit: str | None = None) -> dict[str, Any]:
    """The explanation (see the module's docstring); 404 naming close names for a
    rule or unit that names nothing, 400 for an empty or overlong name, 503
    when this API was started without the explanation."""
    for what, value in (("rule", rule), ("unit", unit)):
        if value is not None and (not value.strip() or len(value) > MAX_NAME):
            raise BadRequest(f"{what} must be a name of 1 to {MAX_NAME} characters")
    if files is None or files.explain is None:
        raise Unavailable("rule explanations are unavailable: this API was started "
                          "without the workflow engine's explanation")
    with store.sessions() as db:
        env = store.environment(db, ctx, env_id)
        keys = store.secret_keys(db, env.id)
        model = env.description
        catalog = store.catalog_of(db, env.id)
        environment = {"id": env.id, "name": env.name}
    secrets = find_secrets(model, keys=keys)
    paths = [found.path for found in files.listing(environment["id"]).files]
    try:
        answer = files.explain(paths, model, rule.strip(), unit, catalog)
    except UnknownName as exc:
        raise NotFound(mask_text(str(exc), secrets),
                       close=[mask_text(name, secrets) for name in exc.close]) from None
    answer["environment"] = environment
    return masked(answer, secrets, keys=keys)

