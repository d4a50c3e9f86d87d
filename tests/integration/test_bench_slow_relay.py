"""``python -m bench.smtp_e2e --reply-delay``: Herald and the bare loop against a relay that
answers each command late (a relay across a network). Both runs must deliver every message, as
the relay counts them, and the delay must show in the time taken."""

from __future__ import annotations

from bench.smtp_e2e import measure_bare_smtp, measure_smtp

MESSAGES = 12
DELAY = 0.02  # seconds a reply
# Each connection (two of them) waits for at least MAIL, RCPT, DATA and the message's reply
# for each of its six messages: four delayed replies each.
AT_LEAST = MESSAGES / 2 * 4 * DELAY


def test_the_bare_loop_through_a_slow_relay_sends_everything_at_its_pace() -> None:
    result = measure_bare_smtp(MESSAGES, 2, reply_delay=DELAY)
    assert result.messages == MESSAGES
    assert result.seconds >= AT_LEAST


def test_herald_through_a_slow_relay_delivers_every_message(db_url: str) -> None:
    result = measure_smtp(db_url, MESSAGES, 2, reply_delay=DELAY)
    assert result.stored == MESSAGES
    assert result.report.sent == MESSAGES
    assert result.seconds >= AT_LEAST
