"""The dev sink's Maildir delivery, made durable in groups (issue 12, item 3).

A 250 from the sink means the message is on disk. Making one small file durable costs a file
fsync and a directory fsync, each a journal commit that does not get cheaper with the file's size:
done once per message on the sink's single event loop, they were the ceiling of every benchmark
that sent mail into the sink. So delivery goes to one flusher thread, which takes every message
that arrived while it was busy as one group:

1. write each message into ``tmp/`` (not yet durable, not yet visible to a Maildir reader);
2. make the group's files durable at once (``MaildirFlush.files``);
3. rename each into ``new/`` (a reader never sees a half-written file);
4. make the renames durable with one directory fsync (``MaildirFlush.directory``);
5. only then tell each message's session, which replies 250.

A failure at any step is that message's (or the group's) error, never a 250: the session
replies 451 and the client keeps the message.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import itertools
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

log = logging.getLogger("herald.sink")


class MaildirFlush(Protocol):
    """How a group is made durable: a seam, so a test can record the order of the steps."""

    def files(self, fds: Sequence[int]) -> None:
        """Return only once the bytes written to every one of ``fds`` are on disk."""

    def directory(self, path: Path) -> None:
        """Return only once the entries created in ``path`` (the renames) are on disk."""


def fsync_directory(directory: Path) -> None:
    """Make a rename or create inside ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ParallelFsync:
    """One fsync per file, issued from a few threads at once so the filesystem's journal can
    commit them together (ext4 joins concurrent fsyncs into one commit): portable, and costs
    only the group's own data."""

    def __init__(self, threads: int = 8) -> None:
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="herald-sink-fsync")

    def files(self, fds: Sequence[int]) -> None:
        if len(fds) == 1:
            os.fsync(fds[0])
            return
        # list() re-raises the first fsync error: then the whole group is refused.
        list(self._pool.map(os.fsync, fds))

    def directory(self, path: Path) -> None:
        fsync_directory(path)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


class SyncFs(ParallelFsync):
    """Linux ``syncfs(2)`` on the Maildir's filesystem: one call flushes the whole group.

    It also flushes whatever else is dirty on that filesystem, so it is only cheaper where the
    sink's disk is otherwise quiet; it reports write-back errors since Linux 5.8.
    """

    def __init__(self, syncfs: Callable[[int], int], threads: int = 8) -> None:
        super().__init__(threads)
        self._syncfs = syncfs

    def files(self, fds: Sequence[int]) -> None:
        if self._syncfs(fds[0]) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"syncfs: {os.strerror(code)}")


def _libc_syncfs() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    libc = ctypes.CDLL(name, use_errno=True)
    function = getattr(libc, "syncfs", None)
    if function is None:
        return None
    function.argtypes = [ctypes.c_int]
    function.restype = ctypes.c_int
    syncfs: Callable[[int], int] = function
    return syncfs


def default_flush() -> ParallelFsync:
    """``syncfs`` where the C library has it (Linux), else parallel fsyncs.

    Measured on the 2-core reference machine, 2,000 messages from 50 connections into the sink
    (issue 12): one fsync of file and directory per message 65-76 msg/s; grouped, with parallel
    fsyncs 116-138 msg/s, with serial fsyncs 85-134, with syncfs 193-229.
    """
    syncfs = _libc_syncfs()
    return ParallelFsync() if syncfs is None else SyncFs(syncfs)


@dataclass
class _Pending:
    content: bytes
    done: Callable[[Path | OSError], None]


class GroupFlusher:
    """One thread storing the sink's messages in groups (see the module's docstring).

    ``done`` callbacks run on the flusher thread, with the message's path in ``new/`` once it
    is durable, or the ``OSError`` that stopped it.
    """

    def __init__(self, maildir: Path, flush: MaildirFlush) -> None:
        self.maildir = maildir
        self.flush = flush
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._sequence = itertools.count(1)
        self._host = socket.gethostname().replace("/", "_").replace(":", "_")
        self._thread = threading.Thread(target=self._run, name="herald-sink-flusher", daemon=True)
        self._thread.start()

    def submit(self, content: bytes, done: Callable[[Path | OSError], None]) -> None:
        self._queue.put(_Pending(content, done))

    @property
    def queued(self) -> int:
        """Messages waiting for the next group (the current one is being flushed)."""
        return self._queue.qsize()

    def close(self) -> None:
        """Store what was submitted so far, then stop the thread."""
        self._queue.put(None)
        self._thread.join()
        close = getattr(self.flush, "close", None)
        if close is not None:
            close()

    def _run(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is None:
                return
            group = [first]
            # Everything that arrived while the last group was flushed joins this one.
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
                group.append(item)
            self._store(group)

    def _store(self, group: list[_Pending]) -> None:
        written: list[tuple[_Pending, int, str]] = []
        try:
            for pending in group:
                try:
                    name, fd = self._write(pending.content)
                except OSError as exc:
                    _tell(pending, exc)
                    continue
                written.append((pending, fd, name))
            if not written:
                return
            try:
                self.flush.files([fd for _, fd, _ in written])
            except OSError as exc:
                for pending, _, name in written:
                    self._discard(name)
                    _tell(pending, exc)
                return
            renamed: list[tuple[_Pending, Path]] = []
            for pending, _, name in written:
                new_path = self.maildir / "new" / name
                try:
                    os.rename(self.maildir / "tmp" / name, new_path)
                except OSError as exc:
                    self._discard(name)
                    _tell(pending, exc)
                    continue
                renamed.append((pending, new_path))
            try:
                self.flush.directory(self.maildir / "new")
            except OSError as exc:
                # Renamed but maybe not durable: refused, so the client keeps (and resends) it.
                for pending, _ in renamed:
                    _tell(pending, exc)
                return
            for pending, new_path in renamed:
                _tell(pending, new_path)
        finally:
            for _, fd, _ in written:
                os.close(fd)

    def _discard(self, name: str) -> None:
        with suppress(OSError):  # a leftover in tmp/ is harmless: readers never look there
            os.unlink(self.maildir / "tmp" / name)

    def _write(self, content: bytes) -> tuple[str, int]:
        name = self._unique_name()
        # 0600 like the Maildir's own directories: a message is someone's mail.
        fd = os.open(self.maildir / "tmp" / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view) :]
        except OSError:
            os.close(fd)
            raise
        return name, fd

    def _unique_name(self) -> str:
        # The classic time.pid_sequence.host form; ':' and '/' would clash with Maildir flags.
        return f"{time.time_ns()}.P{os.getpid()}Q{next(self._sequence)}.{self._host}"


def _tell(pending: _Pending, result: Path | OSError) -> None:
    try:
        pending.done(result)
    except Exception:
        # A broken callback must not end the flusher thread: every later message would hang.
        log.exception("sink delivery callback failed", extra={"event": "sink_callback_failed"})
