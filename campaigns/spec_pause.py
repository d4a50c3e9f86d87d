"""``pause_on_errors:``: when a campaign stops itself because its sends keep failing.

    pause_on_errors: {ratio: 0.2, over: 100, min: 20}   # the default, also when omitted
    pause_on_errors: off                                # never pause automatically

The campaign pauses when, among its last ``over`` finished sends (sent or failed permanently,
counted since it was last resumed or changed), more than ``ratio`` failed and at least ``min``
did. ``min`` keeps a few early rejections from stopping a large send; ``over`` keeps a failure
long ago from counting for ever. The rule itself is ``campaigns.error_threshold``.
"""

from __future__ import annotations

from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, Field, Strict, model_validator

from campaigns.errors import excerpt
from campaigns.spec_fields import Invalid

PAUSE_HINT = "write e.g. pause_on_errors: {ratio: 0.2, over: 100, min: 20}, or pause_on_errors: off"


class PauseOnErrors(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # Failed / finished above this pauses (strictly above: 0.2 tolerates one in five).
    ratio: Annotated[float, Field(gt=0, lt=1)] = 0.2
    over: Annotated[int, Strict(), Field(ge=1, le=100_000)] = 100
    min: Annotated[int, Strict(), Field(ge=1, le=100_000)] = 20

    @model_validator(mode="after")
    def _min_within_over(self) -> Self:
        if self.min > self.over:
            raise Invalid(
                f"min ({self.min}) is larger than over ({self.over}): it could never be reached",
                "min counts failures among the last `over` sends",
            )
        return self


DEFAULT_PAUSE_ON_ERRORS = PauseOnErrors()


def pause_setting(value: Any) -> Any:
    """YAML's ``off``/``no``/``false`` (a boolean after parsing) or the string "off" disable
    the rule (None); ``on``/``true`` is the default; a mapping is validated by the model."""
    if value is False or (isinstance(value, str) and value.strip().lower() in ("off", "false")):
        return None
    if value is True or (isinstance(value, str) and value.strip().lower() in ("on", "true")):
        return DEFAULT_PAUSE_ON_ERRORS
    if value is None:
        raise Invalid("pause_on_errors needs a value", PAUSE_HINT)
    if isinstance(value, str):
        raise Invalid(f"pause_on_errors is a mapping or off, not {excerpt(value)}", PAUSE_HINT)
    return value
