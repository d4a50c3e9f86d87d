"""Hostile audience cells for the pools' property tests (tests/integration/test_occurrence_pool.py,
test_drip_pool.py): a person is (name, city, zone), and their campaigns' first step fails to
render for the city "Boom"."""

from __future__ import annotations

from hypothesis import strategies as st

ZONES = ["", "Europe/Paris", "America/New_York", "Asia/Kolkata", "UTC"]
ZONE = st.sampled_from(ZONES)
# Text a CSV cell may carry: quotes, separators, line breaks, markup, template syntax,
# non-ASCII; now and then a control character (its row is unusable if it is in the name).
SAFE = st.sampled_from(list("ab Z,;\"'<>&{}%#|\\é密😀"))
TEXT = st.text(SAFE | st.characters(exclude_categories=["Cs", "Cc"]), max_size=12)
HOSTILE = st.text(SAFE | st.characters(exclude_categories=["Cs"]), max_size=12)
PERSON = st.tuples(TEXT, TEXT, ZONE)
# Now and then one person whose row may be unusable or whose message may not render.
TROUBLE = st.none() | st.none() | st.tuples(HOSTILE, HOSTILE | st.just("Boom"), ZONE)
