"""Pydantic's validation errors in plain English, at the YAML line and field they are about.

A pydantic `loc` is almost a YAML path; it also holds the tags of discriminated unions (a step's
channel, an audience's form), which are dropped here. Errors raised with spec_fields.located
carry several problems below the value that failed, each reported at its own path.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from campaigns.errors import CampaignError, SpecError, excerpt
from campaigns.spec_audience import AUDIENCE_TAGS, CsvAudience
from campaigns.spec_fields import LOCATED, closest_key_hint, describe, quote_hint
from campaigns.spec_http import UrlAudience, WebhookStepSpec
from campaigns.spec_schedule import ScheduleSpec, WindowSpec
from campaigns.spec_steps import STEP_TAGS, StepSpec
from campaigns.yaml_loader import YamlLines, YamlPath, format_path

_MODELS_BY_TAG: dict[str, type[BaseModel]] = {
    "email": StepSpec,
    "webhook": WebhookStepSpec,
    "csv": CsvAudience,
    "url": UrlAudience,
}
_NESTED_MODELS: dict[str, type[BaseModel]] = {
    "schedule": ScheduleSpec,
    "send_window": WindowSpec,
}
# Names other tools use for a key Herald spells differently: difflib cannot guess these.
_KEY_SYNONYMS: dict[str, tuple[str, ...]] = {
    "interval": ("every",),
    "tz": ("timezone",),
    "time_zone": ("timezone",),
    "zone": ("timezone",),
    "window": ("send_window",),
    "quiet_hours": ("send_window",),
    "weekdays": ("days", "on"),
    "days": ("on",),
    "time": ("at",),
    "delay": ("after",),
    "wait": ("after",),
}

Translated = tuple[YamlPath, YamlPath, str, str | None]


def _valid_keys(root: type[BaseModel], parent: tuple[int | str, ...]) -> list[str] | None:
    """The keys allowed in the mapping at pydantic loc `parent`, for 'did you mean' hints."""
    model: type[BaseModel] | None = None
    if parent == ():
        model = root
    elif (len(parent) == 3 and parent[0] == "steps") or parent[:1] == ("audience",):
        model = _MODELS_BY_TAG.get(str(parent[-1]))
    elif len(parent) == 1:
        model = _NESTED_MODELS.get(str(parent[0]))
    if model is None:
        return None
    return [info.alias or name for name, info in model.model_fields.items()]


def _key_hint(key: object, valid: list[str]) -> str:
    for synonym in _KEY_SYNONYMS.get(str(key).lower(), ()):
        if synonym in valid:
            return f"did you mean {synonym!r}?"
    return closest_key_hint(key, valid)


def yaml_path(loc: tuple[int | str, ...]) -> YamlPath:
    """Drop the parts of a pydantic `loc` that do not exist in the YAML (union tags)."""
    path = list(loc)
    if len(path) > 1 and path[0] == "audience" and path[1] in AUDIENCE_TAGS:
        tag = path.pop(1)
        if tag == "inline" and len(path) > 1 and path[1] == "entries":
            path.pop(1)
    if len(path) > 2 and path[0] == "steps" and path[2] in STEP_TAGS:
        path.pop(2)
    return tuple(path)


def _translate(root: type[BaseModel], error: ErrorDetails) -> Iterator[Translated]:
    """(path of the problem, path to name as its field, message, hint) for one pydantic error."""
    path = yaml_path(error["loc"])
    kind, value, context = error["type"], error.get("input"), error.get("ctx", {})
    cause = context.get("error")
    if kind == LOCATED:
        for below, message, hint in context["problems"]:
            where = yaml_path((*error["loc"], *below))
            yield where, where, message, hint
    elif kind == "invalid_key" and isinstance(value, bool):
        # An unquoted on/off/yes/no key (steps rename `on` themselves); pydantic's loc holds it
        # as 1 or 0 and the loader's lines under its text: the mapping's line is the nearest.
        message = f"a key YAML reads as {describe(value)} (an unquoted on, off, yes or no)"
        yield path[:-1], path[:-1], message, 'put the key in quotes, e.g. "on":'
    elif kind == "extra_forbidden":
        valid = _valid_keys(root, error["loc"][:-1])
        hint = _key_hint(path[-1], valid) if valid else None
        yield path, path[:-1], f"unknown key {excerpt(path[-1])}", hint
    elif kind == "missing":
        yield path[:-1], path[:-1], f"missing required key {path[-1]!r}", None
    elif kind == "step_channel":
        if not isinstance(value, Mapping):
            yield path, path, f"expected a mapping of keys, got {describe(value)}", None
        else:
            path = (*path, "channel")
            message = f"must be 'email' or 'webhook', got {describe(value.get('channel'))}"
            yield path, path, message, None
    elif isinstance(cause, Exception):
        yield path, path, str(cause), getattr(cause, "hint", None)
    else:
        message, hint = _plain(kind, value, context, path, str(error["msg"]))
        yield path, path, message, hint


def _plain(
    kind: str, value: object, context: dict[str, object], path: YamlPath, fallback: str
) -> tuple[str, str | None]:
    if kind == "string_type":
        return f"expected text, got {describe(value)}", quote_hint(value)
    if kind in ("bool_type", "bool_parsing"):
        return f"expected true or false, got {describe(value)}", None
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"expected a whole number, got {describe(value)}", None
    if kind == "greater_than_equal":
        return f"must be at least {context['ge']}, got {describe(value)}", None
    if kind == "less_than_equal":
        return f"must be at most {context['le']}, got {describe(value)}", None
    if kind == "too_short":
        if path == ("steps",):
            return "a campaign needs at least one step", None
        return "must not be empty", None
    if kind in ("list_type", "tuple_type"):
        return f"expected a list, got {describe(value)}", None
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"expected a mapping of keys, got {describe(value)}", None
    if kind == "literal_error":
        return f"must be {context['expected']}, got {describe(value)}", None
    if kind == "invalid_key":
        return f"keys must be text, got {describe(value)}", None
    return fallback, None


def problems_from(
    error: ValidationError, root: type[BaseModel], lines: YamlLines, file: str
) -> list[CampaignError]:
    """One SpecError per problem in `error`, raised validating the model `root` from `file`."""
    problems: list[CampaignError] = []
    for details in error.errors(include_url=False):
        for path, field_path, message, hint in _translate(root, details):
            problems.append(
                SpecError(
                    message,
                    file=file,
                    line=lines.nearest_line(path),
                    field=format_path(field_path) or None,
                    hint=hint,
                )
            )
    return problems
