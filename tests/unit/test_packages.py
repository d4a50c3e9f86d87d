"""PyPI has unrelated packages named campaigns, dispatch, scheduler and templates: make sure the
ones imported are this repository's.

Which package may import which is checked by import-linter in ``make lint`` (the contracts are in
``[tool.importlinter]`` of pyproject.toml). The tests below prove the contracts hold here and
that each can fail: a copy of the product gets ONE new module with an import that breaks a rule,
and ``lint-imports`` must name the contract and the module.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGES = PYPROJECT["tool"]["importlinter"]["root_packages"]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

LAYERS = "Dependencies point down"
GUARD = "The egress guard imports nothing else of ours"
ACYCLIC = "No import cycles between the modules of a package"


@pytest.mark.parametrize("name", PACKAGES)
def test_package_comes_from_this_repository(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__file__ is not None
    assert Path(module.__file__).resolve().parent == ROOT / name


def test_every_shipped_package_is_under_the_contracts() -> None:
    shipped = {name.split(".")[0] for name in PYPROJECT["tool"]["setuptools"]["packages"]}
    assert sorted(PACKAGES) == sorted(shipped)


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    # Wide columns: rich would otherwise wrap a long contract name across two lines.
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "250", "NO_COLOR": "1"}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(root / "pyproject.toml")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_contracts_hold_on_this_tree() -> None:
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"Contracts: \d+ kept, 0 broken\.", result.stdout), result.stdout


@pytest.mark.parametrize(
    ("modules", "contract", "offender"),
    [
        pytest.param(
            {"templates/wrong.py": "import dispatch.models"},
            LAYERS,
            "templates.wrong",
            id="templates-imports-dispatch",
        ),
        pytest.param(
            {"dispatch/wrong.py": "import templates.render"},
            LAYERS,
            "dispatch.wrong",
            id="dispatch-imports-templates",
        ),
        pytest.param(
            {"campaigns/wrong.py": "import scheduler.models"},
            LAYERS,
            "campaigns.wrong",
            id="campaigns-imports-scheduler",
        ),
        pytest.param(
            {"dbtypes/wrong.py": "import dispatch.states"},
            LAYERS,
            "dbtypes.wrong",
            id="dbtypes-imports-dispatch",
        ),
        pytest.param(
            {"dispatch/egress/wrong.py": "import dispatch.models"},
            GUARD,
            "dispatch.egress.wrong",
            id="guard-imports-dispatch",
        ),
        pytest.param(
            {"dispatch/egress/wrong.py": "import dbtypes"},
            GUARD,
            "dispatch.egress.wrong",
            id="guard-imports-dbtypes",
        ),
        pytest.param(
            {
                "templates/wrong_a.py": "import templates.wrong_b",
                "templates/wrong_b.py": "import templates.wrong_a",
            },
            ACYCLIC,
            ".wrong_b -> .wrong_a",
            id="cycle-in-templates",
        ),
    ],
)
def test_a_wrong_import_breaks_its_contract(
    tmp_path: Path, modules: dict[str, str], contract: str, offender: str
) -> None:
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    for path, source in modules.items():
        (tmp_path / path).write_text(source + "\n")

    result = _lint_imports(tmp_path)

    assert result.returncode == 1, result.stdout + result.stderr
    assert re.search(r"Contracts: \d+ kept, 1 broken\.", result.stdout), result.stdout
    assert contract in result.stdout.split("Broken contracts")[1]
    assert offender in result.stdout


def test_the_guard_exports_its_public_names_lazily() -> None:
    """``from dispatch.egress import X`` keeps working for every public name, and importing the
    stdlib-only ``redact`` does not pull in the HTTP stack (a fresh interpreter: this one already
    has httpx)."""
    guard = importlib.import_module("dispatch.egress")
    assert {"EgressPolicy", "EgressClient", "check_url", "redact_url"} <= set(guard.__all__)
    assert [name for name in guard.__all__ if not hasattr(guard, name)] == []
    probe = "import sys, dispatch.egress.redact; print('httpx' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"
