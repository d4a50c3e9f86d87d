"""A launch's check in several processes (scheduler.check_pool) gives exactly what the
one-process check gives: the same jobs in the same audience order in the spool, the same counts
and first recipient, and, when anything is wrong, the very report of the one-process check
(then nothing composed in parallel is kept). Children are real forked processes."""

from __future__ import annotations

import csv
import os
import signal
import socket
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from campaigns.audience import iter_audience, iter_audience_share
from campaigns.spec import LoadedCampaign, load_campaign
from scheduler.check import check_campaign
from scheduler.check_pool import CheckPool, Shares, check_in_processes, pool_of
from scheduler.check_report import CheckReport
from scheduler.spool import JobSpool
from tests.support.campaign_files import write_campaign

AT = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
STEPS = ("welcome", "tips", "later")  # tests.support.campaign_files.THREE_STEPS


def campaign(folder: Path, rows: list[tuple[str, str, str]]) -> LoadedCampaign:
    path, _ = write_campaign(folder, recipients=0)
    with (folder / "people.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["email", "name", "city"])
        writer.writerows(rows)
    return load_campaign(path)


def people(count: int) -> list[tuple[str, str, str]]:
    return [(f"user{i:05d}@example.com", f"User {i}", f"City{i % 7}") for i in range(count)]


def checked(
    loaded: LoadedCampaign, pool: CheckPool | None, ticks: list[int] | None = None
) -> tuple[CheckReport, dict[str, list[object]]]:
    with JobSpool(STEPS) as spool:
        report = check_campaign(
            loaded,
            AT,
            count_duplicates=False,
            spool=spool,
            pool=pool,
            progress=None if ticks is None else ticks.append,
        )
        entries = {step: list(spool.entries(step)) for step in STEPS}
        counts = {step: spool.count(step) for step in STEPS}
        assert counts == {step: sum(job is not None for _, job in entries[step]) for step in STEPS}
    return report, entries  # type: ignore[return-value]


def pool(processes: int, block: int) -> CheckPool:
    return CheckPool(processes, block=block, min_bytes=0)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    count=st.integers(0, 120),
    processes=st.integers(2, 4),
    block=st.integers(1, 40),
)
def test_the_pooled_check_spools_what_the_single_check_spools(
    tmp_path_factory: pytest.TempPathFactory, count: int, processes: int, block: int
) -> None:
    loaded = campaign(tmp_path_factory.mktemp("c"), people(count))
    single, single_entries = checked(loaded, None)
    ticks: list[int] = []
    pooled, pooled_entries = checked(loaded, pool(processes, block), ticks)
    assert pooled_entries == single_entries
    assert [step for step in STEPS if pooled_entries[step]] == (list(STEPS) if count else [])
    assert (pooled.recipients, pooled.messages) == (single.recipients, single.messages)
    assert pooled.first_recipient == single.first_recipient
    assert pooled.problems == single.problems
    assert pooled.ok == single.ok == (count > 0)  # an empty audience is a problem either way
    assert sum(ticks) == count  # every recipient's progress reached the parent


@pytest.mark.parametrize("bad_at", [1, 7, 8, 30])  # the parent's share and the children's
def test_a_bad_row_anywhere_gives_the_single_check_report(tmp_path: Path, bad_at: int) -> None:
    rows = people(40)
    rows[bad_at - 1] = ("not an address", "Bad", "Nowhere")
    rows[33] = ("also@", "Bad", "Nowhere")
    loaded = campaign(tmp_path, rows)
    single, single_entries = checked(loaded, None)
    pooled, pooled_entries = checked(loaded, pool(3, 7))
    assert not pooled.ok
    assert pooled.problems == single.problems
    assert len(pooled.problems) == 2
    assert (pooled.recipients, pooled.messages) == (single.recipients, single.messages)
    assert pooled_entries == single_entries


def failing_for(tmp_path: Path, user: str, failure: str) -> CheckReport:
    """The report of a 30-row campaign whose ``tips`` step runs ``failure`` for ``user`` only;
    asserts that the check in 2 processes (blocks of 4 rows) reports and spools exactly what
    the one-process check does."""
    campaign(tmp_path, people(30))
    yaml = tmp_path / "campaign.yaml"
    tips = 'text: "Tip for {{ email }}'
    when = f"{{% if name == '{user}' %}}{failure}{{% endif %}}"
    yaml.write_text(yaml.read_text().replace(tips, tips + when))
    loaded = load_campaign(yaml)
    single, single_entries = checked(loaded, None)
    pooled, pooled_entries = checked(loaded, pool(2, 4))
    assert not single.ok
    assert pooled.problems == single.problems
    assert pooled_entries == single_entries
    return single


def test_a_template_failure_in_a_child_gives_the_single_check_report(tmp_path: Path) -> None:
    # User 5 is position 6: block 1 of 4 rows, the child's.
    report = failing_for(tmp_path, "User 5", "{{ nowhere }}")
    assert len(report.problems) == 1
    assert "nowhere" in report.problems[0].error


def test_a_render_limit_in_the_parent_s_share_gives_the_single_check_report(
    tmp_path: Path,
) -> None:
    """A step over a render limit stays refused for every later recipient (templates.
    guarded_render); the rows before it must still be reported as the one-process check
    reports them when the check is run again."""
    # User 9 is position 10: block 2 of 4 rows, the parent's share.
    report = failing_for(tmp_path, "User 9", "{{ 'x' * 10000000 }}")
    assert report.problems[0].where == "line 11 (user00009@example.com)"
    assert "render limit" in report.problems[0].error


def rows_of(loaded: LoadedCampaign) -> Callable[[Callable[[int], bool]], Iterator[object]]:
    return lambda wanted: iter_audience_share(loaded, wanted)


def test_a_killed_child_means_one_process_checks_again(tmp_path: Path) -> None:
    """A child that dies mid-share (killed as the OOM killer would) leaves no summary: the
    result is None (the caller checks again alone) and the spool is empty again."""
    loaded = campaign(tmp_path, people(50))
    parent = os.getpid()
    composed: list[int] = []

    def check_row(spool: JobSpool | None, report: CheckReport, position: int, item: object) -> bool:
        if os.getpid() != parent and position > 20:
            os.kill(os.getpid(), signal.SIGKILL)
        composed.append(position)
        assert spool is not None
        spool.add_problem(position)  # something written, to see it discarded
        report.recipients += 1
        return True

    with JobSpool(STEPS) as spool:
        result = check_in_processes(
            pool(2, 5), spool, Shares[object](rows_of(loaded), check_row), None
        )
        assert result is None
        assert [list(spool.entries(step)) for step in STEPS] == [[], [], []]
        assert spool.positions == spool.skipped == 0
    assert composed
    assert all((p - 1) // 5 % 2 == 0 for p in composed)


def test_processes_that_read_different_rows_are_not_trusted(tmp_path: Path) -> None:
    """A file changed between the processes' reads: they saw different numbers of rows."""
    loaded = campaign(tmp_path, people(30))
    parent = os.getpid()

    def rows(wanted: Callable[[int], bool]) -> Iterator[object]:
        shown = iter_audience_share(loaded, wanted)
        if os.getpid() == parent:
            return shown
        return (row for index, row in enumerate(shown) if index < 29)

    def check_row(spool: JobSpool | None, report: CheckReport, position: int, item: object) -> bool:
        report.recipients += 1
        return True

    with JobSpool(STEPS) as spool:
        assert check_in_processes(pool(2, 4), spool, Shares[object](rows, check_row), None) is None


def test_a_small_file_or_another_audience_is_checked_in_one_process(tmp_path: Path) -> None:
    loaded = campaign(tmp_path / "csv", people(10))
    size = (tmp_path / "csv" / "people.csv").stat().st_size
    assert CheckPool(2, min_bytes=size).takes(loaded)
    assert not CheckPool(2, min_bytes=size + 1).takes(loaded)
    assert not CheckPool(1, min_bytes=0).takes(loaded)
    inline = tmp_path / "inline"
    inline.mkdir()
    (inline / "c.yaml").write_text(
        'name: inline\nfrom: "A <a@herald.test>"\naudience:\n  - email: x@example.com\n'
        "steps:\n  - id: s\n    subject: Hi\n    text: Hello\n"
    )
    assert not CheckPool(2, min_bytes=0).takes(load_campaign(inline / "c.yaml"))


def test_the_default_pool_has_a_process_per_core_up_to_four() -> None:
    cores = len(os.sched_getaffinity(0))
    assert pool_of() == (None if cores < 2 else CheckPool(min(cores, 4)))
    assert pool_of(None) == pool_of()
    assert pool_of(1) is None  # --check-processes 1: the launch's own process only
    assert pool_of(6) == CheckPool(6)  # asked for: not capped


@settings(max_examples=60, deadline=None)
@given(
    cells=st.lists(
        st.tuples(
            st.sampled_from(["a@example.com", "bad", "", "q@x.test", "é@x.test"]),
            st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=8),
        ),
        max_size=25,
    ),
    blank_lines=st.lists(st.integers(0, 30), max_size=4),
    modulus=st.integers(1, 4),
)
def test_a_share_reads_its_rows_as_the_whole_reader_does_and_none_for_others(
    tmp_path_factory: pytest.TempPathFactory,
    cells: list[tuple[str, str]],
    blank_lines: list[int],
    modulus: int,
) -> None:
    """Hostile cells (quotes, line breaks, commas in names), blank rows between them: the
    share reader's positions are the whole reader's, row for row."""
    folder = tmp_path_factory.mktemp("share")
    rows: list[list[str]] = [["email", "name"], *([email, name] for email, name in cells)]
    for at in sorted(blank_lines, reverse=True):
        rows.insert(min(at + 1, len(rows)), ["", ""])
    with (folder / "people.csv").open("w", newline="") as handle:
        csv.writer(handle).writerows(rows)
    (folder / "c.yaml").write_text(
        'name: share\nfrom: "A <a@herald.test>"\naudience: people.csv\n'
        "steps:\n  - id: s\n    subject: Hi\n    text: Hello\n"
    )
    loaded = load_campaign(folder / "c.yaml")
    whole = list(iter_audience(loaded))
    shared = list(iter_audience_share(loaded, lambda position: position % modulus == 0))
    assert len(shared) == len(whole)
    for position, (mine, theirs) in enumerate(zip(shared, whole, strict=True), start=1):
        assert mine == (theirs if position % modulus == 0 else None)


@pytest.fixture
def wakeup() -> Iterator[socket.socket]:
    """A SIGTERM handler and a signal wake-up descriptor in this process, as a scheduler's
    asyncio loop has them; the socket that descriptor writes to."""
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    previous_fd = signal.set_wakeup_fd(writer.fileno())
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        yield reader
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.set_wakeup_fd(previous_fd)
        reader.close()
        writer.close()


def test_a_child_s_stop_signal_is_not_the_parent_s(wakeup: socket.socket) -> None:
    """A composing child that receives SIGTERM stops (the parent composes alone), and its
    signal never reaches the parent's wake-up descriptor (a scheduler would take it for a
    second stop and exit at once)."""
    parent = os.getpid()

    def stop_in_child(
        spool: JobSpool | None, report: CheckReport, position: int, item: Any
    ) -> bool:
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)
        return True

    def rows(wanted: Any) -> Iterator[Any]:
        return iter([object() if wanted(at) else None for at in range(1, 7)])

    with JobSpool(["a"]) as spool:
        result = check_in_processes(
            CheckPool(2, block=1), spool, Shares[Any](rows, stop_in_child), None
        )
    assert result is None
    with pytest.raises(BlockingIOError):
        wakeup.recv(16)


def _numbers(wanted: Callable[[int], bool]) -> Iterator[Any]:
    return iter([at if wanted(at) else None for at in range(1, 31)])


def _job_of(spool: JobSpool | None, report: CheckReport, position: int, item: Any) -> bool:
    assert spool is not None
    spool.add_problem(position)  # a record at this position, enough to see who wrote what
    report.recipients += 1
    return True


@pytest.mark.parametrize("processes", [2, 3])
def test_beside_the_parent_s_own_work_the_children_take_every_share(processes: int) -> None:
    """With ``beside``, the parent composes nothing: it runs that work while one child per
    share composes; the spool holds every position once, in order."""
    parent = os.getpid()
    ran: list[int] = []
    with JobSpool(["a"]) as spool:
        report = check_in_processes(
            CheckPool(processes, block=4),
            spool,
            Shares[Any](_numbers, _job_of),
            None,
            beside=lambda: ran.append(os.getpid()),
        )
        assert report is not None
        assert report.recipients == 30
        assert [position for position, _ in spool.entries("a")] == list(range(1, 31))
    assert ran == [parent]


def test_what_the_parent_s_own_work_raises_drops_the_children_s() -> None:
    def failing() -> None:
        raise RuntimeError("the snapshot failed")

    with JobSpool(["a"]) as spool:
        with pytest.raises(RuntimeError, match="the snapshot failed"):
            check_in_processes(
                CheckPool(2, block=4), spool, Shares[Any](_numbers, _job_of), None, beside=failing
            )
        assert list(spool.entries("a")) == []
