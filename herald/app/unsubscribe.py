"""The unsubscribe links every composing command passes down to the scheduler package.

``validate``, ``launch``, ``plan``, ``enroll``, ``scheduler`` and ``run`` compose messages; each
reads the settings once (herald.mail_settings) and hands the scheduler a pure
``UnsubscribeLinks`` (the scheduler cannot import the shell). Every process that composes a
campaign's messages must see the same settings, or some of its messages would go out without
the headers: ``warning`` is what validate and launch print when a marketing campaign would.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from herald.mail_settings import MailSettings
from scheduler.unsubscribe_links import UnsubscribeLinks

if TYPE_CHECKING:
    from campaigns.spec import LoadedCampaign


def links_of(settings: MailSettings) -> UnsubscribeLinks | None:
    """The links, or None when the keys or the public URL are missing (then no header)."""
    if settings.signing_keys is None or settings.public_url is None:
        return None
    return UnsubscribeLinks(
        keys=settings.signing_keys,
        public_url=settings.public_url,
        mailto_domain=settings.unsubscribe_domain,
    )


def links_from_env(environ: Mapping[str, str] | None = None) -> UnsubscribeLinks | None:
    """Raises ConfigError for a malformed setting (it names the variable, never a secret)."""
    return links_of(MailSettings.from_env(environ))


def warning(loaded: LoadedCampaign, environ: Mapping[str, str] | None = None) -> str | None:
    """Why a marketing campaign's messages will carry no List-Unsubscribe, or None."""
    spec = loaded.spec
    if spec.transactional or all(step.channel != "email" for step in spec.steps):
        return None
    settings = MailSettings.from_env(environ)
    missing = [
        name
        for name, value in (
            ("HERALD_SIGNING_KEYS", settings.signing_keys),
            ("HERALD_PUBLIC_URL", settings.public_url),
        )
        if value is None
    ]
    if not missing:
        return None
    return (
        f"{spec.name}: its messages carry no List-Unsubscribe header ({' and '.join(missing)} "
        "not set); Gmail and Yahoo require one-click unsubscribe from bulk senders "
        "(`transactional: true` for receipts and the like)"
    )
