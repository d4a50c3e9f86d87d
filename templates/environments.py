"""The Jinja environments a step is compiled in: Herald's sandbox, limits and settings.

Two per step, one escaping everything (the HTML part) and one nothing (subject and text); the
settings a template author should know about are listed in templates/render.py.
"""

from __future__ import annotations

from jinja2 import StrictUndefined
from jinja2.utils import missing, object_type_repr

from templates.limits import RenderLimits
from templates.sandbox import HeraldSandbox, finalize
from templates.template_loader import _HeraldLoader


class _HeraldUndefined(StrictUndefined):
    """StrictUndefined whose messages read well in an operator's error report."""

    __slots__ = ()

    @property
    def _undefined_message(self) -> str:
        if self._undefined_hint:
            return self._undefined_hint
        if self._undefined_obj is missing:
            return f"undefined variable {self._undefined_name!r}"
        return (
            f"undefined attribute {self._undefined_name!r}"
            f" of {object_type_repr(self._undefined_obj)}"
        )


class _HeraldSandbox(HeraldSandbox):
    """The sandbox of templates/sandbox.py, remembering a render that went over a limit."""

    over_limit: str | None = None


def _make_environment(
    loader: _HeraldLoader, limits: RenderLimits | None = None, *, autoescape: bool
) -> _HeraldSandbox:
    return _HeraldSandbox(
        limits=limits or RenderLimits(),
        loader=loader,
        undefined=_HeraldUndefined,
        autoescape=autoescape,
        finalize=finalize,
        trim_blocks=True,
        lstrip_blocks=True,
        # Every referenced file is loaded at compile time and then never re-read: render
        # must not stat files per recipient, and a campaign must not change mid-send.
        auto_reload=False,
        cache_size=-1,
    )
