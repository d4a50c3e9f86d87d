"""``pause_on_errors:`` in the campaign file, and the rule the worker applies with it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from campaigns.error_threshold import Window, pause_reason, stored_setting
from campaigns.errors import SpecError
from campaigns.spec import load_campaign
from campaigns.spec_pause import DEFAULT_PAUSE_ON_ERRORS, PauseOnErrors

SPEC = """\
name: brake
from: news@acme.example
audience: [ann@example.com]
{pause}
steps:
  - id: only
    subject: Hi
    text: Hello
"""


def _load(tmp_path: Path, pause: str) -> PauseOnErrors | None:
    path = tmp_path / "c.yaml"
    path.write_text(SPEC.format(pause=pause), encoding="utf-8")
    return load_campaign(path).spec.pause_on_errors


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("", DEFAULT_PAUSE_ON_ERRORS),  # on by default
        ("pause_on_errors: on", DEFAULT_PAUSE_ON_ERRORS),
        ("pause_on_errors: off", None),
        ("pause_on_errors: false", None),
        ('pause_on_errors: "off"', None),
        ("pause_on_errors: {ratio: 0.5}", PauseOnErrors(ratio=0.5, over=100, min=20)),
        (
            "pause_on_errors: {ratio: 0.05, over: 1000, min: 5}",
            PauseOnErrors(ratio=0.05, over=1000, min=5),
        ),
    ],
)
def test_the_setting_as_written(tmp_path: Path, written: str, expected: object) -> None:
    assert _load(tmp_path, written) == expected
    # What a worker reads back from the stored YAML is the same setting.
    assert stored_setting(SPEC.format(pause=written)) == expected


@pytest.mark.parametrize(
    ("written", "message"),
    [
        ("pause_on_errors: {ratio: 1}", "less than 1"),
        ("pause_on_errors: {ratio: 0}", "greater than 0"),
        ("pause_on_errors: {min: 200}", "min (200) is larger than over (100)"),
        ("pause_on_errors: {over: 0}", "must be at least 1, got the number 0"),
        ("pause_on_errors: {over: many}", "expected a whole number"),
        ("pause_on_errors: {ratio: 0.2, after: 3}", "after"),
        ("pause_on_errors:", "needs a value"),
        ("pause_on_errors: sometimes", "pause_on_errors is a mapping or off, not 'sometimes'"),
    ],
)
def test_bad_settings_are_refused_at_their_line(tmp_path: Path, written: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        _load(tmp_path, written)
    assert message in str(caught.value)
    assert caught.value.line == 4


@given(
    finished=st.integers(min_value=0, max_value=500),
    data=st.data(),
    ratio=st.floats(min_value=0.01, max_value=0.99),
    minimum=st.integers(min_value=1, max_value=100),
)
def test_exceeds_is_more_than_ratio_and_at_least_min(
    finished: int, data: st.DataObject, ratio: float, minimum: int
) -> None:
    failed = data.draw(st.integers(min_value=0, max_value=finished))
    setting = PauseOnErrors(ratio=ratio, over=max(500, minimum), min=minimum)
    verdict = Window(finished, failed).exceeds(setting)
    assert verdict == (failed >= minimum and failed / max(finished, 1) > ratio)
    if verdict:  # one more success never makes a paused window look worse
        assert failed > 0


def test_the_reason_names_the_window_and_the_commonest_failure() -> None:
    reason = pause_reason(Window(100, 23), "550 5.7.1 blocked")
    assert reason == (
        "paused automatically: 23 of the last 100 sends failed permanently "
        "(most common: 550 5.7.1 blocked)"
    )
    assert pause_reason(Window(20, 20), None).endswith("20 of the last 20 sends failed permanently")


def test_an_unreadable_stored_spec_keeps_the_brake() -> None:
    assert stored_setting("{not yaml") == DEFAULT_PAUSE_ON_ERRORS
    assert stored_setting("- a list") == DEFAULT_PAUSE_ON_ERRORS
