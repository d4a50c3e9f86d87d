"""Find blocks a template overrides that its layout does not have (``herald validate`` warns).

A child template shows only the blocks its layout declares: text outside them, and a block
the layout has no place for (``{% block body %}`` under herald/basic.html, whose main block is
``content``), are silently dropped, so the message goes out without its content. Jinja raises
nothing. This module compares names on Jinja's syntax tree, without rendering anything: the
child's top-level blocks against every block of its layout chain (a layout may extend another;
a nested block of the layout is a place too).

Only a literal ``{% extends "name" %}`` can be followed; a layout chosen at render time, or a
file that cannot be read or parsed (validate reports that as an error of its own), is skipped.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from jinja2 import Environment, nodes
from jinja2.exceptions import TemplateError as JinjaTemplateError

from templates.errors import TemplateError
from templates.files import FileRefused
from templates.template_loader import _HeraldLoader
from templates.template_names import body_part_of, inline_name

# A layout that extends a layout that extends …: far beyond any real chain, and it stops a
# cycle (a.html extends b.html extends a.html), which Jinja itself only finds when rendering.
_MAX_CHAIN = 32


@dataclass(frozen=True)
class UnknownBlock:
    """``part`` (``html``, ``text``) written in ``source`` (a file name, or None for the
    campaign file's inline part) overrides ``block``, which ``layout`` does not declare."""

    part: str
    source: str | None
    block: str
    layout: str
    layout_blocks: tuple[str, ...]

    def __str__(self) -> str:
        where = f"template {self.source}" if self.source else f"the inline {self.part} part"
        offered = ", ".join(self.layout_blocks) or "none"
        return (
            f"{where} overrides block {self.block!r}, which its layout {self.layout} does not"
            f" have (its blocks: {offered}): that block is never shown"
        )


def unknown_blocks(
    base_dir: Path,
    *,
    text: str | None = None,
    html: str | None = None,
    template: str | None = None,
) -> list[UnknownBlock]:
    """Every block a step's body parts override that their layout lacks (see module doc)."""
    loader = _HeraldLoader(base_dir)
    # Only parsed, never rendered: escaping plays no part (autoescape on all the same).
    environment = Environment(loader=loader, autoescape=True)
    found: list[UnknownBlock] = []
    parts: list[tuple[str, str | None, str | None]] = [("text", None, text), ("html", None, html)]
    if template is not None:
        # A name that is no body file: validate reports it as an error of its own.
        with contextlib.suppress(TemplateError):
            parts.append((body_part_of(template), template, None))
    for part, file_name, inline in parts:
        source = _source(environment, loader, file_name) if file_name is not None else inline
        if source is None:
            continue
        tree = _parse(environment, source, file_name or inline_name(part))
        if tree is None:
            continue
        layout = _extended(tree)
        if layout is None:
            continue
        offered = _layout_blocks(environment, loader, layout)
        if offered is None:
            continue
        for block in _top_level_blocks(tree):
            if block not in offered:
                found.append(UnknownBlock(part, file_name, block, layout, tuple(sorted(offered))))
    return found


def _source(environment: Environment, loader: _HeraldLoader, name: str) -> str | None:
    try:
        source, _, _ = loader.get_source(environment, name)
    except (JinjaTemplateError, FileRefused, OSError):
        return None  # validate reports an unreadable template as an error of its own
    return source


def _parse(environment: Environment, source: str, name: str) -> nodes.Template | None:
    try:
        return environment.parse(source, name=name)
    except JinjaTemplateError:
        return None


def _extended(tree: nodes.Template) -> str | None:
    """The layout a literal ``{% extends %}`` names; None for none or a computed one."""
    for extends in tree.find_all(nodes.Extends):
        if isinstance(extends.template, nodes.Const) and isinstance(extends.template.value, str):
            return extends.template.value
        return None
    return None


def _top_level_blocks(tree: nodes.Template) -> list[str]:
    """Blocks not inside another block: the ones that replace a place in the layout. A block
    nested in an overriding block is a new place (for a template extending this one)."""
    names: list[str] = []

    def walk(node: nodes.Node) -> None:
        for child in node.iter_child_nodes():
            if isinstance(child, nodes.Block):
                names.append(child.name)
                continue  # its nested blocks are new places, not overrides
            walk(child)

    walk(tree)
    return names


def _layout_blocks(environment: Environment, loader: _HeraldLoader, layout: str) -> set[str] | None:
    """Every block of ``layout`` and the layouts it extends; None when the chain cannot be read."""
    offered: set[str] = set()
    name: str | None = layout
    seen: set[str] = set()
    while name is not None:
        if name in seen or len(seen) >= _MAX_CHAIN:
            return None
        seen.add(name)
        source = _source(environment, loader, name)
        tree = None if source is None else _parse(environment, source, name)
        if tree is None:
            return None
        offered.update(block.name for block in tree.find_all(nodes.Block))
        name = _extended(tree)
    return offered
