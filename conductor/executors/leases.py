"""Leases on the local cloud's stacks: who may change a stack, and until when.

A bare ``flock`` held across a stack step was kept by a conductor frozen in
the middle of it (SIGSTOP, a debugger, a machine swapping): the next holder
waited for ever.  A lease cannot be kept that way.  Each name has, in a
folder, a lease file ``NAME.lease`` (JSON: the holder -- host, pid, thread
and a random part --, a token and the time it expires) and a guard file
``NAME.lock``, flocked only for the few milliseconds of a read-modify-write
of the lease (and of the single action it fences), never across a step:

* taking: a lease that is free, or whose holder has not renewed it for the
  lease time, is taken with the token plus one (a frozen holder's lease
  lapses, as its heartbeat thread is frozen with it); a live holder's is
  waited for, as long as it renews it;
* renewing: a thread renews the lease every quarter of the lease time while
  its step runs;
* fencing: before each action that changes the cloud (starting or stopping
  an instance's processes, writing the stack's state) the holder checks,
  under the guard and for the length of that action, that the lease is still
  its own (same holder, same token); a holder that wakes after its lease was
  taken gets :class:`LeaseLost` naming who took it, and changes nothing.

A process stopped inside the guard itself (a few milliseconds) is waited
for at most the lease time; then the step fails saying so, never waits for
ever.  Tokens only grow: a lease file stays when it is released (it says who
held it last) and when its stack is deleted.  Times are this machine's clock:
processes of the local cloud are processes of this machine.  A clock that
jumps may end a lease early; its holder is then refused, never doubled.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from fornace.conductor.executors.base import StackFailure

LOG = logging.getLogger(__name__)

POLL = 0.05    # seconds between two looks at a lease held by another


class LeaseLost(StackFailure):
    """The lease of a stack was taken by another holder: this one changes nothing."""


@dataclass(frozen=True)
class _State:
    """What a lease file says."""

    holder: str | None     # the last holder (None: never held)
    token: int
    expires: float         # time.time() after which the lease may be taken
    released: bool = False

    def describe(self) -> str:
        return (f"{self.holder or 'nobody'} (token {self.token}"
                f"{', released since' if self.released else ''})")


class Lease:
    """One holder's lease on a name, while it is held (see :meth:`Leases.held`)."""

    def __init__(self, leases: "Leases", name: str, holder: str, token: int,
                 asked_at: int) -> None:
        self.leases = leases
        self.name = name
        self.holder = holder
        self.token = token
        # the token of the first holder this one waited for (its own when it did not
        # wait): holders from that token on may have acted since it was asked for
        self.asked_at = asked_at

    @contextlib.contextmanager
    def fenced(self) -> Iterator[None]:
        """Run the action of the ``with`` block only while the lease is this holder's:
        the guard is held for its length (so no one takes the lease meanwhile) and
        the lease is renewed; :class:`LeaseLost` when another holder took it."""
        with self.leases._guard(self.name):
            self._check_mine()
            yield

    def check(self) -> None:
        """:class:`LeaseLost` unless the lease is still this holder's (renewed if so)."""
        with self.fenced():
            pass

    def _check_mine(self) -> None:
        """Under the guard: refuse if taken, else renew (a lapsed lease nobody took
        is still this holder's: every taker bumps the token under the guard)."""
        state = self.leases._read(self.name)
        if (state.holder, state.token) != (self.holder, self.token):
            raise LeaseLost(
                f"{self.leases.what} {self.name}: its lease was taken by {state.describe()} "
                f"from {self.holder} (token {self.token}), which was silent for more than "
                f"{self.leases.lease_time:g} s; this holder changes nothing more",
                f"{self.leases.what} {self.name}: lease taken by {state.describe()}")
        now = time.time()
        # renewed less than an eighth of the lease time ago: the lease has 7/8 of it
        # left, so this action skips the write (a stack's start fences a few per
        # instance); the renewing thread, every quarter, always writes
        if state.expires - now < self.leases.lease_time * 7 / 8:
            self.leases._write(self.name, self.holder, self.token,
                               now + self.leases.lease_time)


class Leases:
    """The leases of one folder, each lapsing after ``lease_time`` s without renewal;
    ``what`` names the leased things in messages ("stack")."""

    def __init__(self, folder: str | Path, lease_time: float, what: str = "stack") -> None:
        if not lease_time > 0:
            raise ValueError(f"the lease time must be positive, not {lease_time!r}")
        self.folder = Path(folder)
        self.lease_time = float(lease_time)
        self.what = what

    @contextlib.contextmanager
    def held(self, name: str) -> Iterator[Lease]:
        """Hold the lease of ``name`` for the ``with`` block (waiting while a live
        holder renews it), renewed by a thread of its own, released at the end."""
        lease = self._take(name)
        done = threading.Event()
        renewer = threading.Thread(target=self._renew, args=(lease, done),
                                   name=f"lease-{name}", daemon=True)
        renewer.start()
        try:
            yield lease
        finally:
            done.set()
            renewer.join()
            self._release(lease)

    def holder(self, name: str) -> str | None:
        """Who holds the lease of ``name`` now (None: free or lapsed)."""
        state = self._read(name)
        return state.holder if state.expires > time.time() else None

    # -- the three changes of a lease ------------------------------------------------
    def _take(self, name: str) -> Lease:
        holder = (f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}:"
                  f"{uuid.uuid4().hex[:8]}")
        asked_at: int | None = None   # None: not waited
        while True:
            with self._guard(name):
                state = self._read(name)
                now = time.time()
                if state.expires <= now:   # free, released or lapsed
                    token = state.token + 1
                    self._write(name, holder, token, now + self.lease_time)
                    if not state.released and state.holder is not None:
                        LOG.warning("%s %s: lease of %s taken over (token %d): not renewed "
                                    "for %.1f s", self.what, name, state.describe(), token,
                                    now - state.expires + self.lease_time)
                    return Lease(self, name, holder, token,
                                 token if asked_at is None else asked_at)
            if asked_at is None:
                asked_at = state.token
                LOG.info("%s %s: waiting for its lease, held by %s for %.1f s more unless "
                         "renewed", self.what, name, state.describe(), state.expires - now)
            time.sleep(POLL)

    def _renew(self, lease: Lease, done: threading.Event) -> None:
        while not done.wait(self.lease_time / 4):
            try:
                lease.check()
            except LeaseLost as exc:
                LOG.warning("%s", exc.message)
                return
            except (OSError, StackFailure) as exc:   # next time; the lease may lapse
                LOG.warning("%s %s: lease not renewed: %s", self.what, lease.name, exc)

    def _release(self, lease: Lease) -> None:
        try:
            with self._guard(lease.name):
                state = self._read(lease.name)
                if (state.holder, state.token) == (lease.holder, lease.token):
                    self._write(lease.name, lease.holder, lease.token, 0.0, released=True)
        except (OSError, StackFailure) as exc:   # it lapses by itself
            LOG.warning("%s %s: lease not released: %s", self.what, lease.name, exc)

    # -- the files -------------------------------------------------------------------
    @contextlib.contextmanager
    def _guard(self, name: str) -> Iterator[None]:
        """The flock of one read-modify-write of a lease (and the action it fences).
        A process stopped inside one is waited for at most the lease time: then a
        StackFailure says so, never a wait for ever."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / f"{name}.lock", "a") as handle:
            deadline = time.monotonic() + self.lease_time
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise StackFailure(
                            f"{self.what} {name}: its lease file {self.folder / name}.lease "
                            f"stayed locked for more than {self.lease_time:g} s (a process "
                            f"stopped while changing it)", f"{self.what} {name}: lease "
                            f"file locked") from None
                    time.sleep(POLL / 5)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _read(self, name: str) -> _State:
        """The lease file (absent or unreadable: free, token 0; the holders of a lost
        file are still told apart by their random part)."""
        try:
            data = json.loads((self.folder / f"{name}.lease").read_text())
            return _State(data["holder"], int(data["token"]), float(data["expires"]),
                          bool(data.get("released")))
        except FileNotFoundError:
            return _State(None, 0, 0.0)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            LOG.warning("%s %s: unreadable lease file taken as free: %s", self.what, name, exc)
            return _State(None, 0, 0.0)

    def _write(self, name: str, holder: str, token: int, expires: float,
               released: bool = False) -> None:
        path = self.folder / f"{name}.lease"
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        tmp.write_text(json.dumps({"holder": holder, "token": token, "expires": expires,
                                   "released": released}))
        os.replace(tmp, path)
