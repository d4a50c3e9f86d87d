"""The one-click unsubscribe link of a message, and the headers that carry it (RFC 2369, 8058).

The scheduler composes every message, but it may not import the application shell, where the
settings are read (herald.mail_settings): the shell builds an ``UnsubscribeLinks`` from them and
passes it down into check, fan-out and scheduler passes. Pure: no I/O, no clock, so a message
composed twice (validate, then launch; or a fan-out resumed after a crash) gets the same bytes.

What a message gets (scheduler.compose):

- a marketing campaign (``transactional: false``) with links configured: ``List-Unsubscribe``
  (the https URL, then the mailto when an unsubscribe domain is set) and
  ``List-Unsubscribe-Post: List-Unsubscribe=One-Click``, and ``{{ unsubscribe_url }}``;
- a transactional campaign, or no links configured: neither header, and ``unsubscribe_url``
  is whatever the audience gives (a column of that name), else a template that uses it fails
  ``validate`` with a message saying why (never a link that does not work).
"""

from __future__ import annotations

from dataclasses import dataclass

from jinja2 import StrictUndefined

from dispatch.signed_tokens import SigningKeys, address_token, unsubscribe_token

UNSUBSCRIBE_URL = "unsubscribe_url"  # the template variable
LIST_UNSUBSCRIBE = "List-Unsubscribe"
LIST_UNSUBSCRIBE_POST = "List-Unsubscribe-Post"
ONE_CLICK = "List-Unsubscribe=One-Click"  # RFC 8058 §3.1: the single key/value pair
MAILTO_SUBJECT = "unsubscribe"

NOT_CONFIGURED = (
    "{{ unsubscribe_url }} has no value: set HERALD_SIGNING_KEYS and HERALD_PUBLIC_URL "
    "(where `herald serve` is reached) for the launch, validate and scheduler processes"
)
TRANSACTIONAL = (
    "{{ unsubscribe_url }} has no value: a transactional campaign carries no unsubscribe link "
    "(unsubscribing from a receipt would stop every mail; drop `transactional: true`)"
)


@dataclass(frozen=True)
class UnsubscribeLinks:
    """Where unsubscribe links point and the keys that sign their tokens.

    ``public_url``: the base URL ``herald serve`` is reached at (no trailing slash), https
    (herald.mail_settings refuses anything else but a loopback http URL).
    ``mailto_domain``: the domain of ``unsub+<token>@<domain>``, handled by the inbound SMTP
    listener; None: https only.
    """

    keys: SigningKeys
    public_url: str
    mailto_domain: str | None = None

    def url(self, *, mailbox: str, scope: str, campaign: str) -> str:
        """The one-click URL: ``<public_url>/u/<token>``; the token carries the mailbox
        identity, the suppression scope and the campaign, signed (dispatch.signed_tokens)."""
        token = unsubscribe_token(self.keys, mailbox=mailbox, scope=scope, campaign=campaign)
        return f"{self.public_url}/u/{token}"

    def mailto(self, job_key: str) -> str | None:
        """``mailto:unsub+<t>@<domain>?subject=unsubscribe``: the token is in the local part
        (Apple Mail sends an empty subject) and names the job by a prefix of its key."""
        if self.mailto_domain is None:
            return None
        token = address_token(self.keys, "unsub", job_key)
        return f"mailto:unsub+{token}@{self.mailto_domain}?subject={MAILTO_SUBJECT}"

    def headers(self, url: str, job_key: str) -> dict[str, str]:
        """The two header fields, https first (RFC 2369: clients take the leftmost they
        support; RFC 8058: exactly one https URI)."""
        uris = [f"<{url}>"]
        mailto = self.mailto(job_key)
        if mailto is not None:
            uris.append(f"<{mailto}>")
        return {LIST_UNSUBSCRIBE: ", ".join(uris), LIST_UNSUBSCRIBE_POST: ONE_CLICK}


def missing_url(why: str) -> StrictUndefined:
    """The value of ``unsubscribe_url`` when there is none: rendering it (or testing it for
    truth) fails the render with ``why``; ``{% if unsubscribe_url is defined %}`` is False."""
    return StrictUndefined(hint=why, name=UNSUBSCRIBE_URL)
