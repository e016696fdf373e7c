"""The DSL functions; importing this package registers all of them."""
from fornace.conductor.dsl.functions import actions, hosts, model, rules, values  # noqa: F401
