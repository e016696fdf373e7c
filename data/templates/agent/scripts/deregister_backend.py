"""Deregister a farm unit from the farm's load balancer (a FormatVersion 2.0 plan script).

The counterpart of ``register_backend.py``, run on the load balancer's unit
before a farm unit leaves (scale in, heal, uninstall).  Argument (the JSON
object on stdin; also an environment variable): ``name`` (the unit's
hostname, the name it was registered under).  Removes that backend from
``$FORNACE_WORK_DIR/proxy/backends.json`` under the same lock as
``register_backend.py`` and replaces the file atomically; the running proxy
re-reads it on its next request, so no request goes to the unit after this
script returned (requests it already forwards are finished).  A unit that is
not registered, or a unit with no load balancer, is fine: there is nothing
to remove, and the script says so.  Prints what it did and how many backends
are left.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fornace_unit as unit  # noqa: E402  (shipped in the same plan)


def deregister(args):
    name = unit.argument(args, "name")
    if not isinstance(name, str) or not name.strip():
        raise unit.Failure("no backend name given")
    folder = unit.work_dir() / "proxy"
    if not (folder / "fornace_proxy.py").is_file():
        return "no load balancer was deployed on this unit: {} is not registered".format(name)
    with unit.backends_file(folder) as (backends, save):
        left = [b for b in backends if b.get("name") != name]
        if len(left) == len(backends):
            return "{} was not registered with the load balancer: {} backend(s)".format(
                name, len(left))
        save(left)
    return "deregistered {} from the load balancer: {} backend(s) left".format(name, len(left))


if __name__ == "__main__":
    sys.exit(unit.run(deregister))
