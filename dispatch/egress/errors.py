"""What the egress guard raises: a policy denial, or a failure of a request that was allowed."""

from __future__ import annotations

from dispatch.egress.redact import redact_url


class EgressDenied(Exception):
    """The policy refused the request; ``rule`` names the rule that fired.

    ``location`` is set when the refused step was a redirect, so the operator sees where the
    server tried to send us (``rule`` stays the bare rule name).
    """

    def __init__(
        self, *, url: str, rule: str, address: str | None = None, location: str | None = None
    ) -> None:
        self.url = url
        self.rule = rule
        self.address = address
        self.location = location
        # Messages show URLs redacted: they reach outcome texts, logs and the terminal.
        shown = redact_url(url)
        target = shown if address is None else f"{shown} -> {address}"
        message = f"egress denied: {target}: {rule}"
        if location is not None:
            message += f" (Location: {redact_url(location)[:300]})"
        super().__init__(message)


class EgressError(Exception):
    """The request was allowed but failed: transport error, timeout or cap exceeded."""

    def __init__(self, *, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"egress failed: {redact_url(url)}: {reason}")


class EgressTimeout(EgressError):
    """The total deadline (or the DNS deadline) passed."""


class EgressTooLarge(EgressError):
    """The body (declared, raw or decoded) is larger than the policy's byte cap."""


def deadline_passed(url: str, total_timeout: float) -> EgressTimeout:
    return EgressTimeout(url=url, reason=f"total deadline of {total_timeout}s passed")
