"""What a bounce or a complaint says, in Herald's words: the shared vocabulary of the parsers.

A report (an RFC 3464 DSN, an RFC 5965 ARF complaint, a provider's webhook event) comes down to
one ``Verdict``:

- ``hard``: the ADDRESS is bad for good (RFC 3463 permanent address codes: 5.1.x other than the
  sender's own 5.1.7/5.1.8, 5.2.1 mailbox disabled, 5.4.4 unable to route). Suppressed
  globally: no campaign, transactional or not, can reach a mailbox that does not exist.
- ``soft``: the message failed but the address may be fine (4.x.x, a full mailbox, a message
  too big, a content refusal, a permanent code outside the address classes): counted, never
  suppressed by itself.
- ``policy``: the receiver refused the SENDER (5.7.x / 4.7.x security and policy codes, 5.1.7/
  5.1.8 bad sender address, authentication failures). Gmail uses 5.7.1 for spam, policy AND
  rate limits: suppressing the recipient would punish them for our reputation. Recorded as
  ``block``, never suppressed.
- ``delayed``: ``Action: delayed`` is a warning that the MTA is still trying, not a bounce.
- ``complaint``: the recipient marked the message as spam (ARF, provider events): global.
- ``unsubscribe``: a provider reports that the recipient unsubscribed.
- ``none``: a report that is not a failure (``delivered``, ``relayed``, ``not-spam``).
- ``unknown``: nothing we can read with confidence. The parsers return this for garbage and
  hostile input rather than raise.

Pure: no I/O. Every text taken from a report goes through ``clean`` (printable, bounded) before
it is kept, because it is written by whoever sent the report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Verdict = Literal[
    "hard", "soft", "policy", "delayed", "complaint", "unsubscribe", "none", "unknown"
]

# The RFC 3463 enhanced status code: class.subject.detail, each at most three digits.
STATUS_CODE = re.compile(r"(?<![\d.])([245])\.(\d{1,3})\.(\d{1,3})(?![\d.])")
BASIC_CODE = re.compile(r"(?<!\d)([245])(\d)(\d)(?!\d)")

# Permanent failures that say the recipient's ADDRESS is bad. 5.1.7 and 5.1.8 are the
# sender's address (our own configuration), and 5.1.5 is a success detail: neither suppresses.
HARD_CODES = frozenset({(1, 0), (1, 1), (1, 2), (1, 3), (1, 6), (1, 10), (2, 1), (4, 4)})
SENDER_ADDRESS_CODES = frozenset({(1, 7), (1, 8)})

# Text of a bounce that carries only a basic reply code ("550 no such user"): these phrases
# decide hard, anything else stays soft. Kept short on purpose: a loose phrase here would
# suppress a real mailbox.
_HARD_TEXT = re.compile(
    r"user unknown|unknown user|no such (?:user|mailbox|recipient)|mailbox (?:not found|"
    r"unavailable|does not exist)|does not exist|account (?:has been )?disabled|"
    r"recipient address rejected: user",
    re.IGNORECASE,
)

MAX_DETAIL = 500
_UNPRINTABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ufeff]")


@dataclass(frozen=True)
class Report:
    """One parsed report. ``recipient`` is what the report claims: informational only, never
    used to decide whom to suppress (the VERP token or the signed event decides that)."""

    verdict: Verdict
    status: str | None = None  # enhanced status code, e.g. "5.1.1"
    detail: str = ""
    recipient: str | None = None
    report_id: str | None = None  # the report's own Message-ID (deduplication)
    herald_key: str | None = None  # an X-Herald-Key found in the returned original
    form: Literal["dsn", "arf", "text", "none"] = "none"  # what kind of report it was


def clean(text: object, limit: int = MAX_DETAIL) -> str:
    """Printable, single-line, bounded text from a report (which anyone could have written)."""
    value = _UNPRINTABLE.sub(" ", str(text))
    value = " ".join(value.split())
    return value if len(value) <= limit else value[: limit - 1] + "…"


def find_status(text: str) -> str | None:
    """The first enhanced status code in ``text`` ("5.1.1"), or None."""
    match = STATUS_CODE.search(text)
    return ".".join(match.groups()) if match else None


def classify_status(status: str) -> Verdict:
    """The verdict of a FAILED delivery with this enhanced status code."""
    match = STATUS_CODE.fullmatch(status.strip())
    if match is None:
        return "unknown"
    klass, subject, detail = (int(g) for g in match.groups())
    if klass == 2:
        return "none"
    if subject == 7 or (subject, detail) in SENDER_ADDRESS_CODES:
        return "policy"
    if klass == 4:
        return "soft"
    return "hard" if (subject, detail) in HARD_CODES else "soft"


def classify_text(text: str) -> tuple[Verdict, str | None]:
    """A failure described only in words: enhanced code first, then the basic reply code."""
    if status := find_status(text):
        return classify_status(status), status
    basic = BASIC_CODE.search(text)
    if basic is None:
        return "unknown", None
    if basic.group(1) == "4":
        return "soft", None
    if basic.group(1) == "5":
        return ("hard" if _HARD_TEXT.search(text) else "soft"), None
    return "none", None


# Stronger verdicts win when one report carries several (a DSN with several recipient blocks).
_RANK: dict[Verdict, int] = {
    "unknown": 0,
    "none": 1,
    "delayed": 2,
    "soft": 3,
    "policy": 4,
    "hard": 5,
    "unsubscribe": 6,
    "complaint": 7,
}


def strongest(a: Report, b: Report) -> Report:
    return b if _RANK[b.verdict] > _RANK[a.verdict] else a
