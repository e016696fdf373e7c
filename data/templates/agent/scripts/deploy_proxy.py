"""Start (or restart) the load balancer of a farm on this unit (a FormatVersion 2.0 plan script).

Arguments (the JSON object on stdin; also environment variables): ``port``
(where the load balancer listens), ``name`` (the farm, for messages),
optional ``address`` (the instance's address from the stack outputs, used in
the URL printed; default: the address it is probed on).

The plan also ships ``fornace_proxy.py`` (the reverse proxy) and
``fornace_unit.py``.  The proxy is copied to ``$FORNACE_WORK_DIR/proxy/`` and
started there with its own session, listening on ``FORNACE_INSTANCE_ADDRESS``
(every address of a real VM) at ``port``; its backends are
``proxy/backends.json`` (kept across deployments; ``register_backend.py`` adds
units to it) and its log ``proxy/proxy.log``.  A proxy an earlier deployment
started (``proxy/proxy.pid``) is stopped first, so the script can run any
number of times (e.g. when ``loadBalancerPort`` changed).  Prints the load
balancer's URL.
"""
import json
import os
import shutil
import sys
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fornace_unit as unit  # noqa: E402  (shipped in the same plan)

START_TIMEOUT = 15.0


def deploy(args):
    port = unit.integer(args, "port", None, 1, 65535)
    name = unit.argument(args, "name", "the farm")
    folder = unit.work_dir() / "proxy"
    folder.mkdir(parents=True, exist_ok=True)
    program = folder / "fornace_proxy.py"
    shutil.copyfile(os.path.join(HERE, "fornace_proxy.py"), str(program))
    backends = folder / "backends.json"
    if not backends.is_file():
        tmp = folder / ".backends.json.tmp"
        tmp.write_text(json.dumps({"backends": []}))
        os.replace(str(tmp), str(backends))
    pid_file = folder / "proxy.pid"
    log_path = folder / "proxy.log"
    bind, probe = unit.addresses()
    unit.stop_recorded(pid_file)
    process, offset = unit.start_detached(
        [sys.executable, str(program), "--listen", bind, "--port", str(port),
         "--backends", str(backends)],
        folder, log_path, unit.child_environment(args), pid_file,
        banner="load balancer of {} on {}:{}".format(name, bind, port))
    if not unit.listening(probe, port, process, START_TIMEOUT):
        unit.stop_recorded(pid_file)
        raise unit.Failure(unit.with_tail(
            "the load balancer of {} did not start on {}:{}".format(name, bind, port),
            log_path, offset))
    address = unit.argument(args, "address", probe)
    return "http://{}:{}/".format(unit.url_host(str(address)), port)


if __name__ == "__main__":
    sys.exit(unit.run(deploy))
