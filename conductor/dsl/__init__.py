"""The DSL functions; importing this package registers all of them."""
from . import actions, hosts, model, rules, values  # noqa: F401
