"""DKIM keys and the VERP return path, read from the settings once when a worker starts.

``dispatch`` signs and builds return paths but never reads files or the environment; this
module does both and turns every problem into a ``ConfigError`` that names the variable and the
file and describes what is wrong, never showing the key (no traceback, no bytes of it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from dispatch.return_path import VerpReturnPath
from herald.errors import ConfigError
from herald.mail_settings import DkimKey, MailSettings

if TYPE_CHECKING:
    from dispatch.dkim_signing import DkimSigner, DkimSigningKey

# dispatch.dkim_signing (dkimpy, cryptography: ~80 ms) is imported only where a key is read or
# made, so a worker without DKIM keys never loads it. Its algorithm names, as plain text here:
RSA = "rsa-sha256"


def key_file_variable(algorithm: str) -> str:
    return "HERALD_DKIM_KEY_FILE" if algorithm == RSA else "HERALD_DKIM_ED25519_KEY_FILE"


def load_key(setting: DkimKey) -> DkimSigningKey:
    from dispatch.dkim_signing import DkimKeyError, DkimSigningKey

    variable = key_file_variable(setting.algorithm)
    try:
        data = setting.key_file.read_bytes()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(
            f"{variable}: cannot read the DKIM key file {setting.key_file}: {reason}",
            hint="the worker needs read access to the private key (e.g. chmod 600, owned by it)",
        ) from None
    try:
        return DkimSigningKey.load(
            selector=setting.selector,
            domain=setting.domain,
            algorithm=setting.algorithm,
            data=data,
        )
    except DkimKeyError as exc:
        raise ConfigError(
            f"{variable}: the DKIM key in {setting.key_file} cannot be used: {exc}",
            hint="generate one with: herald dkim keygen --selector S --domain D --out FILE",
        ) from None


def load_signer(settings: MailSettings) -> DkimSigner | None:
    """Every configured key, parsed and tried once; None when DKIM is not configured."""
    if not settings.dkim:
        return None
    from dispatch.dkim_signing import DkimSigner

    return DkimSigner([load_key(setting) for setting in settings.dkim])


def load_return_path(settings: MailSettings) -> VerpReturnPath | None:
    if settings.bounce_domain is None:
        return None
    if settings.signing_keys is None:
        raise ConfigError(
            "HERALD_BOUNCE_DOMAIN needs HERALD_SIGNING_KEYS: the bounce address carries a"
            " signed token",
            hint="set HERALD_SIGNING_KEYS=k1:<a secret of 16+ characters>, or unset"
            " HERALD_BOUNCE_DOMAIN to use each campaign's From as the return path",
        )
    return VerpReturnPath(settings.signing_keys, settings.bounce_domain)


def write_private_key(path: Path, data: bytes) -> None:
    """Create ``path`` readable by its owner only; never overwrite (a lost key is a lost
    selector)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(data)


def generate_private_key(algorithm: str, bits: int = 2048) -> bytes:
    """A new private key in the form ``load_key`` reads: a PKCS#1 PEM for RSA (what OpenDKIM
    and dkimpy read too), the base64 of a 32-byte seed for Ed25519 (dkimpy's form)."""
    from base64 import b64encode

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    if algorithm != RSA:
        return b64encode(os.urandom(32)) + b"\n"
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
