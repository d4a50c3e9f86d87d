"""dispatch.smtp_plain: an address sent as it is must be exactly what aiosmtplib's quoting would
have sent, and everything else must still go through aiosmtplib."""

from __future__ import annotations

from aiosmtplib.email import quote_address
from hypothesis import given
from hypothesis import strategies as st

from dispatch.smtp_plain import is_plain

_ATOM = st.text(alphabet="aZ09_+-", min_size=1, max_size=5)
_LABEL = st.text(alphabet="aZ09-", min_size=1, max_size=5)
_PLAINISH = st.builds(
    lambda local, labels: ".".join(local) + "@" + ".".join(labels),
    st.lists(_ATOM, min_size=1, max_size=3),
    st.lists(_LABEL, min_size=1, max_size=3),
)


@given(st.one_of(_PLAINISH, st.text(alphabet='aZ09_+-.@ <>"(),;:\\é\t\r\n', max_size=16)))
def test_a_plain_address_is_sent_exactly_as_aiosmtplib_would_quote_it(address: str) -> None:
    if is_plain(address):
        assert quote_address(address) == f"<{address}>"


def test_anything_a_parser_would_change_or_refuse_is_not_plain() -> None:
    for address in [
        "Ann <ann@example.com>",
        "ann@example.com.",
        '"a b"@example.com',
        "ann@example.com>\r\nRCPT TO:<x@y>",
        "ann @example.com",
        "ännä@example.com",
        "ann(comment)@example.com",
        "ann@[127.0.0.1]",
        "",
    ]:
        assert not is_plain(address), address
    assert is_plain("first.last+tag@mail.example-1.com")
