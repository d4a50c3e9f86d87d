"""Render one compiled template within its limits, every failure becoming a TemplateError.

The error names the part (or JSON path) being rendered and, where Jinja's rewritten traceback
tells, the template file and line that raised.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType

from jinja2 import Template
from jinja2.exceptions import (
    SecurityError,
    TemplateNotFound,
    TemplateSyntaxError,
    UndefinedError,
)

from templates.environments import _HeraldSandbox
from templates.errors import TemplateError
from templates.limits import RenderLimitError
from templates.sandbox import render_bounded
from templates.template_loader import _HeraldLoader
from templates.template_names import INLINE_PREFIX


def render_guarded(
    template: Template, variables: Mapping[str, object], *, what: str, loader: _HeraldLoader
) -> str:
    """Render within the environment's RenderLimits, turning every failure into a TemplateError
    that names ``what`` and the line."""
    environment = template.environment
    assert isinstance(environment, _HeraldSandbox)
    if environment.over_limit is not None:
        # validate renders every recipient: once a step has gone over a limit (a time budget,
        # typically), the campaign is refused anyway, and rendering the rest would cost that
        # budget once per recipient.
        raise TemplateError(
            f"{environment.over_limit} (not rendered: this step went over a render limit"
            " for an earlier recipient)"
        )
    try:
        return render_bounded(template, variables, environment.limits)
    except RenderLimitError as exc:
        name, line = _innermost_template_line(exc.__traceback__, loader)
        if name is None and template.name is not None and not template.name.startswith("<"):
            name = template.name  # output size is checked outside any template line
        error = TemplateError(
            f"the {what} template went over a render limit: {exc}", template=name, line=line
        )
        environment.over_limit = str(error)
        raise error from exc
    except TemplateSyntaxError as exc:  # a dynamically included file that does not compile
        raise syntax_error(exc, loader) from exc
    except TemplateNotFound as exc:
        raise TemplateError(f"{what} includes a template that does not exist: {exc.name}") from exc
    except SecurityError as exc:
        name, line = _innermost_template_line(exc.__traceback__, loader)
        raise TemplateError(
            f"the {what} template tried an unsafe operation: {exc.message}",
            template=name,
            line=line,
        ) from exc
    except UndefinedError as exc:
        name, line = _innermost_template_line(exc.__traceback__, loader)
        raise TemplateError(f"{exc.message} in {what}", template=name, line=line) from exc
    except Exception as exc:
        # Anything else (a filter's TypeError, a ZeroDivisionError, a recursion limit) is
        # still the template's fault and must not escape as a foreign exception type.
        name, line = _innermost_template_line(exc.__traceback__, loader)
        raise TemplateError(
            f"rendering {what} failed: {type(exc).__name__}: {exc}", template=name, line=line
        ) from exc


def syntax_error(exc: TemplateSyntaxError, loader: _HeraldLoader) -> TemplateError:
    name = exc.name
    if exc.filename is not None:
        name = loader.names_by_filename.get(exc.filename, name)
    return TemplateError(f"syntax error: {exc.message}", template=name, line=exc.lineno)


def _innermost_template_line(
    traceback: TracebackType | None, loader: _HeraldLoader
) -> tuple[str | None, int | None]:
    """The template file and line that raised, from the traceback Jinja rewrites.

    Jinja replaces each template frame with one whose filename is the template's and whose line
    is the template line, so the last such frame is where the error happened. Inline parts have
    no file name: only their line is returned.
    """
    found: tuple[str | None, int | None] = (None, None)
    while traceback is not None:
        filename = traceback.tb_frame.f_code.co_filename
        if filename.startswith(INLINE_PREFIX):
            found = (None, traceback.tb_lineno)
        elif filename in loader.names_by_filename:
            found = (loader.names_by_filename[filename], traceback.tb_lineno)
        traceback = traceback.tb_next
    return found
