"""``herald validate``'s warnings: mistakes that render without error but lose content.

- A template overrides a block its layout does not have (``{% block body %}`` under
  herald/basic.html): Jinja drops it silently (templates.block_check).
- A body part (text or HTML) renders empty for the first recipient: typically the consequence
  of the first, or a condition that is false for most of the list. An HTML part counts as
  empty when it shows no text (markup alone, e.g. a layout with an empty content block), judged
  by the same HTML-to-text conversion that derives a missing text part.

Warnings never fail validate or launch: an empty footer can be deliberate.
"""

from __future__ import annotations

from campaigns.spec import LoadedCampaign, StepSpec
from scheduler.check import CheckReport
from scheduler.compose import CompiledEmail, CompileFailures, compile_steps, template_variables
from templates.block_check import unknown_blocks
from templates.errors import TemplateError
from templates.html_to_text import html_to_text
from templates.template_names import body_part_of


def campaign_warnings(loaded: LoadedCampaign, report: CheckReport) -> list[str]:
    """The warnings of a campaign whose check is ``report`` (one line each, step named)."""
    warnings: list[str] = []
    for step in loaded.spec.steps:
        if isinstance(step, StepSpec):
            blocks = unknown_blocks(
                loaded.base_dir, text=step.text, html=step.html, template=step.template
            )
            warnings.extend(f"step {step.id}: {block}" for block in blocks)
    if report.ok and report.first_recipient is not None:
        warnings.extend(_empty_parts(loaded, report))
    return warnings


def _empty_parts(loaded: LoadedCampaign, report: CheckReport) -> list[str]:
    recipient = report.first_recipient
    assert recipient is not None
    try:
        compiled = compile_steps(loaded)
    except CompileFailures:
        return []  # the check reported them already
    variables = template_variables(recipient)
    warnings: list[str] = []
    for step in compiled:
        if not isinstance(step, CompiledEmail):
            continue
        try:
            content = step.template.render(variables)
        except TemplateError:
            continue  # a problem of the check's report, not a warning
        who = f"for the first recipient ({recipient.where}, {recipient.email})"
        spec = step.spec
        html_given = spec.html is not None or (
            spec.template is not None and body_part_of(spec.template) == "html"
        )
        text_given = spec.text is not None or (
            spec.template is not None and body_part_of(spec.template) == "text"
        )
        if html_given and content.html is not None and not html_to_text(content.html).strip():
            warnings.append(f"step {spec.id}: the html part renders empty {who}")
        if text_given and not content.text.strip():
            warnings.append(f"step {spec.id}: the text part renders empty {who}")
    return warnings
