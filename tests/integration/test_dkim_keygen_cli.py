"""``herald dkim keygen``: a usable key, a record that publishes it, and no overwriting."""

from __future__ import annotations

import re
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dispatch.dkim_signing import ED25519, RSA, DkimSigner, DkimSigningKey
from dispatch.return_path import VerpReturnPath
from dispatch.signed_tokens import SigningKeys, read_address_token
from tests.support.dkim_dns import resolver, verifies
from tests.support.factories import invoke

MESSAGE = (
    b"From: a@example.com\r\nTo: b@example.org\r\nSubject: s\r\n"
    b"Date: Thu, 03 Dec 2026 04:05:06 +0000\r\n\r\nbody\r\n"
)


@pytest.mark.parametrize(("algorithm", "name"), [("rsa", RSA), ("ed25519", ED25519)])
def test_keygen_writes_a_private_key_and_prints_the_record_that_verifies_it(
    tmp_path: Path, algorithm: str, name: str
) -> None:
    out = tmp_path / "dkim.key"
    result = invoke(
        "dkim", "keygen", "--selector", "s1", "--domain", "Example.com",
        "--algorithm", algorithm, "--out", str(out),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    lines = result.stdout.splitlines()
    (record_line,) = [line for line in lines if " IN TXT " in line]
    assert record_line.startswith("s1._domainkey.example.com. IN TXT ( ")
    strings = re.findall(r'"([^"]*)"', record_line)
    assert all(len(s) <= 255 for s in strings)
    record = "".join(strings)
    assert record.startswith(f"v=DKIM1; k={algorithm}; p=")
    assert "HERALD_DKIM_DOMAIN=example.com" in result.stdout
    assert str(out) not in record
    # The file is a key the worker loads, and the printed record verifies what it signs.
    key = DkimSigningKey.load(
        selector="s1", domain="example.com", algorithm=name, data=out.read_bytes()
    )
    signed = DkimSigner([key]).sign(MESSAGE, datetime.now(UTC))
    assert verifies(signed, resolver({"s1._domainkey.example.com": record}))


def test_keygen_never_overwrites_a_key(tmp_path: Path) -> None:
    out = tmp_path / "dkim.key"
    out.write_text("the old key\n")
    result = invoke("dkim", "keygen", "--selector", "s", "--domain", "d.test", "--out", str(out))
    assert result.exit_code == 2
    assert "exists; not overwriting" in result.output
    assert out.read_text() == "the old key\n"


def test_keygen_refuses_a_selector_that_is_not_a_dns_label(tmp_path: Path) -> None:
    out = tmp_path / "dkim.key"
    args = ("dkim", "keygen", "--selector", "a b", "--domain", "d.test", "--out", str(out))
    result = invoke(*args, "--algorithm", "ed25519")
    assert result.exit_code == 2
    assert "selector" in result.output
    assert not out.exists()


def test_the_verp_sender_is_stable_and_decodes_to_the_key_prefix() -> None:
    keys = SigningKeys.parse("k2:a-current-secret-of-length,k1:an-older-secret-xxxxx")
    verp = VerpReturnPath(keys, "bounces.example.com")
    key = "0123456789abcdef" * 4
    sender = verp.sender_for(key, "news@example.com")
    assert sender == verp.sender_for(key, "news@example.com")
    local, _, domain = sender.partition("@")
    assert domain == "bounces.example.com"
    assert local == local.lower()
    assert len(local) <= 64
    assert read_address_token(keys, "bounce", local.removeprefix("bounce+")) == key[:16]
    # A token for bounces is not an unsubscribe token.
    with pytest.raises(ValueError, match="invalid token"):
        read_address_token(keys, "unsub", local.removeprefix("bounce+"))
    # A key Herald did not make (not hex) keeps the stored sender.
    assert verp.sender_for("not-a-hex-key", "news@example.com") == "news@example.com"
