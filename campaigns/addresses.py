"""Email addresses and mailboxes: validation, the normal form and the mailbox identity.

Two forms of a valid address, for two jobs:

- The *normal form* (``normalise_address``) is what Herald sends to: the recipient's own
  spelling of the local part, kept exactly as written (it goes into RCPT TO and the To header),
  with the domain lower-cased and IDNA-encoded (UTS #46) to its ASCII form.
- The *mailbox identity* (``mailbox_identity``) says which mailbox that is, so that one mailbox
  gets one job whatever the spelling. It is the normal form with a canonical local part: a
  quoted local part is unquoted (its backslash escapes removed) when what it holds is a valid
  dot-atom, otherwise it stays quoted with the fewest escapes (only '"' and '\\' escaped); and
  the local part is lower-cased, as every large mailbox provider compares it. So
  ``Dup@Y.example``, ``"dup"@y.example`` and ``"d\\up"@y.example`` are one mailbox,
  ``dup@y.example``; ``"john doe"@example.com`` and ``"John\\ Doe"@EXAMPLE.com`` are
  ``"john doe"@example.com``; ``user@Bücher.example`` and ``user@xn--bcher-kva.example`` are one
  mailbox. The idempotency key, de-duplication within an audience and suppression all use the
  identity. (Provider-specific rules such as ignored dots or ``+tags`` are not applied: they
  would merge mailboxes that other providers keep apart.)

Decisions (stricter than RFC 5322 where laxness only causes delivery or security trouble):
- The local part must be an ASCII dot-atom or a quoted string. Non-ASCII local parts need
  SMTPUTF8, which Herald does not negotiate, so they are rejected rather than failing at send
  time.
- The domain needs at least one dot; 'localhost', address literals ('[192.0.2.1]'), a trailing
  dot and an all-numeric top-level label are rejected: none is a deliverable marketing address.
- CR, LF and NUL are rejected anywhere, even where stripping would hide them: they are how header
  injection starts.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import idna

MAX_ADDRESS_LENGTH = 254  # RFC 5321 path limit (256) minus the angle brackets
MAX_LOCAL_LENGTH = 64
MAX_DOMAIN_LENGTH = 253
MAX_LABEL_LENGTH = 63

# RFC 5322 atext: letters, digits and these printable symbols.
_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
DOT_ATOM = re.compile(rf"{_ATOM}(?:\.{_ATOM})*")
# Characters a quoted local part may hold without a backslash: printable ASCII except '"' and
# '\', plus space and tab.
_QTEXT = re.compile(r"[ \t\x21\x23-\x5b\x5d-\x7e]")
_LINE_BREAKS = ("\r", "\n")


class AddressError(ValueError):
    """An address or mailbox is not acceptable; str() is the reason, e.g. 'domain is empty'."""


def _reject_injection(raw: str, what: str) -> None:
    if any(char in raw for char in _LINE_BREAKS):
        raise AddressError(f"header injection: line break in {what}")
    if "\x00" in raw:
        raise AddressError(f"NUL character in {what}")


def _split_quoted_local(address: str) -> tuple[str, str]:
    """Split '"quoted local"@domain' after the closing quote; '@' inside the quotes is data."""
    index = 1
    while index < len(address):
        char = address[index]
        if char == "\\":
            if index + 1 >= len(address):
                break
            escaped = address[index + 1]
            if not ("\x20" <= escaped <= "\x7e" or escaped == "\t"):
                raise AddressError(f"invalid escaped character {escaped!r} in quoted local part")
            index += 2
            continue
        if char == '"':
            local, rest = address[: index + 1], address[index + 1 :]
            if not rest.startswith("@"):
                raise AddressError("quoted local part must be followed by '@'")
            return local, rest[1:]
        if not _QTEXT.fullmatch(char):
            raise AddressError(f"invalid character {char!r} in quoted local part")
        index += 1
    raise AddressError("unterminated quoted local part")


def _split_address(address: str) -> tuple[str, str]:
    if address.startswith('"'):
        local, domain = _split_quoted_local(address)
        if "@" in domain:
            raise AddressError("more than one '@'")
        return local, domain
    at_count = address.count("@")
    if at_count == 0:
        raise AddressError("missing '@'")
    if at_count > 1:
        raise AddressError("more than one '@'")
    local, domain = address.split("@")
    return local, domain


def _check_local(local: str) -> None:
    if not local or local == '""':
        raise AddressError("local part is empty")
    if not local.isascii():
        raise AddressError("non-ASCII local part (needs SMTPUTF8, which Herald does not use)")
    if len(local) > MAX_LOCAL_LENGTH:
        raise AddressError(f"local part is longer than {MAX_LOCAL_LENGTH} characters")
    if local.startswith('"'):
        return  # validated character by character while splitting
    if any(char.isspace() for char in local):
        raise AddressError("space in local part (quote the local part if it is really meant)")
    if local.startswith(".") or local.endswith(".") or ".." in local:
        raise AddressError("local part has an empty dot-separated part")
    if not DOT_ATOM.fullmatch(local):
        bad = [char for char in local if char != "." and not DOT_ATOM.fullmatch(char)]
        raise AddressError(f"invalid character {bad[0]!r} in local part")


# A plain ASCII host-name label: IDNA processing would only lower-case it. Labels with '--' in
# positions 3-4 (A-labels such as xn--bcher-kva) still go through the idna package's checks.
_PLAIN_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")


def _is_plain_ascii(domain: str) -> bool:
    return all(_PLAIN_LABEL.fullmatch(label) and label[2:4] != "--" for label in domain.split("."))


# Audiences repeat a few domains (gmail.com, ...) many times; the idna package is pure Python.
@functools.lru_cache(maxsize=4096)
def _normalise_domain(domain: str) -> str:
    if not domain:
        raise AddressError("domain is empty")
    if domain.startswith("["):
        raise AddressError("address literals such as [192.0.2.1] are not supported")
    if domain.endswith("."):
        raise AddressError("domain ends with a dot")
    if any(char.isspace() for char in domain):
        raise AddressError("space in domain")
    lowered = domain.lower()
    if _is_plain_ascii(lowered):
        ascii_domain = lowered
    else:
        try:
            ascii_domain = idna.encode(lowered, uts46=True).decode("ascii")
        except idna.IDNAError as error:
            raise AddressError(f"invalid domain: {error}") from None
    # UTS #46 maps some characters (e.g. ideographic full stops) to dots, so check the result.
    labels = ascii_domain.split(".")
    if len(labels) < 2:
        raise AddressError("domain has no dot")
    if any(not label for label in labels):
        raise AddressError("domain has an empty label")
    if len(ascii_domain) > MAX_DOMAIN_LENGTH:
        raise AddressError(f"domain is longer than {MAX_DOMAIN_LENGTH} characters")
    if any(len(label) > MAX_LABEL_LENGTH for label in labels):
        raise AddressError(f"domain label longer than {MAX_LABEL_LENGTH} characters")
    if labels[-1].isdigit():
        raise AddressError("domain looks like an IP address; use a host name")
    return ascii_domain


def normalise_address(raw: str) -> str:
    """Return the normal form of an address, or raise AddressError with the reason."""
    _reject_injection(raw, "address")
    address = raw.strip()
    if not address:
        raise AddressError("address is empty")
    local, domain = _split_address(address)
    _check_local(local)
    normalised = f"{local}@{_normalise_domain(domain)}"
    if len(normalised) > MAX_ADDRESS_LENGTH:
        raise AddressError(f"address is longer than {MAX_ADDRESS_LENGTH} characters")
    return normalised


def _unquote_local(quoted: str) -> str:
    """The characters a quoted local part ('"a\\"b"') stands for ('a"b'); already validated."""
    chars: list[str] = []
    index = 1
    while index < len(quoted) - 1:
        if quoted[index] == "\\":
            index += 1
        chars.append(quoted[index])
        index += 1
    return "".join(chars)


def _canonical_local(local: str) -> str:
    if local.startswith('"'):
        content = _unquote_local(local)
        if DOT_ATOM.fullmatch(content):
            local = content
        else:
            local = '"' + content.replace("\\", "\\\\").replace('"', '\\"') + '"'
    # ASCII only (checked), so lower() is the plain A-Z mapping.
    return local.lower()


def mailbox_identity(raw: str) -> str:
    """The one identity of the mailbox an address names (see the module docstring).

    Accepts any valid spelling (raw or normalised) and raises AddressError like
    normalise_address. Idempotent: the identity of an identity is itself.
    """
    local, domain = normalise_address(raw).rsplit("@", 1)
    return f"{_canonical_local(local)}@{domain}"


@dataclass(frozen=True)
class Mailbox:
    """An address with an optional display name, e.g. the From of a campaign."""

    address: str  # normalised
    name: str | None

    def domain(self) -> str:
        return self.address.rsplit("@", 1)[1]


def _check_display_name(name: str) -> None:
    _reject_injection(name, "display name")
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in name if char != "\t"):
        raise AddressError("control character in display name")


def make_mailbox(address: str, name: str | None = None) -> Mailbox:
    """Build a Mailbox from separate parts (the mapping form {address, name} of a spec)."""
    _reject_injection(address, "address")
    if name is not None:
        _check_display_name(name)
        name = name.strip() or None
    return Mailbox(address=normalise_address(address), name=name)


def _unquote_display_name(quoted: str) -> tuple[str, str]:
    """Split '"Quoted, Name" rest' into the unescaped name and the rest."""
    chars: list[str] = []
    index = 1
    while index < len(quoted):
        char = quoted[index]
        if char == "\\" and index + 1 < len(quoted):
            chars.append(quoted[index + 1])
            index += 2
            continue
        if char == '"':
            return "".join(chars), quoted[index + 1 :]
        chars.append(char)
        index += 1
    raise AddressError("unterminated quoted display name")


def split_display_name(raw: str) -> tuple[str | None, str]:
    """Split 'Name <addr>', '"Quoted, Name" <addr>', '<addr>' or 'addr' into (name, addr).

    Nothing is validated beyond the mailbox syntax: the address comes back as written.
    """
    _reject_injection(raw, "mailbox")
    text = raw.strip()
    if not text.endswith(">"):
        if "<" in text:
            raise AddressError("'<' without a closing '>'")
        return None, text
    if text.startswith('"'):
        name, rest = _unquote_display_name(text)
        rest = rest.strip()
        if not rest.startswith("<"):
            raise AddressError("expected '<address>' after the quoted display name")
        return name, rest[1:-1]
    opening = text.rfind("<")
    if opening == -1:
        raise AddressError("'>' without an opening '<'")
    name, address = text[:opening].strip(), text[opening + 1 : -1]
    if any(char in name for char in '<>"'):
        raise AddressError("display name contains '<', '>' or '\"'; quote the whole name")
    return (name or None), address


def parse_mailbox(raw: str) -> Mailbox:
    """Parse 'a@b.c', 'Display Name <a@b.c>' or '"Quoted, Name" <a@b.c>'."""
    name, address = split_display_name(raw)
    return make_mailbox(address, name)
