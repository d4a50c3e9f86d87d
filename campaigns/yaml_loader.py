"""YAML loading that remembers where things are, so every error can name a line.

PyYAML's node tree knows the line of every key and item, but the plain Python values it builds
do not. LineRecordingLoader walks the node tree once, before building values, and records the
line of every mapping key and sequence item under its path, e.g. ('steps', 1, 'after').
Validation errors (pydantic `loc` tuples are such paths) are then mapped back to lines.

The loader also refuses what a campaign file should never contain:
- duplicate mapping keys (YAML says they are an error; PyYAML silently keeps the last one);
- alias bombs ("billion laughs") and recursive aliases, by bounding the expanded node count.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from campaigns.errors import SpecError, excerpt

YamlPath = tuple[str | int, ...]

# An inline audience of this many values is already far past what belongs in a YAML file; the
# bound exists to stop alias bombs, not to limit honest files.
MAX_EXPANDED_NODES = 1_000_000

_MERGE_TAG = "tag:yaml.org,2002:merge"
_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def format_path(path: YamlPath) -> str:
    """('steps', 1, 'after') -> 'steps[1].after'."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text


def parse_path(text: str) -> YamlPath:
    """'steps[1].after' -> ('steps', 1, 'after'); the inverse of format_path."""
    parts: list[str | int] = []
    position = 0
    while position < len(text):
        if text[position] == "." and parts:
            position += 1
        match = _PATH_PART.match(text, position)
        if match is None:
            raise ValueError(f"invalid field path {text!r}")
        key, index = match.groups()
        parts.append(int(index) if index is not None else key)
        position = match.end()
    return tuple(parts)


@dataclass(frozen=True)
class YamlLines:
    """1-based line numbers of mapping keys and sequence items, by path."""

    lines: Mapping[YamlPath, int] = field(default_factory=dict)

    def line_of(self, path: YamlPath) -> int | None:
        """The line of exactly this key or item, or None if the file has no such path."""
        return self.lines.get(path)

    def nearest_line(self, path: YamlPath) -> int | None:
        """The line of this path or else of its closest ancestor present in the file.

        For errors about something missing or synthetic (e.g. a key that should be there).
        """
        for length in range(len(path), 0, -1):
            line = self.lines.get(path[:length])
            if line is not None:
                return line
        return None


@dataclass(frozen=True)
class YamlDocument:
    data: object
    lines: YamlLines


class LineRecordingLoader(yaml.SafeLoader):
    """SafeLoader that records key/item lines and rejects duplicate keys and alias bombs."""

    def __init__(self, stream: str, *, file: str) -> None:
        super().__init__(stream)
        self.file = file
        self.lines: dict[YamlPath, int] = {}
        self._expanded_sizes: dict[int, int] = {}

    def record_lines(self, root: Node) -> None:
        """Record the line of every key and item below `root` (each node walked once)."""
        self._measure(root, (), active=set())

    def _measure(self, node: Node, path: YamlPath, *, active: set[int]) -> int:
        """Record lines below `node` and return how many nodes it expands to (aliases count)."""
        known = self._expanded_sizes.get(id(node))
        if known is not None:
            return known
        if id(node) in active:
            raise self._error("a YAML alias refers to itself (recursive structure)", node)
        active.add(id(node))
        size = 1
        if isinstance(node, MappingNode):
            for key_node, value_node in node.value:
                child = (*path, self._key_of(key_node))
                self.lines.setdefault(child, _line(key_node))
                size += self._measure(value_node, child, active=active)
        elif isinstance(node, SequenceNode):
            for index, item_node in enumerate(node.value):
                child = (*path, index)
                self.lines.setdefault(child, _line(item_node))
                size += self._measure(item_node, child, active=active)
        active.discard(id(node))
        if size > MAX_EXPANDED_NODES:
            raise self._error(
                f"the document expands to more than {MAX_EXPANDED_NODES} values through YAML"
                " aliases",
                node,
            )
        self._expanded_sizes[id(node)] = size
        return size

    def _key_of(self, key_node: Node) -> str | int:
        if isinstance(key_node, ScalarNode) and key_node.tag != _MERGE_TAG:
            key = self.construct_object(key_node)
            if isinstance(key, (str, int)) and not isinstance(key, bool):
                return key
        return str(key_node.value)

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Hashable, object]:
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG or not isinstance(key_node, ScalarNode):
                continue
            key = self.construct_object(key_node)
            if key in seen:
                raise SpecError(
                    f"duplicate key {excerpt(key)} (first defined on line {seen[key]})",
                    file=self.file,
                    line=_line(key_node),
                    hint="YAML keeps only one of them; delete or rename the other",
                )
            seen[key] = _line(key_node)
        return super().construct_mapping(node, deep=deep)

    def _error(self, message: str, node: Node) -> SpecError:
        return SpecError(message, file=self.file, line=_line(node))


def _line(node: Node) -> int:
    mark = node.start_mark
    return mark.line + 1 if mark is not None else 0


def _yaml_syntax_error(error: yaml.YAMLError, text: str, file: str) -> SpecError:
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        message = f"invalid YAML at column {mark.column + 1}: {_bounded(error.problem)}"
        if error.context and error.context_mark is not None:
            context = error.context_mark
            message += f" ({_bounded(error.context)} at line {context.line + 1})"
        hint = None
        if "'\\t'" in str(error.problem):  # PyYAML shows the tab escaped: '\t'
            hint = "indent YAML with spaces, not tabs"
        return SpecError(message, file=file, line=mark.line + 1, hint=hint)
    if isinstance(error, yaml.reader.ReaderError):
        line = text.count("\n", 0, error.position) + 1
        return SpecError(
            f"invalid YAML: the file contains the character {chr(error.character)!r}"
            if isinstance(error.character, int)
            else f"invalid YAML: {error.reason}",
            file=file,
            line=line,
        )
    return SpecError(f"invalid YAML: {_bounded(str(error))}", file=file)


def _bounded(text: str | None, limit: int = 160) -> str:
    """PyYAML's own wording, which quotes (repr) what it found: cut so it quotes little."""
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[:limit] + "…"


def load_yaml(text: str, *, file: str) -> YamlDocument:
    """Parse one YAML document; raise SpecError (with file and line) if it is not valid YAML.

    An empty document gives data None: whether that is acceptable is the caller's business.
    """
    loader: LineRecordingLoader | None = None
    try:
        loader = LineRecordingLoader(text, file=file)  # already checks the characters
        root = loader.get_single_node()
        if root is None:
            return YamlDocument(data=None, lines=YamlLines())
        loader.record_lines(root)
        data = loader.construct_document(root)
    except yaml.YAMLError as error:
        raise _yaml_syntax_error(error, text, file) from None
    except RecursionError:
        raise SpecError("the YAML is nested too deeply", file=file) from None
    finally:
        if loader is not None:
            loader.dispose()
    return YamlDocument(data=data, lines=YamlLines(dict(loader.lines)))
