"""Hostile templates fail fast with a clear error; ordinary templates still render (issue 7, 12).

The hostile templates go through the real ``herald validate``, a step each in one campaign, in a
process whose address space is capped, so a template that still allocated gigabytes (as Jinja's
constant folding of ``'%0999999999d' % 1`` did, at compile time) would fail with a MemoryError
traceback instead of our error.
"""

from __future__ import annotations

import json
import resource
import subprocess
from itertools import count
from pathlib import Path

import pytest

from templates.errors import TemplateError
from templates.limits import RenderLimits
from templates.render import StepTemplate
from tests.support.paths import HERALD

MEMORY_CAP = 1 << 30  # 1 GiB of address space: far more than validate needs, far less than 1e9

HOSTILE = {
    "printf width": "{{ '%0999999999d' % 1 }}",
    "printf star width": "{{ '%*d' % (999999999, 1) }}",
    "printf precision": "{{ '%.999999999f' % 1.0 }}",
    "string repeat": "{{ 'x' * 10**9 }}",
    "string repeat literal": "{{ 'x' * 1000000000 }}",
    "list repeat": "{{ [1] * 10**9 }}",
    "huge integer": "{{ 10 ** (10 ** 10) }}",
    "huge range": "{% for i in range(10**9) %}{% endfor %}",
    "nested ranges": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
    "{% endfor %}",
    "nested loops over strings": "{% for a in 'x' * 100000 %}{% for b in 'x' * 100000 %}"
    "{% endfor %}{% endfor %}",
    "lipsum": "{{ lipsum(10**6) }}",
    "center": "{{ 'a'|center(10**9) }}",
    "center literal": "{{ 'a'|center(1000000000) }}",
    "indent": "{{ 'a\nb'|indent(1000000000) }}",
    "wordwrap": "{{ ('x ' * 900000)|wordwrap(1, wrapstring='-----') }}",
    "format filter": "{{ '%0999999999d'|format(1) }}",
    "str.format": "{{ '{:>999999999}'.format(1) }}",
    "str.format nested width": "{{ '{:>{}}'.format(1, 999999999) }}",
    "replace": "{{ ('x' * 1000000)|replace('x', 'yyyy') }}",
    "join": "{{ (['x' * 1000000] * 3)|join }}",
    "batch fill": "{{ [1]|batch(1000000000, 0)|list }}",
    "concat doubling": "{% set ns = namespace(s='xx') %}{% for i in range(64) %}"
    "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
    "binary macro recursion": "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}"
    "{% endmacro %}{{ f(60) }}",
    "output size": "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",
    "captured output": "{% set big %}{% for i in range(100000) %}" + "s" * 1000 + "{% endfor %}"
    "{% endset %}{{ big|length }}",
}

CAMPAIGN_HEAD = """\
name: hostile
from: "Herald Tests <news@herald.test>"
audience: people.csv
steps:
"""


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def _validate(folder: Path, body: str) -> subprocess.CompletedProcess[str]:
    return _validate_steps(folder, {"welcome": body}, files={"welcome": "body.txt"})


def _validate_steps(
    folder: Path, bodies: dict[str, str], files: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``herald validate`` of one campaign with a step per body (in ``files[step]``, by default
    ``<step>.txt``), in a process whose address space is capped."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "people.csv").write_text(
        "email,name\nada@example.org,Ada\nbob@example.org,Bob\ncy@example.org,Cy\n"
    )
    steps = []
    for n, (step, body) in enumerate(bodies.items()):
        file = (files or {}).get(step, f"{step}.txt")
        (folder / file).write_text(body)
        after = "\n    after: 1d" if n else ""
        steps.append(
            f'  - id: {step}{after}\n    subject: "Hello {{{{ name }}}}"\n    template: {file}\n'
        )
    path = folder / "campaign.yaml"
    path.write_text(CAMPAIGN_HEAD + "".join(steps))
    return subprocess.run(
        [str(HERALD), "validate", "--json", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_cap_memory,  # the test process starts no threads before this
    )


def test_each_hostile_template_fails_fast_through_validate(tmp_path: Path) -> None:
    """Every hostile template is a step of one campaign, validated by one capped process: each
    step is rendered on its own (a step over a limit is reported and the next one rendered), so
    one process judges them all where one process each spent more CPU importing Herald than
    rendering (25 processes). The cap still holds each render: a template that allocated
    gigabytes would end the process with a MemoryError."""
    steps = {name: f"hostile{n:02d}" for n, name in enumerate(HOSTILE)}
    result = _validate_steps(tmp_path / "c", {steps[name]: HOSTILE[name] for name in HOSTILE})

    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert "MemoryError" not in result.stderr
    problems = json.loads(result.stdout)["problems"]
    wrong: dict[str, object] = {}
    for name, step in steps.items():
        # Its first problem (recipients come in order, so: Ada's) names the step, the
        # recipient, the limit and the template file.
        mine = [problem for problem in problems if problem["step"] == step]
        first = mine[0] if mine else {}
        if not (
            first
            and "ada@example.org" in first["where"]
            and ("went over a render limit" in first["error"] or "RecursionError" in first["error"])
            and f"{step}.txt" in first["error"]
        ):
            wrong[name] = first
    assert wrong == {}, f"not stopped by a limit, or not said so: {wrong}\n{result.stdout}"


def test_an_ordinary_template_still_validates(tmp_path: Path) -> None:
    body = (
        "Hi {{ name|title }},\n"
        "{% for i in range(3) %}- item {{ i * 2 + 1 }} {{ '%05.1f' % (i / 3) }}\n{% endfor %}"
        "{{ 'ab' * 3 }} {{ [1, 2] + [3] }} {{ 2 ** 10 }} {{ 'x'|center(9) }}|\n"
        "{{ '{:>6}'.format(name) }} {{ lipsum(1, html=False, min=5, max=6)|length > 0 }}\n"
        "{% set ns = namespace(s='') %}{% for c in 'abc' %}{% set ns.s = ns.s ~ c %}{% endfor %}"
        "{{ ns.s }} {{ range(5)|list|join(',') }} {{ range(4)|length }} {{ ('a b'|wordwrap(1)) }}"
    )
    result = _validate(tmp_path / "c", body)

    assert result.returncode == 0, (result.stdout, result.stderr)
    step = StepTemplate.compile(base_dir=tmp_path / "c", subject="s", template="body.txt")
    text = step.render({"name": "ada"}).text
    assert text.startswith("Hi Ada,\n- item 1 000.0\n- item 3 000.3\n- item 5 000.7\n")
    assert "ababab [1, 2, 3] 1024     x    |" in text
    assert "   ada True" in text
    assert "abc 0,1,2,3,4 4 a\nb" in text


def test_the_time_budget_uses_the_injected_clock(tmp_path: Path) -> None:
    ticks = count()
    limits = RenderLimits(time_budget_seconds=5, clock=lambda: float(next(ticks)))
    step = StepTemplate.compile(
        base_dir=tmp_path,
        subject="s",
        text="{% for i in range(100) %}{{ i }}{% endfor %}",
        limits=limits,
    )

    with pytest.raises(TemplateError, match="took longer than 5 seconds"):
        step.render({})


def test_a_step_over_a_limit_is_not_rendered_again_for_later_recipients(tmp_path: Path) -> None:
    limits = RenderLimits(max_steps=50)
    step = StepTemplate.compile(
        base_dir=tmp_path,
        subject="s",
        text="{% for i in range(n) %}{{ i }}{% endfor %}",
        limits=limits,
    )
    assert step.render({"n": 10}).text.startswith("0123456789")

    with pytest.raises(TemplateError, match="more than 50 loop iterations"):
        step.render({"n": 100})
    with pytest.raises(TemplateError, match="not rendered: this step went over a render limit"):
        step.render({"n": 1})


def test_compiling_never_evaluates_hostile_expressions(tmp_path: Path) -> None:
    # Before: Jinja folded these while compiling, allocating a gigabyte each.
    for body in HOSTILE.values():
        StepTemplate.compile(base_dir=tmp_path, subject="s", text=body)
