"""Hostile secrets and the check that one leaked: for tests proving credentials never leave
through an error message (URL-special characters, percent-encoding, controls, quotes, markup,
non-ASCII)."""

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
