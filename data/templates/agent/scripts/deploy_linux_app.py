"""Deploy an application on this unit and keep it running (a FormatVersion 2.0 plan script).

Arguments (the JSON object on stdin; also environment variables):

``name``          the service name (for messages)
``source``        an absolute folder path on the unit (copied), or a git URL
                  (``https://``, ``ssh://``, ``git://``, ``file://``, ``user@host:path``)
                  cloned, then fetched on later deployments
``revision``      optional git branch, tag or commit (default: the remote's HEAD)
``startCommand``  run with ``/bin/sh -c`` in the application folder
``port``          the port the application must listen on
``healthPath``    path that must answer 2xx/3xx once the app is up (default ``/``)
``env``           optional object of extra environment variables
``hostname``      the unit's hostname (given to the app as ``FORNACE_UNIT_HOSTNAME``)
``address``       optional: the unit's address from the stack outputs, used in the
                  URL printed (default: the address the app is probed on)
``startTimeout``  seconds the app has to answer on its health URL (default 60)

The application lives in ``$FORNACE_WORK_DIR/app`` and its output goes to
``$FORNACE_WORK_DIR/app.log``.  The new code is fetched first (the running
app keeps serving meanwhile); then the app an earlier deployment started
(``app.pid``) is stopped with its process group, the new one is started in
its own session with ``PORT``, ``HOST`` (the unit's address, or ``0.0.0.0`` on
a real VM), ``FORNACE_UNIT_HOSTNAME``, ``FORNACE_APP_NAME`` and ``env``, and the
script waits until ``http://HOST:PORT<healthPath>`` answers with a 2xx or 3xx
status.  Deploying again does the same, so it can run any number of times.
On success it prints the app's URL (``http://address:PORT/``, not its health
URL); on failure (missing folder, no git, git
error, the app exits or does not answer in time -- then it is stopped) it
prints a clear message with the end of the app's log to stderr and exits 1.
"""
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fornace_unit as unit  # noqa: E402  (shipped in the same plan)

GIT_URL = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*://|[A-Za-z0-9._-]+@[A-Za-z0-9._-]+:)")
GIT_TIMEOUT = 600
PROBE_INTERVAL = 0.2


def deploy(args):
    name = unit.argument(args, "name", "the application")
    source = unit.argument(args, "source")
    command = unit.argument(args, "startCommand")
    if not isinstance(source, str) or not source.strip():
        raise unit.Failure("no source given (an absolute folder path or a git URL)")
    if not isinstance(command, str) or not command.strip():
        raise unit.Failure("no startCommand given")
    source = source.strip()
    port = unit.integer(args, "port", None, 1, 65535)
    health = unit.argument(args, "healthPath", "/")
    if not isinstance(health, str) or not health.startswith("/"):
        raise unit.Failure("healthPath must start with '/' (got {!r})".format(health))
    timeout = unit.integer(args, "startTimeout", 60, 1, 3600)
    revision = unit.argument(args, "revision")
    hostname = unit.argument(args, "hostname")
    extra = unit.environment_variables(args.get("env"))

    work = unit.work_dir()
    app = work / "app"
    pid_file = work / "app.pid"
    log_path = work / "app.log"
    bind, probe = unit.addresses()

    # 1. the new code, while the running app (if any) keeps serving
    if GIT_URL.match(source):
        install = fetch_git(source, revision, work, app)
    elif source.startswith("/"):
        install = copy_folder(source, work, app)
    else:
        raise unit.Failure("source {!r} is neither an absolute folder path nor a git URL"
                           .format(source))

    # 2. stop what an earlier deployment started, put the new code in place
    unit.stop_recorded(pid_file)
    install()

    # 3. start it and wait until it is healthy
    env = unit.child_environment(args)
    env.update(extra)
    env.update(PORT=str(port), HOST=bind, FORNACE_APP_NAME=str(name))
    if hostname:
        env["FORNACE_UNIT_HOSTNAME"] = str(hostname)
    process, offset = unit.start_detached(["/bin/sh", "-c", command], app, log_path, env,
                                          pid_file, banner="starting: " + command)
    url = "http://{}:{}{}".format(unit.url_host(probe), port, health)
    problem = wait_healthy(url, process, timeout)
    if problem is not None:
        unit.stop_recorded(pid_file)
        raise unit.Failure(unit.with_tail("{} on {}: {}".format(
            name, hostname or "this unit", problem), log_path, offset))
    address = unit.argument(args, "address", probe)
    return "http://{}:{}/".format(unit.url_host(str(address)), port)   # the app, not its health


# -- sources -----------------------------------------------------------------------------

def copy_folder(source, work, app):
    folder = Path(source)
    if not folder.is_dir():
        raise unit.Failure("source folder {} does not exist on this unit".format(source))
    staging = work / ".app.new"
    shutil.rmtree(str(staging), ignore_errors=True)
    try:
        shutil.copytree(str(folder), str(staging), symlinks=True)
    except (OSError, shutil.Error) as exc:
        shutil.rmtree(str(staging), ignore_errors=True)
        raise unit.Failure("cannot copy {}: {}".format(source, exc))

    def install():
        shutil.rmtree(str(app), ignore_errors=True)
        os.replace(str(staging), str(app))
    return install


def git(*argv, cwd=None):
    """Run git; its output (stdout and stderr together), or Failure."""
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="true")
    try:
        done = subprocess.run(("git",) + argv, cwd=None if cwd is None else str(cwd),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, env=env, timeout=GIT_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise unit.Failure("git {} did not finish within {} s".format(argv[0], GIT_TIMEOUT))
    output = done.stdout.decode("utf-8", "replace").strip()
    if done.returncode != 0:
        raise unit.Failure("git {} failed (exit code {}): {}".format(
            " ".join(argv[:2]), done.returncode, output[-1500:] or "no output"))
    return output


def fetch_git(url, revision, work, app):
    if shutil.which("git") is None:
        raise unit.Failure("git is not installed on this unit: it is needed to fetch {} "
                           "(install git, or give the app as an absolute folder path)"
                           .format(url))
    current = None
    if (app / ".git").is_dir():
        try:
            current = git("remote", "get-url", "origin", cwd=app)
        except unit.Failure:
            current = None
    if current == url:              # a clone of this repository: fetch and switch
        git("fetch", "--quiet", "--prune", "--tags", "--force", "origin", cwd=app)
        target = resolve(app, revision)

        def update():
            git("reset", "--quiet", "--hard", target, cwd=app)
            git("clean", "--quiet", "-fd", cwd=app)
        return update
    staging = work / ".app.new"
    shutil.rmtree(str(staging), ignore_errors=True)
    git("clone", "--quiet", url, str(staging))
    try:
        if revision:
            git("checkout", "--quiet", "--detach", resolve(staging, revision), cwd=staging)
    except unit.Failure:
        shutil.rmtree(str(staging), ignore_errors=True)
        raise

    def install():
        shutil.rmtree(str(app), ignore_errors=True)
        os.replace(str(staging), str(app))
    return install


def resolve(repo, revision):
    """The commit to deploy: a branch of origin, a tag or a commit; else origin's HEAD."""
    candidates = ["origin/" + revision, revision] if revision else ["origin/HEAD", "HEAD"]
    for candidate in candidates:
        try:
            return git("rev-parse", "--verify", "--quiet", candidate + "^{commit}", cwd=repo)
        except unit.Failure:
            continue
    raise unit.Failure("revision {!r} not found in the repository".format(revision))


# -- health ------------------------------------------------------------------------------

class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None          # a 3xx answer is an answer: do not follow it


def wait_healthy(url, process, timeout):
    """None once ``url`` answers 2xx/3xx; else why not (exited / timed out)."""
    opener = urllib.request.build_opener(_NoRedirect)
    deadline = time.monotonic() + timeout
    last = "no answer"
    while True:
        code = process.poll()
        if code is not None:
            return "the app exited with code {} before {} answered".format(code, url)
        try:
            with opener.open(url, timeout=2) as answer:
                if 200 <= answer.status < 400:
                    return None
                last = "HTTP {}".format(answer.status)
        except urllib.error.HTTPError as exc:
            if 300 <= exc.code < 400:
                return None
            last = "HTTP {}".format(exc.code)
        except (urllib.error.URLError, OSError) as exc:
            last = str(getattr(exc, "reason", exc))
        if time.monotonic() >= deadline:
            return "{} did not answer with a 2xx or 3xx status within {} s (last: {})".format(
                url, timeout, last)
        time.sleep(PROBE_INTERVAL)


if __name__ == "__main__":
    sys.exit(unit.run(deploy))
