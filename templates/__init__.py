"""Herald's bottom layer: render a step's templates and build the email bytes.

Imports nothing from Herald's other packages.
"""

from __future__ import annotations

from templates.errors import TemplateError
from templates.html_to_text import html_to_text
from templates.mime import build_message
from templates.render import RenderedContent, StepTemplate

__all__ = ["RenderedContent", "StepTemplate", "TemplateError", "build_message", "html_to_text"]
