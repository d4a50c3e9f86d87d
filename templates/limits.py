"""Bounds on what one render may cost: time, steps, and the size of every value it builds.

A template is code, and Jinja evaluates constant expressions while *compiling* it, so
``{{ '%0999999999d' % 1 }}`` once allocated a gigabyte before anything was rendered, and nested
``range`` loops hung ``validate``. The bounds are enforced where values grow, not by inspecting
templates: every operator that can grow a value (``%``, ``*``, ``**``, ``+``, ``~``), every
filter and global that takes a width or count, every loop iteration and every call is checked
against a per-render Budget (the sandbox in templates/sandbox.py routes them here). Intercepted
operators and context-taking filters are never folded at compile time, so nothing runs before a
budget exists.

The budget of the render in progress lives in a ContextVar: templates cannot reach it, and
renders in other threads or tasks have their own.
"""

from __future__ import annotations

import re
import string
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RenderLimits:
    """Per-render bounds. Generous for any real email; the clock is injectable for tests."""

    max_output_chars: int = 2_000_000  # one rendered part (subject, text, html, a JSON leaf)
    max_string_chars: int = 2_000_000  # any string, list weight or width built on the way
    max_items: int = 100_000  # items of a list or range
    max_int_bits: int = 8_192  # integers (``10 ** 10 ** 10`` would take forever)
    max_steps: int = 500_000  # loop iterations, calls and operators, all together
    time_budget_seconds: float = 2.0
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)


class RenderLimitError(Exception):
    """A render went over one of its RenderLimits; the message says which."""


class Budget:
    """What one render has spent so far."""

    def __init__(self, limits: RenderLimits) -> None:
        self.limits = limits
        self.deadline = limits.clock() + limits.time_budget_seconds
        self.steps = 0
        self.produced = 0  # characters of text written, counting what is captured

    def step(self, count: int = 1) -> None:
        self.steps += count
        if self.steps > self.limits.max_steps:
            raise RenderLimitError(
                f"more than {self.limits.max_steps} loop iterations, calls and operations"
            )
        self.check_time()

    def check_time(self) -> None:
        if self.limits.clock() > self.deadline:
            raise RenderLimitError(
                f"took longer than {self.limits.time_budget_seconds:g} seconds to render"
            )

    def produce(self, chars: int) -> None:
        self.produced += chars
        # Text captured by {% set %} blocks and macros is never output, so it is counted here
        # with a margin over the output limit.
        if self.produced > 4 * self.limits.max_output_chars:
            raise RenderLimitError(
                f"produced more than {4 * self.limits.max_output_chars} characters of text"
            )


_current: ContextVar[Budget | None] = ContextVar("herald_render_budget", default=None)


class BudgetScope:
    """``with BudgetScope(limits) as budget:`` makes ``budget`` the current render's. A class,
    not a @contextmanager generator: this runs for every part of every message a launch
    composes, and the generator's set-up cost three times as much."""

    __slots__ = ("_budget", "_token")

    def __init__(self, limits: RenderLimits) -> None:
        self._budget = Budget(limits)

    def __enter__(self) -> Budget:
        self._token = _current.set(self._budget)
        return self._budget

    def __exit__(self, *_exc: object) -> None:
        _current.reset(self._token)


def current(limits: RenderLimits) -> Budget:
    """The render's budget; outside a render (never expected) a fresh one."""
    budget = _current.get()
    return budget if budget is not None else Budget(limits)


# --- sizes ---------------------------------------------------------------------------------


def weight(value: object, limits: RenderLimits) -> int:
    """Characters ``value`` holds as text, counting list items recursively (capped walk)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list | tuple):
        if len(value) > limits.max_items:
            raise RenderLimitError(f"a list of more than {limits.max_items} items")
        return len(value) + sum(weight(item, limits) for item in value)
    if isinstance(value, dict):
        return weight(list(value.keys()), limits) + weight(list(value.values()), limits)
    return 1


def check_size(chars: int, limits: RenderLimits, what: str = "a string") -> None:
    if chars > limits.max_string_chars:
        raise RenderLimitError(f"{what} of more than {limits.max_string_chars} characters")


def check_items(count: int, limits: RenderLimits, what: str = "a list") -> None:
    if count > limits.max_items:
        raise RenderLimitError(f"{what} of more than {limits.max_items} items")


def check_value(value: object, limits: RenderLimits) -> object:
    check_size(weight(value, limits), limits)
    return value


def as_count(value: object) -> int:
    try:
        return int(value)  # type: ignore[call-overload,no-any-return]
    except (TypeError, ValueError):
        return 0


# --- operators -----------------------------------------------------------------------------

# A printf conversion: flags, width and precision (either may be "*", taken from the args).
_PRINTF = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?")


def check_printf(fmt: str, args: object, limits: RenderLimits) -> None:
    """Refuse ``fmt % args`` when its widths or precisions add up past the string limit."""
    total = 0
    starred = False
    for width, precision in _PRINTF.findall(fmt):
        for number in (width, precision):
            if number == "*":
                starred = True
            elif number:
                total += int(number) if len(number) < 12 else limits.max_string_chars + 1
    if starred:
        values = args if isinstance(args, tuple) else (args,)
        total += sum(abs(v) for v in values if isinstance(v, int) and not isinstance(v, bool))
    check_size(total, limits, "a format width")


def check_format_method(fmt: str, args: tuple[Any, ...], kwargs: dict[str, Any], lim: Any) -> None:
    """Refuse ``fmt.format(...)`` when its field widths add up past the string limit."""
    limits: RenderLimits = lim
    total = 0
    pending = [fmt]
    while pending:
        text = pending.pop()
        for _, _, spec, _ in string.Formatter().parse(text):
            if not spec:
                continue
            if "{" in spec:  # a width taken from the arguments: count every integer given
                pending.append(spec)
                values = [*args, *kwargs.values()]
                total += sum(abs(v) for v in values if isinstance(v, int))
            for number in re.findall(r"\d+", spec):
                total += int(number) if len(number) < 12 else limits.max_string_chars + 1
    check_size(total, limits, "a format width")


def check_binop(operator: str, left: object, right: object, limits: RenderLimits) -> None:
    """Refuse an operation whose result would exceed a limit, before computing it."""
    if operator == "%" and isinstance(left, str):
        check_printf(left, right, limits)
    elif operator == "*":
        for sequence, count in ((left, right), (right, left)):
            if isinstance(count, int) and isinstance(sequence, str | list | tuple):
                check_items(len(sequence) * max(count, 0), limits)
                check_size(weight(sequence, limits) * max(count, 0), limits)
        if isinstance(left, int) and isinstance(right, int):
            _check_bits(left.bit_length() + right.bit_length(), limits)
    elif operator == "+":
        if isinstance(left, str | list | tuple) and isinstance(right, str | list | tuple):
            check_size(weight(left, limits) + weight(right, limits), limits)
            check_items(len(left) + len(right), limits)
    elif operator == "**" and isinstance(left, int) and isinstance(right, int):
        growth = right if 0 < right < 1 << 32 else 0 if right <= 0 else 1 << 62
        _check_bits(left.bit_length() * growth if abs(left) > 1 else 0, limits)


def _check_bits(bits: int, limits: RenderLimits) -> None:
    if bits > limits.max_int_bits:
        raise RenderLimitError(f"an integer of more than {limits.max_int_bits} bits")


# --- loops ---------------------------------------------------------------------------------


def bounded_iteration(iterable: Any, budget: Budget, static_chars: int) -> Iterator[Any]:
    """Each item of a ``{% for %}`` loop costs a step and the loop body's static text."""
    for item in iterable:
        budget.step()
        budget.produce(static_chars)
        yield item


class BoundedRange:
    """``range`` for templates: at most max_items numbers, each iteration a budget step."""

    def __init__(self, limits: RenderLimits, *args: int) -> None:
        self._numbers = range(*args)
        check_items(len(self._numbers), limits, "a range")
        self._limits = limits

    def __iter__(self) -> Iterator[int]:
        budget = current(self._limits)
        for number in self._numbers:
            budget.step()
            yield number

    def __reversed__(self) -> Iterator[int]:
        return iter(BoundedRange._from(self._limits, self._numbers[::-1]))

    @classmethod
    def _from(cls, limits: RenderLimits, numbers: range) -> BoundedRange:
        bounded = cls(limits, 0)
        bounded._numbers = numbers
        return bounded

    def __len__(self) -> int:
        return len(self._numbers)

    def __getitem__(self, index: int) -> int:
        return self._numbers[index]

    def __contains__(self, number: object) -> bool:
        return number in self._numbers

    def __repr__(self) -> str:
        return repr(self._numbers)
