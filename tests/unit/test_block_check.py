"""templates.block_check: blocks a template overrides that its layout does not have."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from templates.block_check import unknown_blocks

BASIC_HTML_BLOCKS = ("content", "footer", "lang", "preheader", "title")


def test_a_block_the_builtin_layout_lacks_is_found(tmp_path: Path) -> None:
    (tmp_path / "mail.html").write_text(
        '{% extends "herald/basic.html" %}\n'
        "{% block body %}Hi{% endblock %}\n"
        "{% block content %}x{% block extra %}{% endblock %}{% endblock %}\n"
    )
    [found] = unknown_blocks(tmp_path, template="mail.html")
    assert (found.part, found.source, found.block) == ("html", "mail.html", "body")
    assert found.layout == "herald/basic.html"
    assert found.layout_blocks == BASIC_HTML_BLOCKS
    assert "template mail.html overrides block 'body'" in str(found)


def test_inline_parts_and_a_chain_of_layouts(tmp_path: Path) -> None:
    # base.txt <- middle.txt (adds 'signature' inside its 'footer'): both blocks are places.
    (tmp_path / "middle.txt").write_text(
        '{% extends "herald/basic.txt" %}'
        "{% block footer %}{% block signature %}{% endblock %}{% endblock %}"
    )
    text = (
        '{% extends "middle.txt" %}{% block signature %}s{% endblock %}'
        "{% block content %}c{% endblock %}{% block nope %}{% endblock %}"
    )
    [found] = unknown_blocks(tmp_path, text=text, html="<p>no layout</p>")
    assert (found.part, found.source, found.block, found.layout) == (
        "text",
        None,
        "nope",
        "middle.txt",
    )
    assert "the inline text part" in str(found)


def test_nothing_to_say_for_broken_dynamic_or_cyclic_templates(tmp_path: Path) -> None:
    (tmp_path / "a.html").write_text('{% extends "b.html" %}{% block x %}{% endblock %}')
    (tmp_path / "b.html").write_text('{% extends "a.html" %}')
    assert unknown_blocks(tmp_path, template="a.html") == []  # a cycle: validate's error
    assert unknown_blocks(tmp_path, html="{% extends layout %}{% block x %}{% endblock %}") == []
    assert unknown_blocks(tmp_path, html="{% extends 'missing.html' %}{% block x %}") == []
    assert unknown_blocks(tmp_path, template="missing.html") == []
    assert unknown_blocks(tmp_path, template="notes.pdf") == []
    assert unknown_blocks(tmp_path, template="../outside.html") == []


@given(
    names=st.lists(st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True), max_size=6),
)
def test_exactly_the_blocks_outside_the_layout_are_reported(names: list[str]) -> None:
    here = Path(__file__).parent  # no file is read: inline source and a built-in layout
    blocks = "".join(f"{{% block {name} %}}{{% endblock %}}" for name in dict.fromkeys(names))
    found = unknown_blocks(here, html='{% extends "herald/basic.html" %}' + blocks)
    expected = [name for name in dict.fromkeys(names) if name not in BASIC_HTML_BLOCKS]
    assert [each.block for each in found] == expected
