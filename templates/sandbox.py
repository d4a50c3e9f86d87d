"""Herald's Jinja sandbox: no Python internals, and every cost bounded (see templates/limits.py).

Jinja's SandboxedEnvironment offers the hooks used here: ``intercepted_binops`` (and
``call_binop``) route ``%``, ``*``, ``**`` and ``+`` through a size check and, as a side effect,
stop the optimizer from folding them at compile time; ``call`` sees every call a template makes;
``wrap_str_format`` sees ``str.format``. The code generator wraps every ``{% for %}`` iterable
and every ``~`` concatenation, the two growth paths that have no hook. Filters and globals that
take a width or count are replaced by checked versions that take the context, which Jinja never
folds at compile time either.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from jinja2 import Template, nodes, pass_context
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context, Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import generate_lorem_ipsum

from templates.limits import (
    BoundedRange,
    BudgetScope,
    RenderLimitError,
    RenderLimits,
    as_count,
    bounded_iteration,
    check_binop,
    check_format_method,
    check_items,
    check_printf,
    check_size,
    check_value,
    current,
    weight,
)

_LOOP_FILTER = "herald_bounded_loop"


class _BoundedCodeGenerator(CodeGenerator):
    """Wraps loop iterables and ``~`` results in budget checks."""

    def visit_Template(self, node: nodes.Template, frame: Frame | None = None) -> None:
        # Before the generator collects the filters the template uses.
        for loop in node.find_all(nodes.For):
            static = sum(len(data.data) for data in loop.find_all(nodes.TemplateData))
            static_node = nodes.Const(static, environment=self.environment)
            loop.iter = nodes.Filter(
                loop.iter, _LOOP_FILTER, [static_node], [], None, None,
                lineno=loop.iter.lineno, environment=self.environment,
            )  # fmt: skip
        super().visit_Template(node, frame)

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.checked_concat(")
        super().visit_Concat(node, frame)
        self.write(")")


class HeraldSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox; an unsafe attribute fails at once; every cost is bounded.

    Jinja's sandbox turns ``''.__class__`` into an undefined value, which ``is defined``,
    ``default()`` or ``{% if %}`` would then quietly accept. Raising here makes every attempt
    to reach internals a render error, whatever the template does with the result.
    """

    code_generator_class = _BoundedCodeGenerator
    intercepted_binops = frozenset({"%", "*", "**", "+"})

    def __init__(self, *args: Any, limits: RenderLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self.filters[_LOOP_FILTER] = _loop_filter
        for name, check in _FILTER_CHECKS.items():
            self.filters[name] = _bounded(self.filters[name], check)
        self.globals["range"] = pass_context(
            lambda context, *args: BoundedRange(_limits(context), *args)
        )
        self.globals["lipsum"] = _bounded(generate_lorem_ipsum, _check_lipsum)

    def unsafe_undefined(self, obj: object, attribute: str) -> Undefined:
        raise SecurityError(
            f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe"
        )

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        current(self.limits).step()
        check_binop(operator, left, right, self.limits)
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        current(__self.limits).step()
        result = super().call(__context, __obj, *args, **kwargs)
        if isinstance(result, str | list | tuple):  # a str method such as center or replace
            check_value(result, __self.limits)
        return result

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapper = super().wrap_str_format(value)
        if wrapper is None:
            return None
        fmt: str = value.__self__
        limits = self.limits

        @functools.wraps(wrapper)
        def bounded(*args: Any, **kwargs: Any) -> str:
            mapping = args[0] if value.__name__ == "format_map" and args else kwargs
            check_format_method(
                fmt, args, dict(mapping) if isinstance(mapping, dict) else {}, limits
            )
            return wrapper(*args, **kwargs)

        return bounded

    def checked_concat(self, value: str) -> str:
        check_size(len(value), self.limits)
        current(self.limits).produce(len(value))
        return value


def _limits(context: Context) -> RenderLimits:
    environment = context.environment
    assert isinstance(environment, HeraldSandbox)
    return environment.limits


@pass_context
def _loop_filter(context: Context, iterable: Any, static_chars: int = 0) -> Any:
    return bounded_iteration(iterable, current(_limits(context)), static_chars)


@pass_context
def finalize(context: Context, value: object) -> object:
    """Every ``{{ }}`` output: None prints as an empty string, and its size is counted.

    Taking the context also keeps Jinja from evaluating output expressions at compile time.
    """
    if value is None:
        return ""
    limits = _limits(context)
    current(limits).produce(weight(value, limits))
    return value


# --- filters and globals that take a width or count ------------------------------------------

Check = Callable[[RenderLimits, Any, tuple[Any, ...], dict[str, Any]], None]


def _bounded(function: Callable[..., Any], check: Check) -> Callable[..., Any]:
    """``function`` (a filter or global) with ``check`` before it and its result's size after."""
    pass_arg = getattr(getattr(function, "jinja_pass_arg", None), "name", None)

    @pass_context
    @functools.wraps(function)
    def bounded(context: Context, *args: Any, **kwargs: Any) -> Any:
        limits = _limits(context)
        current(limits).step()
        check(limits, args[0] if args else None, args[1:], kwargs)
        if pass_arg == "context":
            result = function(context, *args, **kwargs)
        elif pass_arg == "eval_context":
            result = function(context.eval_ctx, *args, **kwargs)
        elif pass_arg == "environment":
            result = function(context.environment, *args, **kwargs)
        else:
            result = function(*args, **kwargs)
        if isinstance(result, str | list | tuple):
            check_value(result, limits)
        return result

    return bounded


def _argument(
    args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str, default: Any
) -> Any:
    if len(args) > index:
        return args[index]
    return kwargs.get(name, default)


def _check_center(
    limits: RenderLimits, value: Any, args: tuple[Any, ...], kw: dict[str, Any]
) -> None:
    check_size(as_count(_argument(args, kw, 0, "width", 80)) + weight(value, limits), limits)


def _check_indent(
    limits: RenderLimits, value: Any, args: tuple[Any, ...], kw: dict[str, Any]
) -> None:
    width = _argument(args, kw, 0, "width", 4)
    per_line = len(width) if isinstance(width, str) else as_count(width)
    lines = str(value).count("\n") + 1 if isinstance(value, str) else 1
    check_size(weight(value, limits) + lines * per_line, limits)


def _check_wordwrap(
    limits: RenderLimits, value: Any, args: tuple[Any, ...], kw: dict[str, Any]
) -> None:
    width = max(as_count(_argument(args, kw, 0, "width", 79)), 1)
    wrap = _argument(args, kw, 2, "wrapstring", None)
    size = weight(value, limits)
    check_size(size + (size // width + 1) * (len(wrap) if isinstance(wrap, str) else 2), limits)


def _check_format(
    limits: RenderLimits, value: Any, args: tuple[Any, ...], kw: dict[str, Any]
) -> None:
    if isinstance(value, str):
        check_printf(value, args or kw, limits)


def _check_join(
    limits: RenderLimits, value: Any, args: tuple[Any, ...], kw: dict[str, Any]
) -> None:
    separator = _argument(args, kw, 0, "d", "")
    if isinstance(value, list | tuple | str):
        size = weight(value, limits) + len(value) * len(str(separator))
        check_size(size, limits)


def _check_replace(
    limits: RenderLimits, value: Any, args: tuple[Any, ...], kw: dict[str, Any]
) -> None:
    old, new = str(_argument(args, kw, 0, "old", "")), str(_argument(args, kw, 1, "new", ""))
    text = str(value) if isinstance(value, str) else ""
    count = text.count(old) if old else len(text) + 1
    check_size(len(text) + count * max(len(new) - len(old), 0), limits)


def _check_batch(
    limits: RenderLimits, value: Any, args: tuple[Any, ...], kw: dict[str, Any]
) -> None:
    check_items(as_count(_argument(args, kw, 0, "linecount", 1)), limits, "a batch")


def _check_slice(
    limits: RenderLimits, value: Any, args: tuple[Any, ...], kw: dict[str, Any]
) -> None:
    check_items(as_count(_argument(args, kw, 0, "slices", 1)), limits, "a slice count")


def _check_weight(
    limits: RenderLimits, value: Any, args: tuple[Any, ...], kw: dict[str, Any]
) -> None:
    check_value(value, limits)


def _check_lipsum(
    limits: RenderLimits, value: Any, args: tuple[Any, ...], kw: dict[str, Any]
) -> None:
    # lipsum(n=5, html=True, min=20, max=100): n paragraphs of up to max words.
    count = as_count(value if value is not None else kw.get("n", 5))
    most = as_count(_argument(args, kw, 2, "max", 100))
    check_size(count * most * 12, limits, "lorem ipsum")


_FILTER_CHECKS: dict[str, Check] = {
    "center": _check_center,
    "indent": _check_indent,
    "wordwrap": _check_wordwrap,
    "truncate": _check_weight,
    "format": _check_format,
    "join": _check_join,
    "replace": _check_replace,
    "batch": _check_batch,
    "slice": _check_slice,
    "string": _check_weight,
    "pprint": _check_weight,
    "tojson": _check_weight,
    "list": _check_weight,
    "urlize": _check_weight,
    "filesizeformat": _check_weight,
}


def render_bounded(
    template: Template, variables: Mapping[str, object], limits: RenderLimits
) -> str:
    """The rendered text, generated piece by piece so its size and time are checked as it
    grows rather than after."""
    pieces: list[str] = []
    size = 0
    with BudgetScope(limits) as budget:
        for piece in template.generate(variables):
            size += len(piece)
            if size > limits.max_output_chars:
                raise RenderLimitError(f"output longer than {limits.max_output_chars} characters")
            budget.check_time()
            pieces.append(piece)
    return "".join(pieces)
