"""The jobs a launch's check composed, kept on disk so that fan-out does not compose them again.

``launch`` must render every message before it writes the first job (one broken row refuses
the whole launch), and fan-out writes them in batches afterwards. Rendering twice doubled the
launch's CPU; keeping the rendered jobs in memory would grow with the audience. So the check
appends each job it composes to one temporary file per step, in audience order with its
position, and fan-out streams them back: each message is composed once, memory stays flat.

The files are anonymous temporary files (``tempfile.TemporaryFile``: mode 0600, unlinked at
once, gone when closed or when the process dies): they hold rendered messages, i.e. personal
data. Records are gathered into blocks of about ``BLOCK_BYTES`` and each block is compressed
(zlib level 1), so the spool takes a fraction of the space the outbox will; compressing each
payload on its own cost more than writing it (zlib's set-up for every 400-byte message) and
compressed worse.

File: blocks, each a big-endian u32 length and that many bytes of zlib data: a ``marshal``-ed
list of records, each a tuple of the job's fields with its payload last (just ``(position,)``
for an unusable audience row). marshal, not JSON: a block is one C call each way, where JSON
cost ~5 µs per job to write and ~6 to read back, a tenth of a launch's time at a million
recipients. marshal trusts its input; it reads only what this process (or a child it forked,
scheduler.check_pool) wrote, into a file nobody else can open, read by the same interpreter.
Only this module reads and writes it.
"""

from __future__ import annotations

import heapq
import marshal
import os
import struct
import tempfile
import zlib
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from types import TracebackType
from typing import IO, Any, Final

from dispatch.store import NewJob

_BLOCK: Final = struct.Struct(">I")
#: Uncompressed bytes gathered before a block is compressed and written: big enough that zlib's
#: set-up is paid rarely, small enough to stay a trifle of memory per step.
BLOCK_BYTES: Final = 256 * 1024

#: One entry of a step's stream: the audience position, and the job (None: an unusable row).
Entry = tuple[int, NewJob | None]


class JobSpool:
    """Composed jobs per step. Use as a context manager; ``complete`` once the check passed."""

    def __init__(self, steps: Iterable[str]) -> None:
        self._files: dict[str, IO[bytes]] = {}
        # Each step's block being gathered, and about how many bytes it holds.
        self._pending: dict[str, list[tuple[Any, ...]]] = {}
        self._pending_bytes: dict[str, int] = {}
        self._counts: dict[str, int] = {}
        for step in steps:
            self._files[step] = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
            self._pending[step] = []
            self._pending_bytes[step] = 0
            self._counts[step] = 0
        self.positions = 0  # audience rows seen, unusable ones included
        self.skipped = 0  # unusable audience rows
        self.complete = False  # set by the check when every message composed
        # Spools other processes filled with other rows of the same audience
        # (scheduler.check_pool): their entries are merged into this one's by position.
        self._parts: list[JobSpool] = []

    @property
    def steps(self) -> list[str]:
        return list(self._files)

    def add_job(self, position: int, job: NewJob) -> None:
        record = (
            position,
            job.key,
            job.key_tuple,
            job.campaign,
            job.step,
            job.occurrence_at.isoformat(),
            job.channel,
            job.sender,
            job.recipient,
            job.message_id,
            job.not_before.isoformat(),
            job.max_send_attempts,
            job.max_claims,
            job.in_doubt_policy,
            job.mailbox,
            job.send_window,
            job.list_scope,
            job.payload,
        )
        self._write(job.step, record, len(job.payload) + _RECORD_BYTES)
        self._counts[job.step] += 1
        self.positions = max(self.positions, position)

    def add_problem(self, position: int) -> None:
        """An unusable audience row: every step's stream keeps its position."""
        for step in self._files:
            self._write(step, (position,), 8)
        self.skipped += 1
        self.positions = max(self.positions, position)

    def count(self, step: str) -> int:
        """How many jobs ``step`` has."""
        return self._counts[step] + sum(part.count(step) for part in self._parts)

    def entries(self, step: str) -> Iterator[Entry]:
        """``step``'s jobs and unusable rows, in audience order."""
        if not self._parts:
            return self._own_entries(step)
        streams = [self._own_entries(step)] + [part.entries(step) for part in self._parts]
        return heapq.merge(*streams, key=lambda entry: entry[0])

    def written(self) -> dict[str, object]:
        """Write out what is gathered and return what another process's ``adopt`` needs: the
        files are shared (inherited descriptors), the counters are not."""
        for step, file in self._files.items():
            self._write_block(step)
            file.flush()
        return {"counts": dict(self._counts), "positions": self.positions, "skipped": self.skipped}

    def adopt(self, part: JobSpool, written: Mapping[str, object]) -> None:
        """Merge ``part``, filled by another process that returned ``written``; closed with
        this spool. Its positions must be none of this spool's own."""
        counts = written["counts"]
        positions, skipped = written["positions"], written["skipped"]
        if not (
            isinstance(counts, dict) and isinstance(positions, int) and isinstance(skipped, int)
        ):
            raise ValueError("not a spool part's summary")
        if set(counts) != set(self._files):
            raise ValueError("a spool part of other steps")
        part._counts = {step: int(count) for step, count in counts.items()}
        part.positions, part.skipped = positions, skipped
        self._parts.append(part)
        self.positions = max(self.positions, positions)
        self.skipped += skipped

    def reset(self) -> None:
        """Forget every entry and part: the check starts over."""
        for step, file in self._files.items():
            file.seek(0)
            file.truncate()
            self._pending[step].clear()
            self._pending_bytes[step] = 0
            self._counts[step] = 0
        for part in self._parts:
            part.close()
        self._parts.clear()
        self.positions = self.skipped = 0
        self.complete = False

    def _own_entries(self, step: str) -> Iterator[Entry]:
        self._write_block(step)
        for records in read_blocks(self._files[step]):
            for record in records:
                yield record[0], None if len(record) == 1 else _job(record)

    def _write(self, step: str, record: tuple[Any, ...], size: int) -> None:
        self._pending[step].append(record)
        self._pending_bytes[step] += size
        if self._pending_bytes[step] >= BLOCK_BYTES:
            self._write_block(step)

    def _write_block(self, step: str) -> None:
        pending = self._pending[step]
        if pending:
            write_block(self._files[step], pending)
            pending.clear()
            self._pending_bytes[step] = 0

    def close(self) -> None:
        for file in self._files.values():
            file.close()
        for part in self._parts:
            part.close()

    def __enter__(self) -> JobSpool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


#: About how many bytes a record holds besides its payload (what a block's size counts).
_RECORD_BYTES: Final = 400


def write_block(file: IO[bytes], records: list[tuple[Any, ...]]) -> None:
    """Append ``records`` to ``file`` as one block (the format in the module's docstring)."""
    block = zlib.compress(marshal.dumps(records), 1)
    file.write(_BLOCK.pack(len(block)) + block)


def read_blocks(file: IO[bytes]) -> Iterator[list[tuple[Any, ...]]]:
    """``file``'s blocks from its start, each a list of records. Read by offset (``pread``):
    forked processes share an open file's position, so several may read one file at once
    (scheduler.occurrence_pool), and appending stays possible meanwhile."""
    file.flush()
    fd = file.fileno()
    offset = 0
    while header := os.pread(fd, _BLOCK.size, offset):
        (block_size,) = _BLOCK.unpack(header)
        block = zlib.decompress(os.pread(fd, block_size, offset + _BLOCK.size))
        offset += _BLOCK.size + block_size
        yield marshal.loads(block)  # noqa: S302 - our own file: see the module's docstring


def _job(record: tuple[Any, ...]) -> NewJob:
    """The NewJob ``add_job`` wrote, filled without the frozen dataclass's ``__init__`` (an
    ``object.__setattr__`` per field: 2.5 µs against 0.6, at every job of a launch). The result
    is the same frozen, equal, hashable instance (tests/unit/test_job_spool.py)."""
    job: NewJob = object.__new__(NewJob)
    values = job.__dict__
    (_, values["key"], values["key_tuple"], values["campaign"], values["step"], occurrence_at,
     values["channel"], values["sender"], values["recipient"], values["message_id"], not_before,
     values["max_send_attempts"], values["max_claims"], values["in_doubt_policy"],
     values["mailbox"], values["send_window"], values["list_scope"],
     values["payload"]) = record  # fmt: skip
    # marshal keeps str, int, bytes and None as they were; the datetimes travel as ISO text.
    values["occurrence_at"] = datetime.fromisoformat(occurrence_at)
    values["not_before"] = datetime.fromisoformat(not_before)
    return job
