"""The campaign's ``rate:`` field: how fast its messages may go out, shared by every worker.

    rate: 50/s          # or 300/m, 1000/h

Stored per campaign in the ``rate_limit`` table at launch (``campaigns.control.register``);
the workers take slots from it (``dispatch.rate_gate``). Without it the campaign is limited only
by its recipients' domains.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, PlainSerializer

from campaigns.spec_fields import Invalid
from dispatch.rates import Rate, RateError, parse_rate


def _parse(value: object) -> Rate:
    if isinstance(value, Rate):
        return value
    try:
        return parse_rate(value)
    except RateError as exc:
        raise Invalid(str(exc), exc.hint) from None


RateField = Annotated[
    Rate,
    BeforeValidator(_parse),
    PlainSerializer(str, return_type=str, when_used="json"),
]
