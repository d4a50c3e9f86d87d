"""Hostile secrets and the check that one leaked: for tests proving credentials never leave
through an error message (URL-special characters, percent-encoding, controls, quotes, markup,
non-ASCII). Also hostile message text for SMTP DATA (``MESSAGE_TEXT``)."""

from __future__ import annotations

from urllib.parse import quote, quote_plus

from hypothesis import strategies as st

# Markers at both ends: a secret is never a coincidental substring of the rest of a message,
# and a leaked *piece* of one (its start) is still caught by looking for the first marker.
START, END = "ZqX", "QjZ"
_PIECE = st.one_of(
    st.characters(exclude_categories=["Cs"]),
    st.sampled_from(list(":/?#[]@!$&'()*+,;=% \r\n\x00\"\\<>{}`^|~")),
    st.sampled_from(["%40", "%2F", "%25", "=?utf-8?q?x?=", "[/]", "[red]", "é", "密"]),
)
HOSTILE = st.lists(_PIECE, min_size=1, max_size=16).map(lambda p: f"{START}{''.join(p)}{END}")


def leaks(text: str, secret: str) -> bool:
    forms = {secret, quote(secret, safe=""), quote(secret), quote_plus(secret)}
    return START in text or any(form in text for form in forms)


# Message bytes drawn mostly from the ones SMTP's dot-stuffing is about (dots, lone CR and LF,
# the end-of-data marker itself), so dot lines come up in every run.
MESSAGE_TEXT = st.lists(
    st.sampled_from(
        [b".", b"..", b"\r", b"\n", b"\r\n", b"\r\n.\r\n", b"a", b" ", b"\x00", b"\xff"]
    )
    | st.binary(max_size=8),
    max_size=40,
).map(b"".join)
