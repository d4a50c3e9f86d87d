"""A small HTML tree from the standard library's parser, for asserting what a browser would
see: which elements and attributes exist, and the text inside them (entities decoded)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser

# HTML void elements: they have no end tag, so nothing nests in them.
VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source"}
    | {"track", "wbr"}
)


@dataclass
class Node:
    tag: str
    attrs: dict[str, str | None]
    children: list[Node | str] = field(default_factory=list)

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def walk(self) -> Iterator[Node]:
        yield self
        for child in self.children:
            if isinstance(child, Node):
                yield from child.walk()

    def find_all(self, tag: str | None = None, **attrs: str) -> list[Node]:
        wanted = {k.replace("_", "-"): v for k, v in attrs.items()}
        return [
            n
            for n in self.walk()
            if (tag is None or n.tag == tag) and all(n.attrs.get(k) == v for k, v in wanted.items())
        ]

    def one(self, tag: str | None = None, **attrs: str) -> Node:
        found = self.find_all(tag, **attrs)
        assert len(found) == 1, f"{len(found)} <{tag} {attrs}> elements"
        return found[0]


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, dict(attrs))
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth].tag == tag:
                del self.stack[depth:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(document: str) -> Node:
    builder = _Builder()
    builder.feed(document)
    builder.close()
    return builder.root


def assert_nothing_injected(tree: Node, *, scripts: int = 1) -> None:
    """No element or attribute the templates never write: no <img>, no event handler, no
    script but the page's own (which carries a nonce)."""
    for node in tree.walk():
        assert node.tag not in ("img", "iframe") or node.attrs.get("data-test") == "html-body", (
            node.tag
        )
        assert not any(name.startswith("on") for name in node.attrs), node.attrs
    found = tree.find_all("script")
    assert len(found) <= scripts
    assert all(s.attrs.get("nonce") for s in found)
