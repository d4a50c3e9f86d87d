"""Where in a campaign a problem found by ``herald validate`` lies: file, line, step, field.

Loading errors already name the campaign file and line (campaigns.errors); a problem found
later, while rendering or checking settings, must too. SpecPlaces turns a step id (and the part
of it at fault) into ``campaign.yaml:12`` and ``steps[0].subject``, and names the audience's
data file as the operator finds it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from campaigns.spec import CsvAudience, LoadedCampaign, UrlAudience, WebhookStepSpec
from campaigns.yaml_loader import YamlPath, format_path
from dispatch.request_headers import EXPOSE_HINT, HeaderError, unexposed_variables
from scheduler.check_report import CheckReport, Problem
from templates.errors import TemplateError

# The part of a step a template message is about: "syntax error in subject", "rendering html
# failed", "the text template tried ...", "subject contains a line break".
_PART: Final = re.compile(
    r"^(subject|text|html|body)\b|\b(?:in|rendering|the) (subject|text|html|body)\b"
)


class SpecPlaces:
    def __init__(self, loaded: LoadedCampaign) -> None:
        self.loaded = loaded
        self.file = loaded.file or str(loaded.path)
        self._index = {step.id: index for index, step in enumerate(loaded.spec.steps)}

    def data_file(self) -> str:
        """The file (or URL) an audience row's line refers to."""
        audience = self.loaded.spec.audience
        if isinstance(audience, CsvAudience):
            return self.loaded.shown(audience.csv)
        if isinstance(audience, UrlAudience):
            return audience.url
        return self.file  # inline: lines are the YAML's own

    def at(self, path: YamlPath) -> str:
        line = self.loaded.lines.nearest_line(path)
        return f"{self.file}:{line}" if line is not None else self.file

    def field_of(self, step: str, error: TemplateError) -> YamlPath:
        index = self._index.get(step)
        if index is None:
            return ()
        spec = self.loaded.spec.steps[index]
        match = _PART.search(error.message)
        part = (match.group(1) or match.group(2)) if match else None
        template = getattr(spec, "template", None)
        if template is not None and (error.template == template or part is None):
            return ("steps", index, "template")
        if part is not None and part in type(spec).model_fields:
            return ("steps", index, part)
        return ("steps", index)

    def problem(self, step: str, key: str | None, message: str) -> Problem:
        index = self._index.get(step)
        path: YamlPath = ("steps", index) if index is not None else ()
        if key is not None and path:
            path = (*path, key)
        return Problem(
            f"step {step}",
            step,
            message,
            file=self.file,
            field=format_path(path) or None,
            spec_at=self.at(path),
        )

    def step_problem(
        self, step: str, error: TemplateError, *, where: str | None = None, file: str | None = None
    ) -> Problem:
        """A template failure of ``step`` (for the recipient at ``where`` in ``file``)."""
        path = self.field_of(step, error)
        return Problem(
            where or f"step {step}",
            step,
            str(error),
            file=file or self.file,
            field=format_path(path) or None,
            spec_at=self.at(path),
        )


def check_header_variables(
    places: SpecPlaces, report: CheckReport, environ: Mapping[str, str]
) -> None:
    """Every ``${NAME}`` in a webhook's or URL audience's headers must be exposed to campaigns
    (dispatch.request_headers): a problem naming the file, the step (or audience) and header."""
    spec = places.loaded.spec
    sources: list[tuple[str | None, YamlPath, Mapping[str, str]]] = []
    if isinstance(spec.audience, UrlAudience):
        sources.append((None, ("audience",), spec.audience.headers))
    for index, step in enumerate(spec.steps):
        if isinstance(step, WebhookStepSpec):
            sources.append((step.id, ("steps", index), step.headers))
    for step_id, base, headers in sources:
        try:
            refused = unexposed_variables(headers, environ)
        except HeaderError:
            continue  # syntax was checked when the file was loaded
        for header, variable in refused:
            path = (*base, "headers", header)
            report.add(
                Problem(
                    f"step {step_id}" if step_id else "audience",
                    step_id,
                    f"header {header!r}: environment variable {variable} is not exposed to"
                    f" campaigns ({EXPOSE_HINT})",
                    file=places.file,
                    field=format_path(path),
                    spec_at=places.at(path),
                )
            )
