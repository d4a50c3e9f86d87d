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

File: blocks, each a big-endian u32 length and that many bytes of zlib data. Record (inside a
block): two big-endian u32 lengths, then a JSON array of the job's fields (just ``[position]``
for an unusable audience row) and the payload. Only this module reads and writes it.
"""

from __future__ import annotations

import json
import struct
import tempfile
import zlib
from collections.abc import Iterable, Iterator
from datetime import datetime
from types import TracebackType
from typing import IO, Any, Final

from dispatch.store import NewJob

_HEADER: Final = struct.Struct(">II")
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
        self._pending: dict[str, bytearray] = {}  # each step's block being gathered
        self._counts: dict[str, int] = {}
        for step in steps:
            self._files[step] = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
            self._pending[step] = bytearray()
            self._counts[step] = 0
        self.positions = 0  # audience rows seen, unusable ones included
        self.skipped = 0  # unusable audience rows
        self.complete = False  # set by the check when every message composed

    def add_job(self, position: int, job: NewJob) -> None:
        fields = [
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
        ]
        self._write(job.step, fields, job.payload)
        self._counts[job.step] += 1
        self.positions = max(self.positions, position)

    def add_problem(self, position: int) -> None:
        """An unusable audience row: every step's stream keeps its position."""
        for step in self._files:
            self._write(step, [position], b"")
        self.skipped += 1
        self.positions = max(self.positions, position)

    def count(self, step: str) -> int:
        """How many jobs ``step`` has."""
        return self._counts[step]

    def entries(self, step: str) -> Iterator[Entry]:
        """``step``'s jobs and unusable rows, in audience order."""
        self._write_block(step)
        file = self._files[step]
        file.flush()
        file.seek(0)
        while header := file.read(_BLOCK.size):
            (block_size,) = _BLOCK.unpack(header)
            block = zlib.decompress(file.read(block_size))
            at = 0
            while at < len(block):
                record_size, payload_size = _HEADER.unpack_from(block, at)
                at += _HEADER.size
                fields = json.loads(block[at : at + record_size])
                at += record_size
                payload = block[at : at + payload_size]
                at += payload_size
                yield fields[0], None if len(fields) == 1 else _job(fields, payload)
        file.seek(0, 2)  # appending stays possible

    def _write(self, step: str, fields: list[object], payload: bytes) -> None:
        record = json.dumps(fields).encode()
        pending = self._pending[step]
        pending += _HEADER.pack(len(record), len(payload))
        pending += record
        pending += payload
        if len(pending) >= BLOCK_BYTES:
            self._write_block(step)

    def _write_block(self, step: str) -> None:
        pending = self._pending[step]
        if pending:
            block = zlib.compress(pending, 1)
            self._files[step].write(_BLOCK.pack(len(block)) + block)
            pending.clear()

    def close(self) -> None:
        for file in self._files.values():
            file.close()

    def __enter__(self) -> JobSpool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _job(fields: list[Any], payload: bytes) -> NewJob:
    # Written by add_job from a NewJob, so each field already has its type (JSON keeps str,
    # int and None as they were); only the datetimes travel as ISO text.
    (_, key, key_tuple, campaign, step, occurrence_at, channel, sender, recipient, message_id,
     not_before, max_send_attempts, max_claims, in_doubt_policy, mailbox,
     window, list_scope) = fields  # fmt: skip
    return NewJob(
        key=key,
        key_tuple=key_tuple,
        campaign=campaign,
        step=step,
        occurrence_at=datetime.fromisoformat(occurrence_at),
        channel=channel,
        sender=sender,
        recipient=recipient,
        message_id=message_id,
        payload=payload,
        not_before=datetime.fromisoformat(not_before),
        max_send_attempts=max_send_attempts,
        max_claims=max_claims,
        in_doubt_policy=in_doubt_policy,
        mailbox=mailbox,
        send_window=window,
        list_scope=list_scope,
    )
