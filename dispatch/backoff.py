"""Retry delays: exponential with full jitter, capped; the randomness is a parameter."""

from __future__ import annotations

import random
from collections.abc import Callable

BASE_DELAY = 30.0  # seconds
MAX_DELAY = 3600.0  # seconds


def retry_delay(
    attempt: int,
    *,
    retry_after: float | None = None,
    base: float = BASE_DELAY,
    cap: float = MAX_DELAY,
    rand: Callable[[], float] = random.random,
) -> float:
    """Delay before attempt ``attempt + 1``; never less than what the receiver asked for.

    Half the exponential delay is fixed and half is jitter, so retries of a batch that failed
    together spread out without ever retrying immediately.
    """
    exponential = min(cap, base * 2.0 ** max(0, attempt - 1))
    delay = exponential / 2 + rand() * exponential / 2
    if retry_after is not None:
        delay = max(delay, min(retry_after, cap))
    return float(delay)
