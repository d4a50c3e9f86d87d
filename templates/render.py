"""Compile a step's subject and bodies once, then render them once per recipient.

Security model: campaign authors write templates; recipients supply the variables. Templates run
in Jinja's immutable sandbox with strict undefined handling, and may only load files from the
campaign's folder (``base_dir``) and Herald's built-in layouts (``herald/<name>``). Every
attempt to reach Python internals fails the render with a TemplateError instead of printing
anything. Every render is also bounded (templates/limits.py, RenderLimits): output size per
part, a time budget, loop steps, and the size of every string, list or number a template builds;
going over one is a TemplateError naming the limit, and Jinja never evaluates a template's
expressions while compiling it.

Jinja settings a template author should know about:

- The HTML part is autoescaped, everything it includes, imports or extends too (a ``.txt``
  partial included from HTML escapes like the rest of the HTML); text and subject are not.
  Escaping is decided by the part being rendered, not by each file's name: the HTML part and the
  other parts are compiled in two environments, one escaping everything and one nothing. Which
  part a body file is (``.html``/``.htm``/``.xhtml`` in any letter case) is decided by one
  function, is_html_template.
- ``trim_blocks`` and ``lstrip_blocks`` are on, so block tags on their own line leave no blank
  lines or indentation behind; this matters most in text bodies.
- ``None`` prints as an empty string, so an optional field that is present but empty does not
  print "None" into a customer's email. A missing variable is still an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from jinja2 import Template, meta
from jinja2.exceptions import TemplateNotFound, TemplateSyntaxError

from templates.environments import _HeraldSandbox, _make_environment
from templates.errors import TemplateError
from templates.guarded_render import render_guarded, syntax_error
from templates.header_values import contains_line_break, header_value_problem
from templates.html_to_text import html_to_text
from templates.limits import RenderLimits
from templates.template_loader import LAYOUT_PREFIX, LAYOUTS_DIR, MAX_TEMPLATE_BYTES, _HeraldLoader
from templates.template_names import (
    INLINE_PREFIX,
    Part,
    body_part_of,
    inline_name,
    is_html_template,
)

# Importable from here as before the split: the loader, environments, guarded rendering, part
# names and header checks now live in templates/ modules of their own.
__all__ = [
    "INLINE_PREFIX",
    "LAYOUTS_DIR",
    "LAYOUT_PREFIX",
    "MAX_TEMPLATE_BYTES",
    "Part",
    "RenderedContent",
    "StepTemplate",
    "contains_line_break",
    "header_value_problem",
    "is_html_template",
    "render_guarded",
]


@dataclass(frozen=True)
class RenderedContent:
    subject: str
    text: str  # always present: derived from html when the step gives only html
    html: str | None


class StepTemplate:
    """A step's subject/text/html compiled once, rendered once per recipient."""

    def __init__(
        self,
        *,
        subject: Template,
        text: Template | None,
        html: Template | None,
        loader: _HeraldLoader,
    ) -> None:
        # Use compile(); this constructor only stores what compile() prepared.
        self._subject = subject
        self._text = text
        self._html = html
        self._loader = loader

    @classmethod
    def compile(
        cls,
        *,
        base_dir: Path,
        subject: str,
        text: str | None = None,
        html: str | None = None,
        template: str | None = None,
        limits: RenderLimits | None = None,
    ) -> StepTemplate:
        """Compile the step's parts; ``template`` is a file in ``base_dir`` holding one body."""
        if template is not None:
            part = body_part_of(template)
            if (text if part == "text" else html) is not None:
                raise TemplateError(
                    f"the {part} body is given twice: as template file and as inline {part}",
                    template=template,
                )
        if text is None and html is None and template is None:
            raise TemplateError("the step has no body: give text, html or a template file")

        loader = _HeraldLoader(base_dir)
        plain = _make_environment(loader, limits, autoescape=False)
        markup = _make_environment(loader, limits, autoescape=True)
        compiled: dict[Part, Template] = {"subject": _compile_inline(plain, "subject", subject)}
        if text is not None:
            compiled["text"] = _compile_inline(plain, "text", text)
        if html is not None:
            compiled["html"] = _compile_inline(markup, "html", html)
        if template is not None:
            part = body_part_of(template)
            environment = markup if part == "html" else plain
            compiled[part] = _compile_file(environment, loader, template)
        return cls(
            subject=compiled["subject"],
            text=compiled.get("text"),
            html=compiled.get("html"),
            loader=loader,
        )

    def render(self, variables: Mapping[str, object]) -> RenderedContent:
        subject = self._render_part("subject", self._subject, variables).strip()
        problem = header_value_problem(subject)
        if problem is not None:
            raise TemplateError(f"subject contains {problem} (header injection)")
        html = None if self._html is None else self._render_part("html", self._html, variables)
        if self._text is not None:
            text = self._render_part("text", self._text, variables)
        else:
            assert html is not None  # compile() guarantees at least one body
            text = html_to_text(html)
        return RenderedContent(subject=subject, text=text, html=html)

    def _render_part(self, part: Part, template: Template, variables: Mapping[str, object]) -> str:
        return render_guarded(template, variables, what=part, loader=self._loader)


def _flat_globals(environment: _HeraldSandbox) -> dict[str, Any]:
    """The environment's globals as one plain dict, for a template's own globals.

    Jinja gives a template a ChainMap over the environment's globals, and copies it into a new
    dict on every render (``new_context``), item by item in Python: 7% of composing a message
    at fan-out. A plain dict is copied in C. The sandbox sets its globals when the environment
    is made, before anything compiles, so the snapshot misses nothing.
    """
    return dict(environment.globals)


def _compile_inline(environment: _HeraldSandbox, part: str, source: str) -> Template:
    """Compile template text given inline; ``part`` names it in errors (subject, body.x…)."""
    name = inline_name(part)
    try:
        code = environment.compile(source, name=name, filename=name)
        globals_ = _flat_globals(environment)
        compiled = environment.template_class.from_code(environment, code, globals_)
    except TemplateSyntaxError as exc:
        raise TemplateError(f"syntax error in {part}: {exc.message}", line=exc.lineno) from exc
    _load_references(environment, source, seen=set())
    return compiled


def _compile_file(environment: _HeraldSandbox, loader: _HeraldLoader, name: str) -> Template:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        raise TemplateError(
            f"a template file must be inside the campaign folder {loader.base_dir}", template=name
        )
    try:
        compiled = environment.get_template(name)
    except TemplateNotFound as exc:
        raise TemplateError(f"template file not found: {loader.describe(name)}") from exc
    except TemplateSyntaxError as exc:
        raise syntax_error(exc, loader) from exc
    compiled.globals = _flat_globals(environment)
    source, _, _ = loader.get_source(environment, name)
    _load_references(environment, source, seen={name})
    return compiled


def _load_references(environment: _HeraldSandbox, source: str, *, seen: set[str]) -> None:
    """Compile every layout/include/import named literally in ``source``, recursively.

    This surfaces a missing layout or a syntax error in one at compile time, once, and leaves
    the compiled templates in the environment's cache for every later render. Names computed at
    render time cannot be known here; they are loaded on first use.
    """
    loader = environment.loader
    assert isinstance(loader, _HeraldLoader)
    for name in meta.find_referenced_templates(environment.parse(source)):
        if name is None or name in seen:
            continue
        seen.add(name)
        try:
            environment.get_template(name)
            referenced_source, _, _ = loader.get_source(environment, name)
        except TemplateNotFound as exc:
            raise TemplateError(f"template not found: {loader.describe(name)}") from exc
        except TemplateSyntaxError as exc:
            raise syntax_error(exc, loader) from exc
        _load_references(environment, referenced_source, seen=seen)
