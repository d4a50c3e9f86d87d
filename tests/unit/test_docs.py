"""The documentation in ``docs/`` cannot drift from the code.

- ``docs/states.md`` is exactly what ``tools.states_doc`` renders from ``dispatch/states.py``;
- every edge the state machine allows is in it, and a transition without a name, or without
  "who"/"why", is refused;
- every ``DESIGN §N`` / ``docs/design.md §N`` reference in the code names a section that exists;
- every module, class and function the tour names exists;
- every relative link in the docs, README and CHANGELOG points to a file that exists.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path

import pytest

from dispatch import states
from tools import states_doc

# The repository root, wherever under tests/ this file lives.
ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())
DOCS = ROOT / "docs"
PACKAGES = ("herald", "campaigns", "scheduler", "dispatch", "templates", "dbtypes", "tools")


def test_states_md_is_generated_from_the_machine() -> None:
    committed = (DOCS / "states.md").read_text(encoding="utf-8")
    assert committed == states_doc.render(), (
        "docs/states.md is out of date with dispatch/states.py: run "
        "`.venv/bin/python -m tools.states_doc` and commit the result"
    )


def test_every_allowed_edge_is_documented() -> None:
    documented = {
        (None if source == states_doc.NEW else states.State(source), states.State(target))
        for source, target in states_doc.edges(states_doc.documented())
    }
    assert documented == set(states.allowed_edges())
    assert [t.code for t in states_doc.documented()] == [t.code for t in states.MACHINE]


def test_the_check_mode_fails_on_a_stale_file(tmp_path: Path) -> None:
    stale = tmp_path / "states.md"
    stale.write_text(states_doc.render().replace("T4", "T4?"), encoding="utf-8")
    assert states_doc.main(["--check", "--output", str(stale)]) == 1
    assert states_doc.main(["--output", str(stale)]) == 0
    assert states_doc.main(["--check", "--output", str(stale)]) == 0


_UNDOCUMENTED = states.Transition(
    "X1",
    "undocumented",
    frozenset({states.State.SENT}),
    states.State.FAILED,
    states.ActorKind.WORKER,
)


def test_a_transition_without_who_and_why_is_refused() -> None:
    with pytest.raises(LookupError, match="X1 undocumented"):
        states_doc.render((*states.MACHINE, _UNDOCUMENTED))
    blank = {**states_doc.NOTES, "X1": ("worker", " ")}
    with pytest.raises(LookupError, match="X1 undocumented"):
        states_doc.render((*states.MACHINE, _UNDOCUMENTED), blank)


def test_a_transition_without_a_name_is_refused() -> None:
    nameless = dataclasses.replace(_UNDOCUMENTED, name="")
    notes = {**states_doc.NOTES, "X1": ("worker", "a reason")}
    with pytest.raises(LookupError, match="no code or no name"):
        states_doc.render((*states.MACHINE, nameless), notes)


def test_a_note_without_a_transition_is_refused() -> None:
    notes = {**states_doc.NOTES, "X1": ("worker", "a reason")}
    with pytest.raises(LookupError, match="X1"):
        states_doc.render(states.MACHINE, notes)


def _design_sections() -> set[str]:
    text = (DOCS / "design.md").read_text(encoding="utf-8")
    return set(re.findall(r"^## (\d+)\. ", text, flags=re.MULTILINE))


def test_design_references_in_the_code_resolve() -> None:
    sections = _design_sections()
    assert {"1", "3", "4", "5", "6", "8", "9"} <= sections
    missing = []
    for folder in (*PACKAGES, "tests"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if "DESIGN §" not in line and "design.md §" not in line:
                    continue
                for section in re.findall(r"§(\d+)", line):
                    if section not in sections:
                        missing.append(f"{path.relative_to(ROOT)}:{number}: §{section}")
    assert missing == []


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


@pytest.mark.parametrize("page", ["tour.md", "design.md", "contributing.md", "operating.md"])
def test_every_name_the_docs_cite_exists(page: str) -> None:
    text = (DOCS / page).read_text(encoding="utf-8")
    packages = "|".join((*PACKAGES, "tests"))
    pattern = rf"`((?:{packages})(?:\.\w+)+)(?:\(\))?`"
    names = sorted(set(re.findall(pattern, text)))
    if page == "tour.md":
        assert len(names) >= 15, names  # the tour is made of real names
    assert [name for name in names if not _resolves(name)] == []


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_relative_links_point_to_files_and_headings() -> None:
    pages = [*DOCS.glob("*.md"), ROOT / "README.md", ROOT / "CHANGELOG.md"]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            linked = page if not path else page.parent / path
            if not linked.exists() or (anchor and anchor not in _anchors(linked)):
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert broken == []
