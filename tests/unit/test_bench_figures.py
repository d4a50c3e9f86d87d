"""The benchmark's pure parts: median and range, the load rule that withholds a ratio, targets,
interleaved order, and the JSON's shape (bench.report, bench.load, bench.rounds, bench.results)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.context import Context, Options
from bench.cpu import CpuUse
from bench.extras import NotMeasured
from bench.load import LoadSample, load_verdict, loads_differ
from bench.optional import lookup
from bench.report import Report, Target, median_range, verdict
from bench.results import document
from bench.rounds import Contender, interleave, order
from bench.sections import report_outbox_size

OPTIONS = Options(
    jobs=10, concurrency=2, repeat=2, procrastinate_jobs=5, pgqueuer_batches=(100,),
    recipients=10, smtp_messages=10, smtp_concurrency=2, smtp_repeat=1, recovery_lease=5.0,
    sections=("drain",), tracemalloc=False, json_path="x.json",
)  # fmt: skip


def loads(*values: float) -> list[LoadSample]:
    return [LoadSample(v, None) for v in values]


def test_median_and_range_of_repetitions() -> None:
    assert median_range([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)
    assert median_range([4.0, 1.0]) == (2.5, 1.0, 4.0)
    with pytest.raises(ValueError, match="no values"):
        median_range([])


@given(st.lists(st.floats(min_value=0, max_value=1e9), min_size=1, max_size=9))
def test_the_median_lies_within_the_range(values: list[float]) -> None:
    median, low, high = median_range(values)
    assert low <= median <= high


@pytest.mark.parametrize(
    ("a", "b", "withheld"),
    [
        (0.4, 2.9, True),  # the brief's example
        (2.0, 3.2, True),
        (0.1, 0.4, False),  # idle machine: a factor means nothing
        (17.1, 18.4, False),  # one apart but the same contention
        (10.0, 12.0, False),
        (1.0, 1.9, False),
        (1.0, 2.1, True),
    ],
)
def test_load_rule(a: float, b: float, withheld: bool) -> None:
    assert (loads_differ(a, b) is not None) is withheld
    assert (loads_differ(b, a) is not None) is withheld


def test_withheld_says_both_loads() -> None:
    assert loads_differ(0.4, 2.9) == "load differed, 0.4 vs 2.9"


def test_load_rule_compares_median_loads_of_the_repetitions() -> None:
    assert load_verdict(loads(0.3, 0.5, 3.0), loads(0.4, 0.6, 0.5)) is None
    assert load_verdict(loads(3.0, 3.1, 0.2), loads(0.4, 0.6, 0.5)) is not None
    assert load_verdict([], loads(9.0)) is None  # a reference figure has no load to judge


def test_ratio_of_medians_and_its_target() -> None:
    report = Report()
    herald = report.add("h", "drain", [100.0, 300.0, 200.0], "jobs/s", loads=loads(1, 1, 1))
    other = report.add("o", "drain", [100.0, 90.0, 110.0], "jobs/s", loads=loads(1, 1.2, 1))
    ratio = report.ratio("h/o", herald, other, Target("h/o", "≥", 1.0))
    assert ratio.value == pytest.approx(2.0)
    assert ratio.withheld is None
    assert report.targets[-1][2] == "MET"
    assert "h/o = 2.00x" in report.render()


def test_ratio_withheld_when_loads_differ_and_its_target_not_judged() -> None:
    report = Report()
    herald = report.add("h", "drain", [100.0], "jobs/s", loads=loads(0.4))
    other = report.add("o", "drain", [50.0], "jobs/s", loads=loads(2.9))
    ratio = report.ratio("h/o", herald, other, Target("h/o", "≥", 1.0))
    assert ratio.text() == "h/o = withheld: load differed, 0.4 vs 2.9"
    assert report.targets[-1][2] == "withheld: load differed, 0.4 vs 2.9"
    assert "2.00x" not in report.render()


def test_missing_figure_makes_a_ratio_not_computable() -> None:
    report = Report()
    missing = report.add("o", "drain", None, "jobs/s")
    assert missing.value_text() == "not measured"
    ratio = report.ratio("h/o", 5.0, missing, Target("h/o", "≥", 1.0))
    assert ratio.value is None
    assert report.targets[-1][2] == "not measured"


def test_target_verdicts_both_ways() -> None:
    assert verdict(Target("t", "≤", 0.3), 0.29) == "MET"
    assert verdict(Target("t", "≤", 0.3), 0.31) == "NOT MET"
    assert verdict(Target("t", "≥", 20), 19.9) == "NOT MET"


def test_repetitions_are_interleaved_round_by_round() -> None:
    assert order(["A", "B", "C"], 2) == [
        (0, "A"), (0, "B"), (0, "C"), (1, "B"), (1, "C"), (1, "A"),
    ]  # fmt: skip


@given(st.lists(st.text(min_size=1), min_size=1, max_size=8, unique=True), st.integers(1, 12))
def test_every_round_runs_each_once_and_each_goes_first_in_turn(
    names: list[str], repeat: int
) -> None:
    runs = order(names, repeat)
    for r in range(repeat):
        this_round = [name for round_index, name in runs if round_index == r]
        assert sorted(this_round) == sorted(names)
        assert this_round[0] == names[r % len(names)]
    assert [r for r, _ in runs] == sorted(r for r, _ in runs)  # rounds never mix


def test_interleave_runs_in_rounds_and_drops_what_cannot_be_measured() -> None:
    ran: list[str] = []

    def measure(name: str) -> CpuUse:
        ran.append(name)
        if name == "B":
            raise NotMeasured("not installed")
        if name == "C" and ran.count("C") == 1:
            raise RuntimeError("flaky")
        return CpuUse()

    contenders = [Contender(n, lambda n=n: measure(n)) for n in "ABC"]  # type: ignore[misc]
    samples = iter(range(100))
    outcomes = interleave(
        contenders, 3, sampler=lambda: LoadSample(float(next(samples)), None), say=lambda _: None
    )
    assert ran == ["A", "B", "C", "C", "A", "C", "A"]
    assert outcomes["B"].unavailable == "not installed"
    assert not outcomes["B"].measured
    assert len(outcomes["C"].runs) == 2
    assert outcomes["C"].errors == ["RuntimeError: flaky"]
    assert [s.load1 for s in outcomes["A"].loads] == [0.0, 4.0, 6.0]


def test_json_document_holds_figures_ratios_targets_machine_and_loads() -> None:
    ctx = Context(OPTIONS, Report(), postgres=True)
    a = ctx.report.add("h", "drain", [1.0, 3.0], "jobs/s", n=10, loads=[LoadSample(0.5, 0.1)] * 2)
    ctx.report.ratio("h/h", a, a, Target("h/h", "≥", 1.0))
    ctx.report.missing.append("pooler: not measured: absent")
    machine = {"commit": "abc", "cores": 2}
    doc = json.loads(json.dumps(document(ctx, machine, datetime(2026, 1, 1, tzinfo=UTC), 1.5)))
    assert doc["machine"] == machine
    assert doc["timestamp"] == "2026-01-01T00:00:00+00:00"
    assert doc["options"]["repeat"] == 2
    figure = doc["figures"][0]
    assert (figure["median"], figure["min"], figure["max"]) == (2.0, 1.0, 3.0)
    assert figure["samples"] == [1.0, 3.0]
    assert figure["loads"][0] == {
        "load1": 0.5,
        "others_busy": 0.1,
    }
    assert doc["ratios"][0] == {
        "ratio": "h/h", "value": 1.0, "withheld": None, "median_loads": [0.5, 0.5], "target": "≥ 1",
    }  # fmt: skip
    assert doc["targets"][0]["verdict"] == "MET"
    assert doc["not_measured"] == ["pooler: not measured: absent"]
    assert doc["failed"] == []


def test_optional_sections_are_looked_up_by_name_or_say_why_not() -> None:
    assert lookup("json", "dumps") is json.dumps
    assert lookup("bench.no_such_module", "measure") == "bench.no_such_module is not in this build"
    assert lookup("json", "no_such_function") == "json.no_such_function is not defined"


@dataclass(frozen=True)
class FakeSizes:
    send_job_heap: int
    send_job_total: int
    send_event_total: int

    @property
    def total(self) -> int:
        return self.send_job_total + self.send_event_total


@dataclass(frozen=True)
class FakeOutboxSize:
    jobs: int
    prune_seconds: float
    sent: FakeSizes


def test_outbox_size_reports_each_size_set_as_its_total_and_keeps_all_for_the_json() -> None:
    ctx = Context(OPTIONS, Report(), postgres=True)
    mib = 1024 * 1024
    result = FakeOutboxSize(10, 1.5, FakeSizes(50 * mib, 100 * mib, 200 * mib))
    report_outbox_size(ctx, result, 10)
    figures = {f.what: f for f in ctx.report.figures}
    assert figures["size per million jobs, sent"].value == 300.0
    assert figures["size per million jobs, sent"].note == "send_job 100, send_event 200"
    assert figures["prune seconds"].value == 1.5
    assert ctx.report.as_dict()["details"]["outbox_size"]["sent"].send_job_heap == 50 * mib
