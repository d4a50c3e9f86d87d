"""The dashboard's login secrets and the key its cookies are signed with.

``HERALD_DASHBOARD_PASSWORD`` (typed into the login form) and ``HERALD_DASHBOARD_TOKEN`` (the
form too, or ``Authorization: Bearer`` for scripts). Neither set: the dashboard is off.

The session key is derived, not random: HMAC-SHA256 keyed with the first secret of
``HERALD_SIGNING_KEYS`` over the dashboard secrets. So a session survives a restart of
``herald serve`` and is valid on every replica behind one proxy, and changing the password,
the token or the signing key ends every session at once (the way to log everybody out).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from dispatch.signed_tokens import SigningKeys
from herald.secrets import known_secrets

PASSWORD_VARIABLE = "HERALD_DASHBOARD_PASSWORD"
TOKEN_VARIABLE = "HERALD_DASHBOARD_TOKEN"
SESSION_HOURS = 12.0


@dataclass(frozen=True)
class DashboardSettings:
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    session_key: bytes = field(default=b"", repr=False)
    public_url: str | None = None  # HERALD_PUBLIC_URL: its host is an accepted Origin too
    session_hours: float = SESSION_HOURS

    @property
    def enabled(self) -> bool:
        return bool(self.password or self.token)

    @classmethod
    def from_env(
        cls,
        signing_keys: SigningKeys | None,
        *,
        public_url: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> DashboardSettings:
        env = os.environ if environ is None else environ
        password = env.get(PASSWORD_VARIABLE, "").strip() or None
        token = env.get(TOKEN_VARIABLE, "").strip() or None
        known_secrets.learn([s for s in (password, token) if s])
        return cls.derived(password, token, signing_keys, public_url=public_url)

    @classmethod
    def derived(
        cls,
        password: str | None,
        token: str | None,
        signing_keys: SigningKeys | None,
        *,
        public_url: str | None = None,
    ) -> DashboardSettings:
        """Settings whose session key comes from the secrets (see the module docstring)."""
        root = b"" if signing_keys is None else signing_keys.secrets[signing_keys.current]
        material = b"\0".join(
            [b"herald-dashboard-session-v1", (password or "").encode(), (token or "").encode()]
        )
        key = hmac.new(root, material, hashlib.sha256).digest()
        return cls(password, token, key, public_url)
