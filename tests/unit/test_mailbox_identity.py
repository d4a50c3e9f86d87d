"""The mailbox identity (campaigns.addresses.mailbox_identity), proven over hostile spellings.

Every spelling of one mailbox -- quoted, escaped, any case, a Unicode domain in NFC, NFD or
full-width forms, as U-labels or A-labels -- has one identity; the identity is idempotent and is
itself a valid address; different mailboxes keep different identities.
"""

from __future__ import annotations

import unicodedata

import idna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from campaigns.addresses import DOT_ATOM, AddressError, mailbox_identity, normalise_address
from tests.support.examples import examples

ATEXT = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+/=?^_`{|}~-"
# Printable ASCII a quoted local part may hold (with '"' and '\\' escaped), and space.
QCONTENT = "".join(chr(c) for c in range(0x20, 0x7F))

# Labels whose case mapping round-trips (no 'ß' -> 'SS'), some with characters NFD decomposes.
LABELS = ["example", "bücher", "café", "mañana", "例え", "テスト", "δοκιμή", "yandex", "xyz"]
TLDS = ["example", "com", "org", "テスト", "δοκιμή"]

atoms = st.text(alphabet=ATEXT, min_size=1, max_size=8)
dot_atoms = st.lists(atoms, min_size=1, max_size=4).map(".".join).filter(lambda s: len(s) <= 40)
contents = st.text(alphabet=QCONTENT, min_size=1, max_size=30)


def _full_width(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


@st.composite
def domains(draw: st.DrawFn) -> tuple[str, str]:
    """(a hostile spelling, the plain lower-case Unicode spelling) of one domain."""
    labels = [draw(st.sampled_from(LABELS)) for _ in range(draw(st.integers(1, 2)))]
    labels.append(draw(st.sampled_from(TLDS)))
    spelled = []
    for label in labels:
        form = draw(st.sampled_from(["plain", "upper", "mixed", "nfd", "full", "alabel", "ALABEL"]))
        if form == "upper":
            label = label.upper()
        elif form == "mixed":
            flips = draw(st.lists(st.booleans(), min_size=len(label), max_size=len(label)))
            label = "".join(c.upper() if f else c for c, f in zip(label, flips, strict=True))
        elif form == "nfd":
            label = unicodedata.normalize("NFD", label)
        elif form == "full":
            label = _full_width(label)
        elif form in ("alabel", "ALABEL"):
            label = idna.encode(label, uts46=True).decode()
            label = label.upper() if form == "ALABEL" else label
        spelled.append(label)
    dot = draw(st.sampled_from([".", "。", "．"]))  # UTS #46 maps ideographic/full-width stops
    return dot.join(spelled), ".".join(labels)


@st.composite
def quoted(draw: st.DrawFn, content: str) -> str:
    """``content`` as a quoted string, escaping any character at random (and '"'/'\\' always)."""
    out = []
    for char in content:
        if char in '"\\' or draw(st.booleans()):
            out.append("\\" + char)
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


@st.composite
def recased(draw: st.DrawFn, text: str) -> str:
    flips = draw(st.lists(st.booleans(), min_size=len(text), max_size=len(text)))
    return "".join(c.swapcase() if f else c for c, f in zip(text, flips, strict=True))


@st.composite
def local_spellings(draw: st.DrawFn, local: str) -> str:
    """A spelling of ``local`` (dot-atom or quoted content): any case, quoted or not."""
    cased = draw(recased(local))
    if draw(st.booleans()) and DOT_ATOM.fullmatch(cased):
        return cased
    return draw(quoted(cased))


def _expected_local(local: str) -> str:
    lowered = local.lower()
    if DOT_ATOM.fullmatch(lowered):
        return lowered
    return '"' + lowered.replace("\\", "\\\\").replace('"', '\\"') + '"'


@settings(max_examples=examples(400), deadline=None)
@given(st.data(), st.one_of(dot_atoms, contents), domains())
def test_every_spelling_of_a_mailbox_has_one_identity(
    data: st.DataObject, local: str, domain: tuple[str, str]
) -> None:
    spelled_domain, plain_domain = domain
    ascii_domain = idna.encode(plain_domain, uts46=True).decode()
    expected = f"{_expected_local(local)}@{ascii_domain}"
    for _ in range(3):
        spelling = f"{data.draw(local_spellings(local))}@{spelled_domain}"
        identity = mailbox_identity(spelling)
        assert identity == expected, spelling
        assert mailbox_identity(identity) == identity  # idempotent
        assert normalise_address(identity) == identity  # a valid address in normal form
        assert mailbox_identity(f"  {spelling}\t") == identity


@settings(max_examples=examples(300), deadline=None)
@given(st.data(), dot_atoms)
def test_a_dot_atom_and_its_quoted_and_escaped_spellings_coincide(
    data: st.DataObject, local: str
) -> None:
    plain = mailbox_identity(f"{local}@y.example")
    assert plain == f"{local.lower()}@y.example"
    assert mailbox_identity(f'"{local}"@y.example') == plain
    assert mailbox_identity(f"{data.draw(quoted(local))}@Y.EXAMPLE") == plain
    assert mailbox_identity(f"{data.draw(recased(local))}@y.example") == plain


@settings(max_examples=examples(300), deadline=None)
@given(st.data(), contents, contents)
def test_different_mailboxes_keep_different_identities(
    data: st.DataObject, first: str, second: str
) -> None:
    a = mailbox_identity(f"{data.draw(quoted(first))}@x.example")
    b = mailbox_identity(f"{data.draw(quoted(second))}@x.example")
    assert (a == b) == (first.lower() == second.lower())
    assert mailbox_identity(f"{data.draw(quoted(first))}@other.example") != a


@settings(max_examples=examples(300), deadline=None)
@given(st.data(), st.one_of(dot_atoms, contents), st.sampled_from(["\r", "\n", "\x00"]))
def test_line_breaks_and_nul_in_any_spelling_are_rejected(
    data: st.DataObject, local: str, bad: str
) -> None:
    spelling = f"{data.draw(local_spellings(local))}@y.example"
    at = data.draw(st.integers(0, len(spelling)))
    with pytest.raises(AddressError):
        mailbox_identity(spelling[:at] + bad + spelling[at:])


@pytest.mark.parametrize(
    ("spelling", "identity"),
    [
        ("dup@y.example", "dup@y.example"),
        ('"dup"@y.example', "dup@y.example"),
        ('"d\\up"@y.example', "dup@y.example"),
        ("Blocked@EXAMPLE.com", "blocked@example.com"),
        ('"blocked"@example.com', "blocked@example.com"),
        ('"John\\ Doe"@Example.COM', '"john doe"@example.com'),
        ('"a\\"b"@x.example', '"a\\"b"@x.example'),
        ('"a\\\\b"@x.example', '"a\\\\b"@x.example'),
        ('"a..b"@x.example', '"a..b"@x.example'),
        ('".a"@x.example', '".a"@x.example'),
        ('"a@b"@x.example', '"a@b"@x.example'),
        ("user@BÜCHER.example", "user@xn--bcher-kva.example"),
        ("user@XN--BCHER-KVA.example", "user@xn--bcher-kva.example"),
        ("user@ｂｕｃｈｅｒ.example", "user@bucher.example"),
    ],
)
def test_identity_examples(spelling: str, identity: str) -> None:
    assert mailbox_identity(spelling) == identity


def test_the_normal_form_keeps_the_recipients_spelling() -> None:
    # The envelope and the To header use the normal form: the spelling as written.
    assert normalise_address('"D\\up"@Y.example') == '"D\\up"@y.example'
