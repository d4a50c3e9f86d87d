"""Which of the group committer's lanes may be in a transaction, and when (dispatch/committer.py,
"Lanes" and "Small batches wait")."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class LaneTurns:
    """Who may be in a transaction: any number of lanes with ordinary batches, or one lane
    with an exclusive batch alone. A waiting exclusive batch goes before new ordinary ones
    (a steady drain would otherwise keep a heartbeat waiting past the lease).

    A lane holding a small batch waits until no lane is in a transaction ("Small batches
    wait"), and goes before new work: a lane whose transaction ends lets it in before it takes
    more from the queue. Else the lane that just committed, already holding the next requests
    and the interpreter, would start again first, every time, and the small batch (a
    heartbeat among them) would wait as long as requests kept coming."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0  # lanes in an ordinary transaction
        self._exclusive = False  # a lane is in an exclusive one
        self._waiting = 0  # lanes waiting to start an exclusive one
        self._holding = 0  # lanes holding a small batch, until they are in their transaction
        self._let_in = 0  # of those, the ones let in: the lanes are quiet for them

    def _busy(self) -> bool:
        return bool(self._shared or self._exclusive or self._waiting or self._let_in)

    def wait_until_quiet(self) -> bool:
        """Hold a small batch until no lane is in a transaction or about to start one. True:
        it waited, and the lane is let in; it stays counted as holding (so no other lane takes
        new work) until its ``turn(…, let_in=True)``, and may meanwhile take what is queued."""
        with self._cond:
            if not self._busy():
                return False
            self._holding += 1
            while self._busy():
                self._cond.wait()
            self._let_in += 1
            return True

    def let_holders_in(self) -> None:
        """Before a lane takes new work: wait until every lane holding a batch is in its
        transaction."""
        with self._cond:
            while self._holding:
                self._cond.wait()

    @contextlib.contextmanager
    def turn(self, exclusive: bool, *, let_in: bool = False) -> Iterator[None]:
        with self._cond:
            if let_in:
                self._holding -= 1
                self._let_in -= 1
                self._cond.notify_all()
            if exclusive:
                self._waiting += 1
                while self._exclusive or self._shared:
                    self._cond.wait()
                self._waiting -= 1
                self._exclusive = True
            else:
                while self._exclusive or self._waiting:
                    self._cond.wait()
                self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                if exclusive:
                    self._exclusive = False
                else:
                    self._shared -= 1
                self._cond.notify_all()
