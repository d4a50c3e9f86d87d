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

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import Literal

from jinja2 import BaseLoader, Environment, FileSystemLoader, StrictUndefined, Template, meta
from jinja2.exceptions import (
    SecurityError,
    TemplateNotFound,
    TemplateSyntaxError,
    UndefinedError,
)
from jinja2.utils import missing, object_type_repr

from templates.errors import TemplateError
from templates.files import FileRefused, read_text_inside
from templates.html_to_text import html_to_text
from templates.limits import RenderLimitError, RenderLimits
from templates.sandbox import HeraldSandbox, finalize, render_bounded

Part = Literal["subject", "text", "html"]

LAYOUT_PREFIX = "herald/"
LAYOUTS_DIR = Path(__file__).parent / "layouts"

INLINE_PREFIX = "<inline "  # names of templates written in the campaign YAML itself
_HTML_SUFFIXES = (".html", ".htm", ".xhtml")  # compared lower-cased
_TEXT_SUFFIXES = (".txt", ".text")
# Everything str.splitlines() breaks on: the email package treats each as a line end, so any of
# them in a header value would start a new header.
_LINE_BREAKS = frozenset("\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029")
# What no header value may hold: every control character but TAB (C0, DEL, C1) and the Unicode
# line and paragraph separators. Some readers and servers cut a header at a NUL or treat other
# controls as line ends; a recipient's name or subject never needs one.
_FORBIDDEN_IN_HEADER = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")


def contains_line_break(value: str) -> bool:
    """True when ``value`` would span more than one line in a message header."""
    return not _LINE_BREAKS.isdisjoint(value)


def header_value_problem(value: str) -> str | None:
    """Why ``value`` cannot be a header value ("a line break", "control character U+0000"),
    or None when it can."""
    found = _FORBIDDEN_IN_HEADER.search(value)
    if found is None:
        return None
    if found.group() in _LINE_BREAKS:
        return "a line break"
    return f"control character U+{ord(found.group()):04X}"


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
            part = _body_part_of(template)
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
            part = _body_part_of(template)
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
        raise _syntax_error(exc, loader) from exc
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


class _HeraldLoader(BaseLoader):
    """Files from the campaign folder, and built-in layouts under ``herald/``.

    ``herald/`` always means the built-in layouts, even if the campaign folder has a
    ``herald`` subfolder, so a layout reference can never silently change meaning.
    """

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self._layouts = FileSystemLoader(LAYOUTS_DIR)
        # Rendering errors point at a file by its path; operators know it by its name.
        self.names_by_filename: dict[str, str] = {}

    def get_source(
        self, environment: Environment, template: str
    ) -> tuple[str, str | None, Callable[[], bool] | None]:
        if template.startswith(LAYOUT_PREFIX):
            source, filename, uptodate = self._layouts.get_source(
                environment, template[len(LAYOUT_PREFIX) :]
            )
        else:
            # The shared resolver: confined, regular files only, checked before reading.
            source, filename = _campaign_source(self.base_dir, template)
            uptodate = _always_current
            if not _is_inside(filename, self.base_dir):
                raise TemplateNotFound(template)
        if filename is not None:
            self.names_by_filename[filename] = template
        return source, filename, uptodate

    def describe(self, name: str) -> str:
        """Where ``name`` was looked for, for 'not found' messages."""
        if name.startswith(LAYOUT_PREFIX):
            return f"built-in layout {name}"
        path = PurePosixPath(name)
        if path.is_absolute() or ".." in path.parts:
            return f"{name} (only files inside {self.base_dir} can be loaded)"
        return str(self.base_dir / name)


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


def is_html_template(name: str | None) -> bool:
    """Whether the template ``name`` is HTML, i.e. the body file of the HTML part (compiled in
    the escaping environment).

    An upper-case ``welcome.HTML`` was once sent as HTML but rendered unescaped, because the
    two decisions compared suffixes each its own way; now escaping follows the part.
    """
    if name is None:
        return False
    return name == _inline_name("html") or PurePosixPath(name).suffix.lower() in _HTML_SUFFIXES


def _inline_name(part: str) -> str:
    # Angle brackets mark a name that no loader serves, like Jinja's own "<template>".
    return f"{INLINE_PREFIX}{part}>"


def _body_part_of(template: str) -> Part:
    if is_html_template(template):
        return "html"
    if PurePosixPath(template).suffix.lower() in _TEXT_SUFFIXES:
        return "text"
    raise TemplateError(
        "a template file must end in .html, .htm or .xhtml (HTML body)"
        " or .txt or .text (text body)",
        template=template,
    )


def _compile_inline(environment: _HeraldSandbox, part: str, source: str) -> Template:
    """Compile template text given inline; ``part`` names it in errors (subject, body.x…)."""
    name = _inline_name(part)
    try:
        code = environment.compile(source, name=name, filename=name)
        compiled = environment.template_class.from_code(
            environment, code, environment.make_globals(None)
        )
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
        raise _syntax_error(exc, loader) from exc
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
            raise _syntax_error(exc, loader) from exc
        _load_references(environment, referenced_source, seen=seen)


def _syntax_error(exc: TemplateSyntaxError, loader: _HeraldLoader) -> TemplateError:
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


MAX_TEMPLATE_BYTES = 16 * 1024 * 1024


def _campaign_source(base_dir: Path, name: str) -> tuple[str, str]:
    try:
        return read_text_inside(base_dir, name, max_bytes=MAX_TEMPLATE_BYTES)
    except FileRefused as exc:
        if exc.reason == "no such file" or exc.outside:
            # As Jinja's own loaders do: the message then says where templates may live.
            raise TemplateNotFound(name) from None
        raise


def _always_current() -> bool:
    return True  # an environment lives for one command; files are hashed at load anyway


def _is_inside(filename: str | None, directory: Path) -> bool:
    if filename is None:
        return False
    real_file = os.path.realpath(filename)
    real_dir = os.path.realpath(directory)
    return os.path.commonpath([real_file, real_dir]) == real_dir
