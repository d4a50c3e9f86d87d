"""A ``herald launch`` killed while its check runs in several processes takes its forked check
processes with it, instead of leaving them to compose a share nobody will read
(scheduler.check_pool): on SIGTERM the launch kills them as it unwinds; on SIGKILL a child's
next progress line (one per block of rows) meets a closed pipe and it leaves. Real processes;
every wait has a deadline."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.campaign_files import write_audience, write_campaign
from tests.support.paths import HERALD

RECIPIENTS = 400_000  # a child's share takes seconds to compose: long enough to be seen
DEADLINE = 60.0  # for the child to appear on a busy machine
GONE_WITHIN = 5.0  # after the launch is killed; the child's share alone takes longer


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(child) for child in text.split()]


def _alive(pid: int) -> bool:
    """Running or sleeping; a zombie (dead, not yet reaped by its new parent) is not alive."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM])
def test_killing_a_launch_ends_its_check_processes(tmp_path: Path, stop: signal.Signals) -> None:
    assert len(os.sched_getaffinity(0)) >= 2, "the check runs in one process on one core"
    folder = tmp_path / "c"
    path, _ = write_campaign(folder, recipients=0)
    write_audience(folder / "people.csv", RECIPIENTS)
    launch = subprocess.Popen(
        [str(HERALD), "launch", str(path), "--check-processes", "2",
         "--database-url", f"sqlite:///{tmp_path / 'herald.db'}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        until = time.monotonic() + DEADLINE
        children: list[int] = []
        while not children:
            assert launch.poll() is None, "the launch ended before its check forked"
            assert time.monotonic() < until, "the launch forked no check process"
            children = _children(launch.pid)
            time.sleep(0.01)
        launch.send_signal(stop)
        launch.wait(timeout=DEADLINE)
        gone_by = time.monotonic() + GONE_WITHIN
        while any(_alive(child) for child in children):
            assert time.monotonic() < gone_by, f"check processes outlived the launch: {children}"
            time.sleep(0.01)
    finally:
        if launch.poll() is None:
            launch.kill()
            launch.wait()
