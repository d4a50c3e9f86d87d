"""A webhook's JSON body: a tree written in YAML whose text leaves are templates.

The campaign writes the body as a mapping or list; every string in it is a Jinja template
rendered per recipient in the same sandbox as email templates (strict undefined, no access to
internals), without HTML escaping. The rendered tree is then serialised with ``json.dumps``, so
a recipient's data always lands inside a JSON string: a value such as ``", "admin": true`` stays
text and can never add a key or close the document (no JSON injection). Keys, numbers, booleans
and nulls are copied as written; a rendered leaf is always a string.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from jinja2 import Template

from templates.environments import _HeraldSandbox, _make_environment
from templates.guarded_render import render_guarded
from templates.render import _compile_inline
from templates.template_loader import _HeraldLoader

# What YAML gives and JSON can hold. Checked where the campaign is loaded; trusted here.
JsonValue = None | bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"]


@dataclass(frozen=True)
class _Leaf:
    path: str  # e.g. "body.user.name", for error messages
    template: Template


_Node = None | bool | int | float | _Leaf | list["_Node"] | dict[str, "_Node"]


class JsonBodyTemplate:
    """Compiled once per step, rendered once per recipient to JSON text."""

    def __init__(self, tree: _Node, loader: _HeraldLoader) -> None:
        # Use compile(); this constructor only stores what compile() prepared.
        self._tree = tree
        self._loader = loader

    @classmethod
    def compile(cls, body: JsonValue, *, base_dir: Path, name: str = "body") -> JsonBodyTemplate:
        """Compile every text leaf; raises TemplateError naming the leaf, e.g. body.user.name."""
        loader = _HeraldLoader(base_dir)
        environment = _make_environment(loader, autoescape=False)  # JSON, not HTML
        return cls(_compile_node(environment, body, name), loader)

    def render(self, variables: Mapping[str, object]) -> str:
        """The body as compact JSON text (UTF-8, not ASCII-escaped)."""
        rendered = self._render_node(self._tree, variables)
        return json.dumps(rendered, ensure_ascii=False, separators=(",", ":"), allow_nan=False)

    def _render_node(self, node: _Node, variables: Mapping[str, object]) -> JsonValue:
        if isinstance(node, _Leaf):
            return render_guarded(node.template, variables, what=node.path, loader=self._loader)
        if isinstance(node, list):
            return [self._render_node(item, variables) for item in node]
        if isinstance(node, dict):
            return {key: self._render_node(value, variables) for key, value in node.items()}
        return node


def _compile_node(environment: _HeraldSandbox, value: JsonValue, path: str) -> _Node:
    if isinstance(value, str):
        return _Leaf(path, _compile_inline(environment, path, value))
    if isinstance(value, list):
        return [_compile_node(environment, item, f"{path}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, dict):
        return {
            key: _compile_node(environment, item, f"{path}.{key}") for key, item in value.items()
        }
    return value
