"""Which part of a step a template is, by its name; and the names of inline templates.

Escaping follows the part (the HTML part is compiled in the escaping environment), so this is
the one place that decides what counts as HTML.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Literal

from templates.errors import TemplateError

Part = Literal["subject", "text", "html"]

INLINE_PREFIX = "<inline "  # names of templates written in the campaign YAML itself
_HTML_SUFFIXES = (".html", ".htm", ".xhtml")  # compared lower-cased
_TEXT_SUFFIXES = (".txt", ".text")


def is_html_template(name: str | None) -> bool:
    """Whether the template ``name`` is HTML, i.e. the body file of the HTML part (compiled in
    the escaping environment).

    An upper-case ``welcome.HTML`` was once sent as HTML but rendered unescaped, because the
    two decisions compared suffixes each its own way; now escaping follows the part.
    """
    if name is None:
        return False
    return name == inline_name("html") or PurePosixPath(name).suffix.lower() in _HTML_SUFFIXES


def inline_name(part: str) -> str:
    # Angle brackets mark a name that no loader serves, like Jinja's own "<template>".
    return f"{INLINE_PREFIX}{part}>"


def body_part_of(template: str) -> Part:
    if is_html_template(template):
        return "html"
    if PurePosixPath(template).suffix.lower() in _TEXT_SUFFIXES:
        return "text"
    raise TemplateError(
        "a template file must end in .html, .htm or .xhtml (HTML body)"
        " or .txt or .text (text body)",
        template=template,
    )
