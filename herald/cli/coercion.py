"""Option values converted without pydantic when the conversion is plain.

Typer converts every option's value (a default included) through a pydantic ``TypeAdapter``,
and building the first one imports pydantic: about a quarter of ``herald status``'s start-up,
for ``--database-url`` and ``--interval``. ``install()`` gives typer a conversion that returns
the plain cases directly — a string, a whole number or a decimal written plainly, within the
option's min/max, a StrEnum's member or value (--log-level: the service commands) — with the
value pydantic would have returned, and hands every other value
to typer's own conversion unchanged (so every error message, and every exotic spelling, is
still typer's). tests/unit/test_cli_coercion.py compares the two on generated values.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final

import typer.core
from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param

if TYPE_CHECKING:
    from typer._click import Context
    from typer.core import _TyperParameter
    from typer.models import ParameterInfo

# Spellings every reader agrees on (no sign, exponent, underscore or leading zero); anything
# else is left to pydantic. Short enough that a float holds a whole number exactly.
_WHOLE: Final = re.compile(r"-?(?:0|[1-9][0-9]{0,14})")
_DECIMAL: Final = re.compile(r"-?(?:0|[1-9][0-9]{0,14})(?:\.[0-9]{1,15})?")
_UNSURE: Final = object()


def plain_value(annotation: Any, info: ParameterInfo, value: Any) -> Any:
    """What pydantic would make of ``value`` for ``annotation``, or ``_UNSURE``."""
    if info.parser is not None:
        return _UNSURE
    if annotation is str:
        return value if type(value) is str else _UNSURE
    if annotation is bool:  # typer asks even for --help's None (which never gets here)
        return value if type(value) is bool else _UNSURE
    if _is_str_enum(annotation):  # --log-level, --log-format: a member, or a member's value
        if type(value) is annotation:
            return value
        if type(value) is str:
            return next((member for member in annotation if member.value == value), _UNSURE)
        return _UNSURE
    number: int | float
    if annotation is int:
        if type(value) is int:
            number = value
        elif type(value) is str and _WHOLE.fullmatch(value):
            number = int(value)
        else:
            return _UNSURE
    elif annotation is float:
        if type(value) is float and math.isfinite(value):
            number = value
        elif type(value) is int or (type(value) is str and _DECIMAL.fullmatch(value)):
            number = float(value)
        else:
            return _UNSURE
    else:
        return _UNSURE
    if (info.min is not None and number < info.min) or (info.max is not None and number > info.max):
        return _UNSURE  # typer's message (or its clamp) says what the range is
    return number


@dataclass(frozen=True)
class _Plain(RuntimeParam):
    """A str, bool, int, float or StrEnum option: its plain values directly, the rest through
    typer."""

    def _coerce_value(self, value: Any, param: _TyperParameter, ctx: Context) -> Any:
        plain = _UNSURE
        if not param.multiple and param.nargs == 1:
            plain = plain_value(self.annotation, self.parameter_info, value)
        if plain is not _UNSURE:
            return plain
        typers = build_runtime_param(TypeDescriptor(self.annotation, self.parameter_info, None))
        return typers._coerce_value(value, param=param, ctx=ctx)


def _is_str_enum(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, StrEnum)


def _runtime_param(descriptor: TypeDescriptor) -> RuntimeParam:
    annotation = descriptor.annotation
    if descriptor.file_annotation is None and (
        annotation in (str, bool, int, float) or _is_str_enum(annotation)
    ):
        return _Plain(parameter_info=descriptor.parameter_info, annotation=descriptor.annotation)
    return build_runtime_param(descriptor)


def install() -> None:
    """Use the plain conversion for every typer parameter of this process. A typer without
    the hook converts as before (tests/unit/test_cli_imports.py then fails: pydantic is back)."""
    if getattr(typer.core, "build_runtime_param", None) is build_runtime_param:
        typer.core.build_runtime_param = _runtime_param  # type: ignore[attr-defined]
