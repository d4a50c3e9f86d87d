"""Hypothesis strategies for new jobs that the outbox must store exactly: text PostgreSQL can
hold, but hostile to COPY and SQL, and few keys and mailboxes, so batches repeat them (either
UNIQUE index of send_key makes a repeated row a no-op)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import strategies as st

from dispatch.outbox import NewJob

AT = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)

# Text PostgreSQL can store (no NUL, no lone surrogate), quotes, backslashes, tabs, newlines,
# COPY's own delimiters and escapes, and other scripts.
hostile = st.text(
    st.characters(codec="utf-8", blacklist_characters="\x00"),
    min_size=1,
    max_size=40,
) | st.sampled_from(["a@x.test", "A@X.test", "\\N", "\t", "'; DROP TABLE send_job; --", "é@ü.test"])


@st.composite
def new_jobs(draw: st.DrawFn) -> NewJob:
    key = draw(st.sampled_from(["k0", "k1", "k2", "k3", "k4"]))
    return NewJob(
        key=key,
        key_tuple=draw(hostile),
        campaign="c",
        step="s",
        occurrence_at=AT,
        channel="email",
        sender="from@x.test",
        recipient=draw(st.sampled_from(["a@x.test", "A@X.test"]) | hostile),
        message_id=draw(hostile),
        payload=draw(st.binary(max_size=64)),
        not_before=AT + timedelta(microseconds=draw(st.integers(0, 10**12))),
        max_send_attempts=draw(st.integers(1, 9)),
        max_claims=draw(st.integers(1, 9)),
        in_doubt_policy=draw(st.sampled_from(["hold", "resend"])),
        mailbox=draw(st.sampled_from(["m0", "m1", "m2", "m3", "m4", "m5"])),
        send_window=draw(st.none() | hostile),
        list_scope=draw(st.none() | hostile),
    )
