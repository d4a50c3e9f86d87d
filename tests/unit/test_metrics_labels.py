"""Hostile names as metric labels: whatever a campaign or a relay is called (quotes, backslashes,
newlines, braces, any script), the exposition stays well-formed and the name reads back exactly
— a name must never break the scrape for every other series."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from herald.metrics_outbox import STATES, OutboxReading, outbox_families
from tests.support.metrics_scrape import parse

NOW = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)
names = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=40)


class Fixed(Collector):
    def __init__(self, reading: OutboxReading) -> None:
        self.reading = reading

    def collect(self) -> Iterable[Metric]:
        return outbox_families(self.reading, NOW)


@given(
    jobs=st.dictionaries(
        st.tuples(names, st.sampled_from(STATES)), st.integers(0, 10**9), max_size=8
    ),
    relays=st.dictionaries(names, st.booleans(), max_size=3),
)
def test_any_campaign_or_relay_name_reads_back_from_the_exposition(
    jobs: dict[tuple[str, str], int], relays: dict[str, bool]
) -> None:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(Fixed(OutboxReading(jobs, None, relays, NOW)))
    got = parse(generate_latest(registry).decode())
    for (campaign, state), n in jobs.items():
        assert got.value("herald_jobs", campaign=campaign, state=state) == n
    campaigns = {campaign for campaign, _ in jobs}
    assert len(got.values("herald_jobs")) == len(campaigns) * len(STATES)
    for relay, up in relays.items():
        assert got.value("herald_relay_reachable", relay=relay) == (1 if up else 0)
    in_doubt = sum(n for (_, state), n in jobs.items() if state == "in_doubt")
    assert got.value("herald_jobs_in_doubt") == in_doubt
