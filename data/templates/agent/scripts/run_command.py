"""Run a command on this unit (a FormatVersion 2.0 plan script, operation ``run``).

Arguments (the JSON object on stdin; also environment variables):
``command`` -- a string run with ``/bin/sh -c``, or a list run as is
(program and arguments) -- and optional ``timeout`` (seconds, default 600).
The command runs in ``$FORNACE_WORK_DIR`` with the agent's environment
(without the plan's own variables), no stdin, in its own process group; its
output (stdout and stderr together) goes to a file, not a pipe, so a command
that leaves a process in the background does not keep the plan waiting.

The output is printed as is: its lines are the command's result.  When the
command exits non-zero (or runs longer than ``timeout`` and is killed with its
process group) the script prints the output all the same, writes the exit
code and the end of the output to stderr and exits 1.
"""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fornace_unit as unit  # noqa: E402  (shipped in the same plan)

DEFAULT_TIMEOUT = 600
POLL = 0.2
TAIL = 1500


def main():
    args = unit.arguments()
    try:
        argv, shown = command_of(args)
        timeout = unit.integer(args, "timeout", DEFAULT_TIMEOUT, 1, 86400)
    except unit.Failure as exc:
        unit.fail(str(exc))
    work = unit.work_dir()
    with tempfile.NamedTemporaryFile(dir=str(work), prefix=".run-", suffix=".log") as output:
        try:
            process = subprocess.Popen(argv, cwd=str(work), stdin=subprocess.DEVNULL,
                                       stdout=output, stderr=subprocess.STDOUT,
                                       env=unit.child_environment(args), close_fds=True,
                                       start_new_session=True)
        except OSError as exc:
            unit.fail("cannot run {}: {}".format(shown, exc.strerror or exc))
        problem, text = follow(process, output, timeout)
    if text and not text.endswith("\n"):
        sys.stdout.write("\n")
        sys.stdout.flush()
    if problem is not None:
        end = text.strip()[-TAIL:]
        unit.fail("{} {}{}".format(shown, problem,
                                   "; output:\n" + end if end else " (no output)"))
    return 0


def follow(process, output, timeout):
    """Copy the command's output to our stdout as it grows (the agent streams
    our stdout to the server while we run); the problem (None: exit 0) and
    the whole output once it ends."""
    deadline = time.time() + timeout
    with open(output.name, "rb") as reader:   # its own offset: the command writes at its end
        return _copy(process, reader, deadline, timeout)


def _copy(process, reader, deadline, timeout):
    chunks = []
    problem = None
    while True:
        code = process.poll()
        chunk = reader.read()
        if chunk:
            chunks.append(chunk)
            sys.stdout.write(chunk.decode("utf-8", "replace"))
            sys.stdout.flush()
        if code is not None:
            problem = None if code == 0 else "exited with code {}".format(code)
            break
        if time.time() > deadline:
            unit.stop_group(process.pid, 5)
            process.wait()
            problem = "did not finish within {} s and was killed".format(timeout)
            break
        time.sleep(POLL)
    rest = reader.read()
    if rest:
        chunks.append(rest)
        sys.stdout.write(rest.decode("utf-8", "replace"))
        sys.stdout.flush()
    return problem, b"".join(chunks).decode("utf-8", "replace")


def command_of(args):
    command = unit.argument(args, "command")
    if isinstance(command, list) and command and all(isinstance(a, str) for a in command):
        return command, " ".join(command)[:200]
    if isinstance(command, str) and command.strip():
        return ["/bin/sh", "-c", command], command.strip()[:200]
    raise unit.Failure("no command given (the operation's kwarg 'command': a shell command "
                       "or a list of program and arguments)")


if __name__ == "__main__":
    sys.exit(main())
