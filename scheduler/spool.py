"""The jobs a launch's check composed, kept on disk so that fan-out does not compose them again.

``launch`` must render every message before it writes the first job (one broken row refuses
the whole launch), and fan-out writes them in batches afterwards. Rendering twice doubled the
launch's CPU; keeping the rendered jobs in memory would grow with the audience. So the check
appends each job it composes to one temporary file per step, in audience order with its
position, and fan-out streams them back: each message is composed once, memory stays flat.

The files are anonymous temporary files (``tempfile.TemporaryFile``: mode 0600, unlinked at
once, gone when closed or when the process dies): they hold rendered messages, i.e. personal
data. Payloads are compressed (zlib level 1: cheap next to rendering), so the spool takes a
fraction of the space the outbox will.

Record: two big-endian u32 lengths, then a JSON array of the job's fields (just ``[position]``
for an unusable audience row) and the compressed payload. Only this module reads and writes it.
"""

from __future__ import annotations

import json
import struct
import tempfile
import zlib
from collections.abc import Iterable, Iterator
from datetime import datetime
from types import TracebackType
from typing import IO, Final

from dispatch.store import NewJob

_HEADER: Final = struct.Struct(">II")

#: One entry of a step's stream: the audience position, and the job (None: an unusable row).
Entry = tuple[int, NewJob | None]


class JobSpool:
    """Composed jobs per step. Use as a context manager; ``complete`` once the check passed."""

    def __init__(self, steps: Iterable[str]) -> None:
        self._files: dict[str, IO[bytes]] = {}
        self._counts: dict[str, int] = {}
        for step in steps:
            self._files[step] = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
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
        self._write(job.step, fields, zlib.compress(job.payload, 1))
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
        file = self._files[step]
        file.flush()
        file.seek(0)
        while header := file.read(_HEADER.size):
            record_size, payload_size = _HEADER.unpack(header)
            fields = json.loads(file.read(record_size))
            payload = file.read(payload_size)
            if len(fields) == 1:
                yield fields[0], None
                continue
            yield fields[0], _job(fields, zlib.decompress(payload))
        file.seek(0, 2)  # appending stays possible

    def _write(self, step: str, fields: list[object], payload: bytes) -> None:
        record = json.dumps(fields).encode()
        self._files[step].write(_HEADER.pack(len(record), len(payload)) + record + payload)

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


def _job(fields: list[object], payload: bytes) -> NewJob:
    (_, key, key_tuple, campaign, step, occurrence_at, channel, sender, recipient, message_id,
     not_before, max_send_attempts, max_claims, in_doubt_policy, mailbox,
     window, list_scope) = fields  # fmt: skip
    return NewJob(
        key=str(key),
        key_tuple=str(key_tuple),
        campaign=str(campaign),
        step=str(step),
        occurrence_at=datetime.fromisoformat(str(occurrence_at)),
        channel=str(channel),
        sender=str(sender),
        recipient=str(recipient),
        message_id=str(message_id),
        payload=payload,
        not_before=datetime.fromisoformat(str(not_before)),
        max_send_attempts=int(str(max_send_attempts)),
        max_claims=int(str(max_claims)),
        in_doubt_policy=str(in_doubt_policy),
        mailbox=None if mailbox is None else str(mailbox),
        send_window=None if window is None else str(window),
        list_scope=None if list_scope is None else str(list_scope),
    )
