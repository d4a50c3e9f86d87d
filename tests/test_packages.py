"""PyPI has unrelated packages named campaigns, dispatch, scheduler and templates: make sure
the ones imported are this repository's, and that the layers import only downwards."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["campaigns", "scheduler", "dispatch", "templates", "herald", "dbtypes"]


@pytest.mark.parametrize("name", PACKAGES)
def test_package_comes_from_this_repository(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__file__ is not None
    assert Path(module.__file__).resolve().parent == ROOT / name


# Who may import whom: dispatch and templates are the bottom layers; the CLI wires everything.
ALLOWED = {
    "dbtypes": {"dbtypes"},
    "dispatch": {"dispatch", "dbtypes"},
    "templates": {"templates", "dbtypes"},
    "campaigns": {"campaigns", "dispatch", "templates", "dbtypes"},
    "scheduler": {"scheduler", "campaigns", "dispatch", "templates", "dbtypes"},
    "herald": set(PACKAGES),
}


@pytest.mark.parametrize("package", list(ALLOWED))
def test_layers_import_only_downwards(package: str) -> None:
    offenders = []
    for path in (ROOT / package).rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top in ALLOWED and top not in ALLOWED[package]:
                    offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert offenders == []
