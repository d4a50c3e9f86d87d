"""A resolver for tests: answers from a table, never from real DNS."""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from collections.abc import Collection, Mapping, Sequence


class FakeResolver:
    """Maps host -> answers. Also the shape ``dispatch.egress.Resolver`` expects.

    - ``answers``: the same list on every call.
    - ``sequences``: the n-th call gets the n-th list (the last one repeats) - DNS rebinding.
    - ``hanging``: never answers, to exercise the DNS deadline.
    Unknown hosts raise ``socket.gaierror`` like getaddrinfo. Hosts are matched lower-case and
    without a trailing dot.
    """

    def __init__(
        self,
        answers: Mapping[str, Sequence[str]] | None = None,
        *,
        sequences: Mapping[str, Sequence[Sequence[str]]] | None = None,
        hanging: Collection[str] = (),
    ) -> None:
        self._answers = {_key(host): list(found) for host, found in (answers or {}).items()}
        self._sequences = {
            _key(host): [list(found) for found in steps]
            for host, steps in (sequences or {}).items()
        }
        self._hanging = {_key(host) for host in hanging}
        self.calls: Counter[str] = Counter()
        self.log: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        key = _key(host)
        self.calls[key] += 1
        self.log.append((host, port))
        if key in self._hanging:
            await asyncio.Event().wait()  # cancelled by the guard's DNS deadline
        if key in self._sequences:
            steps = self._sequences[key]
            return list(steps[min(self.calls[key], len(steps)) - 1])
        if key in self._answers:
            return list(self._answers[key])
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


def fake_resolver(
    answers: Mapping[str, Sequence[str]] | None = None,
    *,
    sequences: Mapping[str, Sequence[Sequence[str]]] | None = None,
    hanging: Collection[str] = (),
) -> FakeResolver:
    return FakeResolver(answers, sequences=sequences, hanging=hanging)


def _key(host: str) -> str:
    lowered = host.lower()
    return lowered[:-1] if lowered.endswith(".") else lowered
