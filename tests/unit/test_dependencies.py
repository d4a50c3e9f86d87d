"""Dependencies: every third-party package the product imports is declared, every declared one
is pinned with hashes in requirements.lock, and the pins stay above known advisories."""

from __future__ import annotations

import ast
import re
import sys
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.support.paths import REPO_ROOT

ROOT = REPO_ROOT
# The product's top-level packages, as pyproject.toml ships them.
PRODUCT = sorted(
    {
        name.split(".")[0]
        for name in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
            "packages"
        ]
    }
)
# Import name -> distribution name, where the two differ.
DISTRIBUTION = {
    "yaml": "pyyaml",
    "pydantic_core": "pydantic-core",
    "jinja2": "jinja2",
    "dkim": "dkimpy",
    "nacl": "pynacl",
}
# Lowest version of each package that is clear of the advisories we know of.
FLOORS = {"jinja2": "3.1.6", "aiosmtpd": "1.4.6", "idna": "3.7"}


def _project() -> dict[str, object]:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


def _declared(group: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(spec).name) for spec in group}


def _locked() -> dict[str, Version]:
    text = (REPO_ROOT / "requirements.lock").read_text()
    pins = re.findall(r"^([A-Za-z0-9_.-]+)==([^\s\\;]+)", text, flags=re.MULTILINE)
    return {canonicalize_name(name): Version(version) for name, version in pins}


def _third_party_imports() -> set[str]:
    ours = set(PRODUCT)
    found: set[str] = set()
    for package in PRODUCT:
        for path in (REPO_ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Import):
                    found.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    found.add(node.module.split(".")[0])
    return {name for name in found - ours if name not in sys.stdlib_module_names}


def test_every_imported_package_is_declared() -> None:
    project = _project()["project"]
    assert isinstance(project, dict)
    declared = _declared(project["dependencies"])
    missing = sorted(
        name
        for name in _third_party_imports()
        if canonicalize_name(DISTRIBUTION.get(name, name)) not in declared
    )
    assert missing == []


def test_every_declared_package_is_pinned_with_hashes() -> None:
    project = _project()["project"]
    assert isinstance(project, dict)
    declared = _declared(project["dependencies"]) | _declared(
        project["optional-dependencies"]["dev"]
    )
    locked = _locked()
    assert sorted(declared - set(locked)) == []
    text = (REPO_ROOT / "requirements.lock").read_text()
    blocks = re.split(r"^(?=[A-Za-z0-9_.-]+==)", text, flags=re.MULTILINE)[1:]
    assert len(blocks) == len(locked)
    assert all("--hash=sha256:" in block for block in blocks)


def test_pins_and_floors_clear_known_advisories() -> None:
    project = _project()["project"]
    assert isinstance(project, dict)
    locked = _locked()
    floors = {
        canonicalize_name(Requirement(spec).name): Requirement(spec).specifier
        for spec in project["dependencies"]
    }
    for raw_name, safe in FLOORS.items():
        name = canonicalize_name(raw_name)
        assert locked[name] >= Version(safe), name
        lowest_allowed = min(
            (Version(spec.version) for spec in floors[name] if spec.operator == ">="),
            default=Version("0"),
        )
        assert lowest_allowed >= Version(safe), f"{name} floor {lowest_allowed} < {safe}"
