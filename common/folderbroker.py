"""A broker in a folder, for one machine without RabbitMQ: ``filesystem:///path``.

The API, the conductor and the local cloud's agents are separate processes;
kombu's in-process ``memory://`` transport cannot connect them, and kombu's
``filesystem`` transport can: every message is a file in a shared folder.
This module adapts that transport in two places where several processes
read and write the same folder at once:

* a message file is written under a hidden name and renamed into place, so
  a reader never sees half a message;
* a reader claims a message by renaming it within the folder (atomic: one
  reader wins) instead of moving it to ``/tmp``, which copies across
  filesystems and could hand the same message to two readers.

Limits: a message is removed when it is taken, before it is acknowledged; a
process killed while it holds an unacknowledged message loses it (a clean
stop gives it back).  At-least-once delivery through crashes needs RabbitMQ.

Who listens: a consumer leaves a file in ``control/consumers/`` (named for
its process and consumer tag, holding the queue's name) while it consumes;
:func:`consumer_counts` counts the files of live processes, so a consumer
killed with -9 stops counting at once (as RabbitMQ's consumer count does when
its connection drops).  Deleting a queue deletes its messages.

Layout of ``/path``: ``messages/<queue>/`` (one ``<time>_<uuid>.msg`` file per
message; a queue whose name is not a safe file name gets a folder named for
its digest) and ``control/`` (exchange bindings, kombu's format;
``consumers/``).  Messages in ``messages/`` itself (``<time>_<uuid>.<queue>.msg``,
as versions before the queue folders wrote them) are moved into their queue's
folder by its first reader.
"""
from __future__ import annotations

import collections
import hashlib
import os
import re
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from queue import Empty

from kombu.exceptions import ChannelError
from kombu.transport import filesystem, virtual
from kombu.utils.json import dumps, loads

from fornace.common.brokerurl import FOLDER_SCHEME

POLLING_INTERVAL = 0.05     # seconds between two looks at the folder
RELIST_INTERVAL = 0.02      # seconds a listing of the folder serves an emptied queue


def folder_of(url: str) -> Path:
    """The folder of ``filesystem:///abs/path`` (``ValueError`` when there is none)."""
    parts = urlsplit(url)
    path = unquote(parts.path)
    if parts.scheme != FOLDER_SCHEME or parts.netloc or not path.startswith("/") or path == "/":
        raise ValueError(f"broker URL {url!r}: a folder broker URL names its folder, "
                         "e.g. filesystem:///var/lib/fornace/broker")
    return Path(os.path.expanduser(path))


def transport_options(url: str) -> dict[str, Any]:
    """kombu transport options for the folder of ``url`` (created when missing)."""
    root = folder_of(url)
    messages, control = root / "messages", root / "control"
    messages.mkdir(parents=True, exist_ok=True)
    control.mkdir(parents=True, exist_ok=True)
    return {"data_folder_in": str(messages), "data_folder_out": str(messages),
            "control_folder": str(control), "polling_interval": POLLING_INTERVAL}


def _consumers_folder(control_folder: str | Path) -> Path:
    return Path(control_folder) / "consumers"


def _alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (killed, not yet reaped) does not count."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # someone else's process: it exists
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:           # no /proc here: the signal's answer is all we know
        return True
    return stat.rpartition(")")[2].split()[:1] not in (["Z"], ["X"])


def consumer_counts(url: str, queues: list[str]) -> dict[str, int]:
    """How many live processes consume each of ``queues`` (0 when none)."""
    counts = dict.fromkeys(queues, 0)
    folder = _consumers_folder(transport_options(url)["control_folder"])
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return counts
    for name in names:
        pid, _, _ = name.partition(".")
        try:
            queue = (folder / name).read_text()
        except OSError:
            continue        # cancelled meanwhile
        if not pid.isdigit():
            continue
        if not _alive(int(pid)):
            (folder / name).unlink(missing_ok=True)   # its consumer was killed
        elif queue in counts:
            counts[queue] += 1
    return counts


class Channel(filesystem.Channel):
    """kombu's filesystem channel with atomic writes and claims, consumers
    that can be counted, and queues deleted with their messages."""

    def _presence(self, consumer_tag: str) -> Path:
        tag = hashlib.sha1(f"{id(self)}:{consumer_tag}".encode()).hexdigest()[:16]
        return _consumers_folder(self.control_folder) / f"{os.getpid()}.{tag}"

    def basic_consume(self, queue: str, no_ack: bool, callback: Any, consumer_tag: str,
                      **kwargs: Any) -> Any:
        result = super().basic_consume(queue, no_ack, callback, consumer_tag, **kwargs)
        presence = self._presence(consumer_tag)
        presence.parent.mkdir(parents=True, exist_ok=True)
        partial = presence.with_name(f".{presence.name}.part")
        partial.write_text(queue)
        os.replace(partial, presence)
        return result

    def basic_cancel(self, consumer_tag: str) -> Any:
        try:
            return super().basic_cancel(consumer_tag)
        finally:
            self._presence(consumer_tag).unlink(missing_ok=True)

    def queue_delete(self, queue: str, *args: Any, **kwargs: Any) -> Any:
        result = super().queue_delete(queue, *args, **kwargs)
        self._purge(queue)
        folder = self.__dict__.get("_folders", {}).pop(queue, None)
        try:   # a queue per unit: no folder left behind by each
            os.rmdir(folder or os.path.join(self.data_folder_out, queue_folder_name(queue)))
        except OSError:
            pass   # a message came meanwhile: it stays, with its folder
        return result

    def _folder(self, queue: str) -> str:
        """The folder of ``queue``'s messages (made when missing)."""
        folders = self.__dict__.setdefault("_folders", {})
        folder = folders.get(queue)
        if folder is None:
            folder = os.path.join(self.data_folder_out, queue_folder_name(queue))
            os.makedirs(folder, exist_ok=True)
            folders[queue] = folder
        return folder

    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        name = f"{time.time_ns():020d}_{uuid.uuid4().hex}.msg"
        data = dumps(payload).encode()
        for attempt in (1, 2):
            try:
                folder = self._folder(queue)
                partial = os.path.join(folder, f".{name}.part")
                with open(partial, "wb") as handle:
                    handle.write(data)
                os.replace(partial, os.path.join(folder, name))
                return
            except FileNotFoundError:   # the queue was deleted meanwhile: made again
                self.__dict__.get("_folders", {}).pop(queue, None)
                if attempt == 2:
                    raise ChannelError(f"cannot add message {name!r} to queue {queue!r} in "
                                       f"{self.data_folder_out!r}: its folder is gone") from None
            except OSError as exc:
                raise ChannelError(f"cannot add message {name!r} to queue {queue!r} in "
                                   f"{self.data_folder_out!r}: {exc}") from exc

    def _get(self, queue: str) -> Any:
        """The oldest message of ``queue``, claimed by renaming its file.

        Each queue has a folder of its own (listing one folder holding every
        queue's messages, thousands of reports among them, was most of an
        idle consumer's time).  One listing of the queue's folder is kept and
        taken from until it runs out; names start with the time they were
        written, so it is in order, and what was written after it is in the
        next one -- made at most every :data:`RELIST_INTERVAL` while the queue
        is empty.  Messages an older version left in the shared folder are
        moved into the queue's folder first."""
        listed = self.__dict__.setdefault("_listed", {})
        names = listed.get(queue)
        data = self._take(queue, names)
        if data is None:
            listed_at = self.__dict__.setdefault("_listed_at", {})
            now = time.monotonic()
            if now - listed_at.get(queue, 0.0) >= RELIST_INTERVAL:
                if queue not in listed_at:
                    self._adopt_flat(queue)
                listed[queue] = self._listing(queue)
                listed_at[queue] = now
                data = self._take(queue, listed[queue])
        if data is None:
            raise Empty()
        return loads(data.decode())

    def _take(self, queue: str, names: collections.deque | None) -> bytes | None:
        while names:
            data = self._claim(queue, names.popleft())
            if data is not None:
                return data
        return None

    def _listing(self, queue: str) -> collections.deque:
        """The messages of ``queue``, oldest first."""
        try:
            names = os.listdir(self._folder(queue))
        except FileNotFoundError:   # deleted meanwhile
            self.__dict__.get("_folders", {}).pop(queue, None)
            return collections.deque()
        return collections.deque(sorted(name for name in names
                                        if name[0] != "." and name.endswith(".msg")))

    def _adopt_flat(self, queue: str) -> None:
        """Move ``queue``'s messages from the shared folder (where versions
        before the queue folders wrote them) into its own folder."""
        suffix = f".{queue}.msg"
        folder = self.data_folder_in
        for name in os.listdir(folder):
            if name.endswith(suffix) and name[0] != "." and name.partition(".")[2] == suffix[1:]:
                try:
                    os.rename(os.path.join(folder, name),
                              os.path.join(self._folder(queue), name[:-len(suffix)] + ".msg"))
                except FileNotFoundError:
                    pass   # another reader took it

    def _claim(self, queue: str, name: str) -> bytes | None:
        """The content of message file ``name``, now removed; None if another
        reader took it first."""
        folder = self._folder(queue)
        claimed = os.path.join(folder, f".claimed-{os.getpid()}-{name}")
        try:
            os.rename(os.path.join(folder, name), claimed)
        except FileNotFoundError:
            return None
        try:
            with open(claimed, "rb") as handle:
                return handle.read()
        finally:
            os.unlink(claimed)

    def _size(self, queue: str) -> int:
        return len(self._listing(queue)) + super()._size(queue)

    def _purge(self, queue: str) -> int:
        count = super()._purge(queue)   # what an older version left in the shared folder
        folder = self._folder(queue)
        for name in self._listing(queue):
            try:
                os.remove(os.path.join(folder, name))
                count += 1
            except OSError:
                pass   # taken by a reader meanwhile
        self.__dict__.get("_listed", {}).pop(queue, None)
        return count


_SAFE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,150}")


def queue_folder_name(queue: str) -> str:
    """The folder name of ``queue``: its own name when that is a safe file
    name, else a digest of it (never a path, never hidden)."""
    if _SAFE_NAME.fullmatch(queue):
        return queue
    return "q-" + hashlib.sha256(queue.encode()).hexdigest()[:32]


class Transport(filesystem.Transport):
    """One broker state (exchanges, bindings) per folder.

    kombu's transport keeps a single state per process and writes a binding
    to the folder only when that state lacks it: a second folder broker in
    the same process would never get its bindings written.
    """

    Channel = Channel
    driver_type = FOLDER_SCHEME
    driver_name = "fornace-folder"
    _states: dict[str, virtual.BrokerState] = {}
    _states_lock = threading.Lock()

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        folder = str(client.transport_options.get("control_folder", ""))
        with self._states_lock:
            self.state = self._states.setdefault(folder, virtual.BrokerState())
