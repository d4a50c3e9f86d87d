"""How ``herald status`` reaches the screen: once (``render``), or (``--watch``) a new
snapshot every ``interval`` seconds until Ctrl-C (exit 0) or ``count`` snapshots.

On a terminal the screen is redrawn in place (rich Live), laid out afresh each time for the
terminal's current width. Piped, each snapshot is printed in full after a separator line
(``--- herald status <time> ---``), so a log of the output reads as a series; with ``--json``,
one compact JSON document per line (JSON Lines).

Refreshes keep to a schedule (a slow query does not make every later refresh later) and the
wait is on a stop a signal handler can set (``herald.signal_stop``), so Ctrl-C ends it at
once. A database that stops answering in the middle of a watch (a PostgreSQL restart) does not
end it: the last screen stays, under a line saying why it is not fresh, and the next refresh
tries again. The first snapshot must succeed: a
wrong URL is still an error at once.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rich.text import Text

from herald.cli.status_view import status_lines
from herald.cli.textfit import fold
from herald.cli.timefmt import utc_text
from herald.output import err, styled
from herald.signal_stop import SignalStop, signal_sets

if TYPE_CHECKING:
    from rich.console import Console

Snapshot = dict[str, Any]


def watch_status(
    console: Console,
    take: Callable[[], Snapshot],
    *,
    interval: float,
    count: int | None,
    as_json: bool,
    width: int | None,
) -> None:
    take = _lasting(take)
    stop = SignalStop()
    try:
        # Ctrl-C sets ``stop`` instead of raising KeyboardInterrupt wherever the process
        # happens to be: inside a database query, an interrupt would leave the driver and the
        # pool to clean up mid-statement (seen as exit 1); the watch ends at its next tick.
        with signal_sets(signal.SIGINT, stop):
            if console.is_terminal and not as_json:
                _live(console, take, interval, count, width, stop)
            else:
                _series(console, take, interval, count, as_json, width, stop)
    except KeyboardInterrupt:
        pass  # the way out of a watch: not an error
    finally:
        stop.close()


class _Stale(Exception):
    """A refresh failed: ``last`` is the snapshot before, ``why`` the database's one line."""

    def __init__(self, last: Snapshot, why: str) -> None:
        super().__init__(why)
        self.last = last
        self.why = why


def _lasting(take: Callable[[], Snapshot]) -> Callable[[], Snapshot]:
    """``take``, except that after a first success an unreachable database raises ``_Stale``
    (with the last snapshot) instead of ending the watch."""
    from sqlalchemy.exc import OperationalError

    from herald.secrets import known_secrets

    last: list[Snapshot] = []

    def attempt() -> Snapshot:
        try:
            snapshot = take()
        except OperationalError as exc:
            if not last:
                raise
            detail = str(exc.orig or exc).strip().splitlines() or ["no detail"]
            raise _Stale(last[0], known_secrets.scrub(detail[0])) from exc
        last[:] = [snapshot]
        return snapshot

    return attempt


def _stale_line(stale: _Stale) -> Text:
    return styled(f"✗ not refreshed, the database did not answer: {stale.why}", "bold red")


def _ticks(interval: float, count: int | None, stop: SignalStop) -> Iterator[int]:
    """Yields once per refresh, on a fixed schedule from the first, until ``stop`` is set."""
    start = time.monotonic()
    n = 0
    while count is None or n < count:
        if stop.is_set():
            return
        yield n
        n += 1
        if count is not None and n >= count:
            return
        if stop.wait(max(start + n * interval - time.monotonic(), 0)):
            return


def _live(
    console: Console,
    take: Callable[[], Snapshot],
    interval: float,
    count: int | None,
    width: int | None,
    stop: SignalStop,
) -> None:
    from rich.console import Group
    from rich.live import Live

    with Live(console=console, auto_refresh=False, vertical_overflow="ellipsis") as live:
        for _ in _ticks(interval, count, stop):
            try:
                lines = status_lines(take(), width or console.width)
            except _Stale as stale:
                lines = [
                    *fold(_stale_line(stale), width or console.width),
                    *status_lines(stale.last, width or console.width),
                ]
            live.update(Group(*lines), refresh=True)


def _series(
    console: Console,
    take: Callable[[], Snapshot],
    interval: float,
    count: int | None,
    as_json: bool,
    width: int | None,
    stop: SignalStop,
) -> None:
    for n in _ticks(interval, count, stop):
        try:
            snapshot = take()
        except _Stale as stale:
            err.print(_stale_line(stale), soft_wrap=True)
            continue
        if as_json:
            console.out(json.dumps(snapshot), highlight=False)
            console.file.flush()
            continue
        if n:
            console.print("")
        when = utc_text(datetime.fromisoformat(snapshot["now"]))
        console.print(Text(f"--- herald status {when} ---"), soft_wrap=True)
        render(console, snapshot, width=width)
        console.file.flush()


def render(console: Console, snapshot: dict[str, Any], *, width: int | None = None) -> None:
    """``snapshot`` on ``console``, laid out for ``width`` or ``screen_width(console)``."""
    for line in status_lines(snapshot, width or screen_width(console)):
        console.print(line, soft_wrap=True)


def screen_width(console: Console) -> int | None:
    """A terminal's width; piped, ``$COLUMNS`` if set (the caller asked for a width), else
    None: unlimited, every name whole, for `grep` and for files."""
    if console.is_terminal:
        return console.width
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else None
