"""Compatibility alias: redaction now lives in the egress guard, ``dispatch.egress.redact``.

Kept only so code written before the move (other branches of issue 8) still imports; import
``dispatch.egress.redact`` in new code. Remove once nothing imports this module.
"""

from __future__ import annotations

from dispatch.egress.redact import (
    MASK,
    MIN_SECRET_LENGTH,
    Redactor,
    redact_setting,
    redact_url,
    smtp_auth_forms,
    url_secrets,
)

__all__ = [
    "MASK",
    "MIN_SECRET_LENGTH",
    "Redactor",
    "redact_setting",
    "redact_url",
    "smtp_auth_forms",
    "url_secrets",
]
