"""``herald validate`` warns (and still passes) when a template overrides a block its layout
lacks, or a body part renders empty for the first recipient."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import Result

from tests.support.factories import invoke

# Unsubscribe links configured, so the only warnings are the ones these tests are about.
LINKS = {
    "HERALD_SIGNING_KEYS": "k1:warnings-secret-0123456789",
    "HERALD_PUBLIC_URL": "https://u.herald.test",
}


def validate_with_links(*args: str) -> Result:
    return invoke(*args, env=LINKS)


CAMPAIGN = """\
name: warned
from: "Herald Tests <news@herald.test>"
audience:
  - {{email: first@example.com, name: Ann, vip: ""}}
  - {{email: second@example.com, name: Bo, vip: "yes"}}
steps:
  - id: welcome
    subject: "Hello {{{{ name }}}}"
    template: welcome.html
  - id: perks
    subject: "Perks"
    text: "{{% if vip %}}Your perks{{% endif %}}"
{extra}
"""
LAYOUT_MISTAKE = """\
{% extends "herald/basic.html" %}
{% block body %}<p>Hello {{ name }}</p>{% endblock %}
"""
FINE = """\
{% extends "herald/basic.html" %}
{% block content %}<p>Hello {{ name }}</p>{% endblock %}
"""


def _campaign(folder: Path, body: str, extra: str = "") -> Path:
    (folder / "welcome.html").write_text(body)
    path = folder / "campaign.yaml"
    path.write_text(CAMPAIGN.format(extra=extra))
    return path


def test_unknown_block_and_empty_parts_are_warnings(tmp_path: Path) -> None:
    path = _campaign(tmp_path, LAYOUT_MISTAKE)
    result = validate_with_links("validate", str(path))
    assert result.exit_code == 0, result.output  # a warning, not a failure
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: step welcome: template welcome.html overrides block 'body', which its layout"
        " herald/basic.html does not have (its blocks: content, footer, lang, preheader,"
        " title): that block is never shown",
        # The consequence: the layout's content block is empty, so the message shows nothing
        # (the text part derived from it is not warned about twice).
        "warning: step welcome: the html part renders empty for the first recipient"
        " (line 4, first@example.com)",
        "warning: step perks: the text part renders empty for the first recipient"
        " (line 4, first@example.com)",
    ]
    assert result.stdout.startswith("ok: warned:")


def test_json_lists_the_warnings_and_a_fine_campaign_has_none(tmp_path: Path) -> None:
    path = _campaign(tmp_path, LAYOUT_MISTAKE)
    document = json.loads(validate_with_links("validate", str(path), "--json").stdout)
    assert document["ok"] is True
    assert len(document["warnings"]) == 3
    assert document["warnings"][0].startswith("step welcome: template welcome.html overrides")
    fine = tmp_path / "fine"
    fine.mkdir()
    path = _campaign(fine, FINE)
    path.write_text(path.read_text().replace('vip: ""', 'vip: "no"'))
    result = validate_with_links("validate", str(path), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["warnings"] == []
    assert "warning" not in validate_with_links("validate", str(path)).stderr


def test_a_dropped_block_is_never_even_rendered_so_only_the_warning_tells(
    tmp_path: Path,
) -> None:
    path = _campaign(tmp_path, LAYOUT_MISTAKE.replace("{{ name }}", "{{ missing }}"))
    result = validate_with_links("validate", str(path))
    assert result.exit_code == 0, result.output  # Jinja never evaluates the dropped block
    assert "warning: step welcome: template welcome.html overrides block 'body'" in result.stderr


def test_a_broken_campaign_still_fails_and_shows_its_warnings(tmp_path: Path) -> None:
    path = _campaign(tmp_path, LAYOUT_MISTAKE)
    path.write_text(path.read_text().replace('"Perks"', '"Perks {{ missing }}"'))
    result = validate_with_links("validate", str(path))
    assert result.exit_code == 2
    assert "warning: step welcome: template welcome.html overrides block 'body'" in result.stderr
    assert "undefined variable 'missing'" in result.stderr
    # Parts are only judged empty once everything renders.
    assert "renders empty" not in result.stderr
