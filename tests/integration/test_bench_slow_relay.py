"""``python -m bench.smtp_e2e --reply-delay``: Herald and the bare loop against a relay a round
trip away (a relay across a network, offering PIPELINING). Both runs must deliver every message,
as the relay counts them, and the round trips must show in the time taken. And ``make bench``'s
SMTP section, which runs both pairs."""

from __future__ import annotations

import dataclasses

from bench.context import Context
from bench.report import Report
from bench.sections import run_smtp
from bench.smtp_e2e import measure_bare_smtp, measure_smtp
from tests.unit.test_bench_figures import OPTIONS

MESSAGES = 12
DELAY = 0.02  # seconds a round trip
# Each connection (two of them) sends six messages. The bare loop waits for MAIL, RCPT, DATA
# and the message's reply in turn: four round trips a message. Herald sends MAIL, RCPT and DATA
# together (the relay offers PIPELINING), then the message: at least two.
BARE_AT_LEAST = MESSAGES / 2 * 4 * DELAY
HERALD_AT_LEAST = MESSAGES / 2 * 2 * DELAY


def test_the_bare_loop_through_a_slow_relay_sends_everything_at_its_pace() -> None:
    result = measure_bare_smtp(MESSAGES, 2, reply_delay=DELAY)
    assert result.messages == MESSAGES
    assert result.seconds >= BARE_AT_LEAST


def test_herald_through_a_slow_relay_delivers_every_message(db_url: str) -> None:
    result = measure_smtp(db_url, MESSAGES, 2, reply_delay=DELAY)
    assert result.stored == MESSAGES
    assert result.report.sent == MESSAGES
    assert result.seconds >= HERALD_AT_LEAST


def test_the_smtp_section_measures_the_sink_pair_then_the_distant_relay_pair() -> None:
    """``make bench``'s SMTP section: the dev sink's pair carries the 0.8× target, the distant
    relay's pair only an information ratio (no target), each from its own figures."""
    options = dataclasses.replace(OPTIONS, smtp_messages=MESSAGES, smtp_relay_delay=DELAY)
    ctx = Context(options, Report(), postgres=False)

    run_smtp(ctx)

    assert [figure.section for figure in ctx.report.figures] == [
        "smtp/sqlite",
        "smtp/bare aiosmtplib",
        "smtp-relay/sqlite",
        "smtp-relay/bare aiosmtplib",
    ]
    assert all(len(figure.samples) == 1 for figure in ctx.report.figures)
    sink, relay = ctx.report.ratios
    assert sink.target is not None
    assert relay.target is None
    assert "relay 20 ms a round trip" in relay.label
    assert [target.what for target, _, _ in ctx.report.targets] == ["herald SMTP / bare SMTP"]
