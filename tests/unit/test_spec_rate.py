"""The campaign file's `rate:` (campaigns.spec_rate): read as a count per second, minute or
hour; anything else is one problem on its line, with a hint."""

from __future__ import annotations

from pathlib import Path

import pytest

from campaigns.spec import load_campaign
from dispatch.rates import Rate
from tests.unit.test_campaign_spec import load_error, single_problem, spec_with_steps, write

STEPS = """\
- id: hello
  subject: Hi
  text: t
"""


@pytest.mark.parametrize(
    ("written", "rate"),
    [("50/s", Rate(50, "s")), ("300/m", Rate(300, "m")), ("'2/h'", Rate(2, "h"))],
)
def test_a_rate_per_second_minute_or_hour(tmp_path: Path, written: str, rate: Rate) -> None:
    loaded = load_campaign(write(tmp_path, spec_with_steps(STEPS, top=f"rate: {written}\n")))
    assert loaded.spec.rate == rate


def test_no_rate_by_default(tmp_path: Path) -> None:
    assert load_campaign(write(tmp_path, spec_with_steps(STEPS))).spec.rate is None


@pytest.mark.parametrize(
    ("written", "message"),
    [
        ("50", "expected a rate such as 50/s, got int 50"),
        ("50/d", "invalid rate '50/d'"),
        ("0/s", "invalid rate '0/s': must be more than zero"),
        ("fast", "invalid rate 'fast'"),
        ("[50/s]", "expected a rate such as 50/s, got list"),
    ],
)
def test_an_unreadable_rate_is_one_problem_on_its_line(
    tmp_path: Path, written: str, message: str
) -> None:
    text = spec_with_steps(STEPS, top=f"rate: {written}\n")
    problem = single_problem(load_error(tmp_path, text))
    assert (problem.line, problem.field) == (4, "rate")
    assert problem.message.startswith(message)
    assert problem.hint is not None
    assert "50/s" in problem.hint
