"""Launch (fan-out) throughput and memory: CSV → rendered send jobs, the way ``herald launch`` does.

A one-step campaign over an N-row CSV goes through the application layer's ``launch``
(``herald.app.launch``: check, every message composed once, register, fan-out), as ``herald
launch`` does. Each launch runs in a child
process (``python -m bench.fanout``) so that its memory is its own: the child reports the
elapsed time and how far its peak resident set grew during the launch (the peak during the
launch, from /proc/self/status VmHWM after a reset, minus VmRSS just before it; imports are
already done).

tracemalloc's peak (Python allocations only) is available with ``--tracemalloc``; it is not
part of the default run because tracing slows a launch about 4.5-fold (a 40,000-recipient
traced launch alone takes minutes), and its run is never the one timed.
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
import subprocess
import sys
import time
import tracemalloc
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench.cpu import backend_cpu_seconds
from bench.databases import postgres_database
from herald.app.launch import launch as launch_campaign
from herald.db import create_engine

LAUNCH_AT = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
REPO = Path(__file__).resolve().parent.parent
CHILD_TIMEOUT_SECONDS = 900
# Plus this much per recipient: a 1,000,000-recipient launch (``make bench-big``) on a loaded
# 2-core machine takes far longer than the default run's sizes.
CHILD_TIMEOUT_PER_RECIPIENT = 0.005

CAMPAIGN = """\
name: {name}
from: "Herald Bench <news@herald.test>"
audience: people.csv
steps:
  - id: hello
    subject: "Hello {{{{ name }}}}"
    text: "Hi {{{{ name }}}}, here is the news for {{{{ city }}}}."
"""


@dataclass(frozen=True)
class LaunchFigures:
    recipients: int
    seconds: float
    rss_growth_bytes: int  # peak RSS during the launch minus peak RSS before it
    traced_peak_bytes: int | None  # tracemalloc peak, when traced (then ``seconds`` is inflated)
    # CPU seconds of the launching process and the processes it started (a render pool), and
    # of the PostgreSQL backends serving it (None on SQLite or when /proc is unreadable): on a
    # shared machine these move much less than ``seconds``.
    cpu_seconds: float | None = None
    backend_cpu_seconds: float | None = None
    peak_rss_bytes: int | None = None  # the launching process's peak resident set
    # The largest peak resident set of the processes the launch forked to check its audience
    # (scheduler.check_pool); None if it forked none. Pages shared with the parent count in both.
    children_peak_rss_bytes: int | None = None

    @property
    def cpu_us_per_message(self) -> tuple[float | None, float | None]:
        """(process + children, PostgreSQL backends) CPU microseconds per message."""

        def per(seconds: float | None) -> float | None:
            return None if seconds is None else seconds / self.recipients * 1e6

        return per(self.cpu_seconds), per(self.backend_cpu_seconds)

    @property
    def messages_per_second(self) -> float:
        return self.recipients / self.seconds


def write_campaign(folder: Path, recipients: int, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "people.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["email", "name", "city"])
        for i in range(recipients):
            writer.writerow([f"user{i:07d}@example.com", f"User {i}", f"City{i % 7}"])
    path = folder / "campaign.yaml"
    path.write_text(CAMPAIGN.format(name=name))
    return path


def launch(url: str, path: Path, cpu: dict[str, float | None] | None = None) -> int:
    """check → register → fan-out; returns the number of new jobs. ``cpu`` receives the
    PostgreSQL backends' CPU seconds (``backend``), read while their connections are open."""
    database = postgres_database(url)
    before = (backend_cpu_seconds(database) or {}) if database else None
    engine = create_engine(url)
    try:
        created = launch_campaign(engine, path, clock=lambda: LAUNCH_AT, actor="bench")
        if cpu is not None and before is not None and database is not None:
            after = backend_cpu_seconds(database)
            cpu["backend"] = (
                None if after is None else sum(t - before.get(pid, 0.0) for pid, t in after.items())
            )
        return created.fanout.new_jobs
    finally:
        engine.dispose()


def measure_launch(url: str, path: Path, recipients: int, *, traced: bool = False) -> LaunchFigures:
    """One launch in a child process; raises if it fails or creates the wrong number of jobs."""
    command = [sys.executable, "-m", "bench.fanout", url, str(path)]
    if traced:
        command.append("--tracemalloc")
    done = subprocess.run(
        command,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_SECONDS + recipients * CHILD_TIMEOUT_PER_RECIPIENT,
        check=False,
    )
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"launch child failed ({done.returncode}): {tail}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    if figures["created"] != recipients:
        raise RuntimeError(f"launch created {figures['created']} jobs for {recipients} recipients")
    return LaunchFigures(
        recipients=recipients,
        seconds=figures["seconds"],
        rss_growth_bytes=figures["rss_growth"],
        traced_peak_bytes=figures["traced_peak"],
        cpu_seconds=figures.get("cpu"),
        backend_cpu_seconds=figures.get("backend_cpu"),
        peak_rss_bytes=figures.get("peak_rss"),
        children_peak_rss_bytes=figures.get("children_peak_rss"),
    )


# ---------------------------------------------------------------- the child process


def _proc_status_bytes(field: str) -> int | None:
    """A ``kB`` field of /proc/self/status (Linux), e.g. VmRSS or VmHWM; None elsewhere."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_peak_rss() -> bool:
    """Start a new high-water mark (Linux ≥ 4.0: ``echo 5 > /proc/self/clear_refs``)."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError:
        return False
    return True


def _rss_window() -> tuple[int, bool]:
    """(resident bytes now, whether the peak was reset); falls back to ru_maxrss (bytes)."""
    current = _proc_status_bytes("VmRSS")
    if current is not None and _reset_peak_rss():
        return current, True
    return _ru_maxrss_bytes(), False


def _ru_maxrss_bytes() -> int:
    # Inherited across fork and kept across exec on Linux: only a fallback.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB


def _peak_since(reset: bool) -> int:
    peak = _proc_status_bytes("VmHWM") if reset else None
    return peak if peak is not None else _ru_maxrss_bytes()


def _cpu_seconds() -> float:
    """This process's CPU and that of its waited-for children (a render pool's workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _child(url: str, path: Path, traced: bool) -> dict[str, float | int | None]:
    before, reset = _rss_window()
    if traced:
        tracemalloc.start()
    cpu: dict[str, float | None] = {}
    cpu_before = _cpu_seconds()
    started = time.perf_counter()
    created = launch(url, path, cpu)
    seconds = time.perf_counter() - started
    cpu_used = _cpu_seconds() - cpu_before
    traced_peak = None
    if traced:
        _, traced_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    peak = _peak_since(reset)
    return {
        "created": created,
        "seconds": seconds,
        "rss_growth": peak - before,
        "traced_peak": traced_peak,
        "cpu": cpu_used,
        "backend_cpu": cpu.get("backend"),
        "peak_rss": peak,
        "children_peak_rss": _children_peak_rss(),
    }


def _children_peak_rss() -> int | None:
    """The largest peak RSS of the waited-for children (the check's forked processes)."""
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if not peak:
        return None
    return peak if sys.platform == "darwin" else peak * 1024


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fanout")
    parser.add_argument("url")
    parser.add_argument("campaign", type=Path)
    parser.add_argument("--tracemalloc", action="store_true")
    args = parser.parse_args(argv)
    print(json.dumps(_child(args.url, args.campaign, args.tracemalloc)))


if __name__ == "__main__":
    main()
