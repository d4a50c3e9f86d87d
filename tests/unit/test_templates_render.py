"""StepTemplate compile/render, the sandbox, and html_to_text."""

from __future__ import annotations

import pickle
from pathlib import Path
from types import SimpleNamespace

import pytest

from templates.errors import TemplateError
from templates.html_to_text import html_to_text
from templates.render import RenderedContent, StepTemplate


def write(base_dir: Path, name: str, source: str) -> None:
    path = base_dir / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source, encoding="utf-8")


def render_text(base_dir: Path, source: str, **variables: object) -> str:
    step = StepTemplate.compile(base_dir=base_dir, subject="s", text=source)
    return step.render(variables).text


# --- compiling and rendering ---------------------------------------------------------------


def test_inline_text_and_html(tmp_path: Path) -> None:
    step = StepTemplate.compile(
        base_dir=tmp_path,
        subject="  Welcome, {{ first_name }}!  ",
        text="Hello {{ first_name }}",
        html="<p>Hello {{ first_name }}</p>",
    )

    assert step.render({"first_name": "Ada"}) == RenderedContent(
        subject="Welcome, Ada!", text="Hello Ada", html="<p>Hello Ada</p>"
    )


def test_only_html_derives_the_text_part(tmp_path: Path) -> None:
    step = StepTemplate.compile(
        base_dir=tmp_path,
        subject="Hi",
        html='<p>Hello {{ name }},</p><p>read <a href="{{ url }}">the guide</a>.</p>',
    )

    content = step.render({"name": "Ada", "url": "https://example.com/guide"})

    assert content.html is not None
    assert content.text == "Hello Ada,\n\nread the guide (https://example.com/guide)."


def test_only_text_leaves_html_empty(tmp_path: Path) -> None:
    step = StepTemplate.compile(base_dir=tmp_path, subject="Hi", text="Plain {{ n }}")

    assert step.render({"n": 1}) == RenderedContent(subject="Hi", text="Plain 1", html=None)


def test_html_file_extends_builtin_layout(tmp_path: Path) -> None:
    write(
        tmp_path,
        "welcome.html",
        '{% extends "herald/basic.html" %}\n'
        "{% block title %}Welcome{% endblock %}\n"
        "{% block preheader %}Your account is ready{% endblock %}\n"
        "{% block content %}<p>Hello {{ name }}</p>{% endblock %}\n"
        "{% block footer %}Sent by Example{% endblock %}\n",
    )
    step = StepTemplate.compile(base_dir=tmp_path, subject="Hi", template="welcome.html")

    content = step.render({"name": "Ada"})

    assert content.html is not None
    assert content.html.startswith("<!DOCTYPE html>")
    assert "<title>Welcome</title>" in content.html
    assert "<p>Hello Ada</p>" in content.html
    # Head and the hidden preheader are not part of what a reader sees.
    assert content.text == "Hello Ada\n\nSent by Example"


def test_text_file_extends_builtin_text_layout(tmp_path: Path) -> None:
    write(
        tmp_path,
        "welcome.txt",
        '{% extends "herald/basic.txt" %}\n'
        "{% block content %}\nHello {{ name }}\n{% endblock %}\n"
        "{% block footer %}\nUnsubscribe: {{ url }}\n{% endblock %}\n",
    )
    step = StepTemplate.compile(base_dir=tmp_path, subject="Hi", template="welcome.txt")

    content = step.render({"name": "Ada", "url": "https://u.example"})

    assert content.html is None
    assert content.text == "Hello Ada\n\n-- \nUnsubscribe: https://u.example\n"


def test_user_layout_in_base_dir(tmp_path: Path) -> None:
    write(tmp_path, "layouts/brand.html", "<main>{% block body %}{% endblock %}</main>")
    write(
        tmp_path,
        "step.htm",
        '{% extends "layouts/brand.html" %}{% block body %}Hi {{ name }}{% endblock %}',
    )
    step = StepTemplate.compile(base_dir=tmp_path, subject="s", template="step.htm")

    assert step.render({"name": "Ada"}).html == "<main>Hi Ada</main>"


def test_template_file_combines_with_inline_other_part(tmp_path: Path) -> None:
    write(tmp_path, "body.html", "<b>{{ x }}</b>")
    step = StepTemplate.compile(
        base_dir=tmp_path, subject="s", text="text {{ x }}", template="body.html"
    )

    assert step.render({"x": 1}) == RenderedContent(subject="s", text="text 1", html="<b>1</b>")


def test_render_twice_gives_same_result_and_reads_no_files(tmp_path: Path) -> None:
    write(tmp_path, "layout.html", "[{% block c %}{% endblock %}]")
    write(tmp_path, "step.html", '{% extends "layout.html" %}{% block c %}{{ n }}{% endblock %}')
    step = StepTemplate.compile(base_dir=tmp_path, subject="s {{ n }}", template="step.html")
    first = step.render({"n": 7})
    # Compiled once: deleting the files must not affect later renders.
    (tmp_path / "layout.html").unlink()
    (tmp_path / "step.html").unlink()

    assert step.render({"n": 7}) == first == RenderedContent(subject="s 7", text="[7]", html="[7]")


def test_none_renders_as_empty_string(tmp_path: Path) -> None:
    assert render_text(tmp_path, "Hi {{ middle }}!", middle=None) == "Hi !"


def test_block_tags_leave_no_blank_lines_in_text(tmp_path: Path) -> None:
    source = (
        "Items:\n"
        "{% for item in items %}\n"
        "  {% if item %}\n"
        "- {{ item }}\n"
        "  {% endif %}\n"
        "{% endfor %}\n"
        "Bye"
    )
    assert render_text(tmp_path, source, items=["a", "", "b"]) == "Items:\n- a\n- b\nBye"


# --- compile-time errors -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, "no body"),
        ({"template": "body.md"}, "must end in .html"),
        ({"template": "body.html", "html": "<p>x</p>"}, "html body is given twice"),
        ({"template": "body.txt", "text": "x"}, "text body is given twice"),
    ],
)
def test_invalid_step_shapes(tmp_path: Path, kwargs: dict[str, str], expected: str) -> None:
    write(tmp_path, "body.html", "x")
    write(tmp_path, "body.txt", "x")
    with pytest.raises(TemplateError, match=expected):
        StepTemplate.compile(
            base_dir=tmp_path,
            subject="s",
            text=kwargs.get("text"),
            html=kwargs.get("html"),
            template=kwargs.get("template"),
        )


def test_missing_template_file_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(TemplateError) as caught:
        StepTemplate.compile(base_dir=tmp_path, subject="s", template="nope.html")
    assert str(tmp_path / "nope.html") in str(caught.value)


def test_missing_layout_is_reported_at_compile_time(tmp_path: Path) -> None:
    write(tmp_path, "step.html", '{% extends "herald/missing.html" %}')
    with pytest.raises(TemplateError, match=r"built-in layout herald/missing\.html"):
        StepTemplate.compile(base_dir=tmp_path, subject="s", template="step.html")


def test_syntax_error_in_file_names_file_and_line(tmp_path: Path) -> None:
    write(tmp_path, "step.html", "<p>line one</p>\n<p>{{ name }</p>\n")
    with pytest.raises(TemplateError) as caught:
        StepTemplate.compile(base_dir=tmp_path, subject="s", template="step.html")
    error = caught.value
    assert (error.template, error.line) == ("step.html", 2)
    assert "(step.html, line 2)" in str(error)
    assert "\n" not in str(error)


def test_syntax_error_in_layout_names_the_layout(tmp_path: Path) -> None:
    write(tmp_path, "base.html", "ok\nok\n{% block x %}{% endblok %}")
    write(tmp_path, "step.html", '{% extends "base.html" %}')
    with pytest.raises(TemplateError) as caught:
        StepTemplate.compile(base_dir=tmp_path, subject="s", template="step.html")
    assert (caught.value.template, caught.value.line) == ("base.html", 3)


def test_syntax_error_inline_names_part_and_line(tmp_path: Path) -> None:
    with pytest.raises(TemplateError, match=r"syntax error in subject") as caught:
        StepTemplate.compile(base_dir=tmp_path, subject="Hi {% if %}", text="x")
    assert caught.value.line == 1


@pytest.mark.parametrize("name", ["../secret.html", "sub/../../secret.html", "/etc/passwd.txt"])
def test_template_file_outside_base_dir_is_refused(tmp_path: Path, name: str) -> None:
    base_dir = tmp_path / "campaign"
    base_dir.mkdir()
    write(tmp_path, "secret.html", "SECRET")
    with pytest.raises(TemplateError, match="inside the campaign folder"):
        StepTemplate.compile(base_dir=base_dir, subject="s", template=name)


@pytest.mark.parametrize(
    "source", ['{% include "../secret.txt" %}', '{% extends "../secret.txt" %}']
)
def test_include_outside_base_dir_is_refused(tmp_path: Path, source: str) -> None:
    base_dir = tmp_path / "campaign"
    base_dir.mkdir()
    write(tmp_path, "secret.txt", "SECRET")
    with pytest.raises(TemplateError, match="template not found") as caught:
        StepTemplate.compile(base_dir=base_dir, subject="s", text=source)
    assert "SECRET" not in str(caught.value)


def test_dynamic_include_outside_base_dir_is_refused_at_render(tmp_path: Path) -> None:
    base_dir = tmp_path / "campaign"
    base_dir.mkdir()
    write(tmp_path, "secret.txt", "SECRET")
    step = StepTemplate.compile(base_dir=base_dir, subject="s", text="{% include name %}")
    with pytest.raises(TemplateError, match="does not exist"):
        step.render({"name": "../secret.txt"})


def test_symlink_out_of_base_dir_is_refused(tmp_path: Path) -> None:
    base_dir = tmp_path / "campaign"
    base_dir.mkdir()
    write(tmp_path, "secret.txt", "SECRET")
    (base_dir / "link.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(TemplateError, match="not found"):
        StepTemplate.compile(base_dir=base_dir, subject="s", template="link.txt")


# --- render-time errors --------------------------------------------------------------------


def test_undefined_variable_names_variable_and_part(tmp_path: Path) -> None:
    step = StepTemplate.compile(base_dir=tmp_path, subject="Hi {{ first_nme }}", text="x")
    with pytest.raises(TemplateError) as caught:
        step.render({"first_name": "Ada"})
    assert caught.value.message == "undefined variable 'first_nme' in subject"
    assert caught.value.line == 1


def test_undefined_variable_in_layout_names_file_and_line(tmp_path: Path) -> None:
    write(tmp_path, "base.html", "<p>\n{% block c %}{% endblock %}\n{{ company }}</p>")
    write(tmp_path, "step.html", '{% extends "base.html" %}{% block c %}{{ name }}{% endblock %}')
    step = StepTemplate.compile(base_dir=tmp_path, subject="s", template="step.html")
    with pytest.raises(TemplateError) as caught:
        step.render({"name": "Ada"})
    error = caught.value
    assert error.message == "undefined variable 'company' in html"
    assert (error.template, error.line) == ("base.html", 3)


def test_undefined_attribute_is_an_error(tmp_path: Path) -> None:
    step = StepTemplate.compile(base_dir=tmp_path, subject="s", text="{{ user.nme }}")
    with pytest.raises(TemplateError, match="undefined attribute 'nme'"):
        step.render({"user": {"name": "Ada"}})


def test_other_render_failures_become_template_errors(tmp_path: Path) -> None:
    step = StepTemplate.compile(base_dir=tmp_path, subject="s", text="x\n{{ 1 / n }}")
    with pytest.raises(TemplateError, match="ZeroDivisionError") as caught:
        step.render({"n": 0})
    assert caught.value.line == 2


SANDBOX_ESCAPES = [
    "{{ ''.__class__.__mro__ }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ ().__class__.__base__.__subclasses__() }}",
    "{% for c in [].__class__.__base__.__subclasses__() %}{{ c }}{% endfor %}",
    "{{ cycler.__init__.__globals__ }}",
    "{{ joiner.__init__.__globals__ }}",
    "{{ namespace.__init__.__globals__ }}",
    "{{ lipsum.__globals__ }}",
    "{{ self.__init__ }}",
    "{{ self._TemplateReference__context }}",
    "{{ ''['__class__'] }}",
    "{{ '' | attr('__class__') }}",
    "{{ '{0.__class__}'.format('') }}",
    "{{ x._private }}",
    # Swallowing the unsafe value must not turn the attempt into a silent success.
    "{{ ''.__class__ is defined }}",
    "{{ ''.__class__ | default('fallback') }}",
    "{% if ''.__class__ %}yes{% endif %}",
    # The immutable sandbox: templates cannot change data shared between recipients.
    "{{ shared.append(1) }}",
    "{{ mapping.update(a=1) }}",
]


@pytest.mark.parametrize("payload", SANDBOX_ESCAPES)
@pytest.mark.parametrize("part", ["subject", "text", "html"])
def test_sandbox_escape_is_an_unsafe_operation_error(
    tmp_path: Path, payload: str, part: str
) -> None:
    sources = {"subject": "s", "text": "t", part: payload}
    step = StepTemplate.compile(
        base_dir=tmp_path,
        subject=sources["subject"],
        text=sources["text"],
        html=sources.get("html"),
    )
    with pytest.raises(TemplateError, match=f"the {part} template tried an unsafe operation"):
        step.render({"x": SimpleNamespace(_private="secret"), "shared": [], "mapping": {}})


@pytest.mark.parametrize("payload", ["{{ config }}", "{{ request.environ }}", "{{ settings }}"])
def test_framework_globals_do_not_exist(tmp_path: Path, payload: str) -> None:
    step = StepTemplate.compile(base_dir=tmp_path, subject="s", html=payload)
    with pytest.raises(TemplateError, match="undefined variable"):
        step.render({})


def test_oversized_range_is_refused(tmp_path: Path) -> None:
    step = StepTemplate.compile(
        base_dir=tmp_path, subject="s", text="{% for i in range(n) %}{% endfor %}"
    )
    with pytest.raises(TemplateError, match="a range of more than 100000 items"):
        step.render({"n": 10**9})


# --- escaping and the subject --------------------------------------------------------------


def test_html_is_autoescaped_but_text_and_subject_are_not(tmp_path: Path) -> None:
    write(tmp_path, "body.html", "<p>{{ v }}</p>")
    inline = StepTemplate.compile(
        base_dir=tmp_path, subject="{{ v }}", text="{{ v }}", html="<p>{{ v }}</p>"
    )
    from_file = StepTemplate.compile(base_dir=tmp_path, subject="s", template="body.html")
    value = "<script>alert('x')</script> & co"

    content = inline.render({"v": value})

    escaped = "<p>&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; co</p>"
    assert content.html == escaped
    assert from_file.render({"v": value}).html == escaped
    assert content.text == value
    assert content.subject == value


@pytest.mark.parametrize("value", ["a\nBcc: victim@example.com", "a\rb", "a\r\nb", "a\u2028b"])
def test_line_break_in_subject_is_header_injection(tmp_path: Path, value: str) -> None:
    step = StepTemplate.compile(base_dir=tmp_path, subject="Hello {{ v }}", text="x")
    with pytest.raises(TemplateError, match=r"subject contains a line break \(header injection\)"):
        step.render({"v": value})


def test_trailing_newline_in_subject_is_stripped(tmp_path: Path) -> None:
    step = StepTemplate.compile(base_dir=tmp_path, subject="{{ v }}", text="x")
    assert step.render({"v": "\n Hello \n"}).subject == "Hello"


# --- TemplateError -------------------------------------------------------------------------


def test_template_error_formats_and_pickles() -> None:
    error = TemplateError("bad\nthing", template="a.html", line=3)

    assert str(error) == "bad thing (a.html, line 3)"
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.message, copy.template, copy.line) == ("bad thing", "a.html", 3)
    assert str(TemplateError("x", line=2)) == "x (line 2)"
    assert str(TemplateError("x")) == "x"


# --- html_to_text --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("html", "text"),
    [
        ("plain", "plain"),
        ("<p>one</p><p>two</p>", "one\n\ntwo"),
        ("<div>a</div><div>b</div>", "a\nb"),
        ("a<br>b<br/>c", "a\nb\nc"),
        ("<p>  lots   of\n\n  space  </p>", "lots of space"),
        ("<ul><li>one</li><li>two</li></ul>", "- one\n- two"),
        ('<a href="https://x.example/p">Read more</a>', "Read more (https://x.example/p)"),
        ('<a href="https://x.example">https://x.example</a>', "https://x.example"),
        ('<a href="mailto:hi@x.example">hi@x.example</a>', "hi@x.example"),
        ('<a href="https://x.example"><img src="logo.png"></a>', "https://x.example"),
        ('<a href="#top">Top</a>', "Top"),
        ("Fish &amp; chips &lt;3 &eacute;&#233; &nbsp;x", "Fish & chips <3 éé x"),
        ("<head><title>T</title><style>p{}</style></head><body>Hi</body>", "Hi"),
        ("<p>a</p><script>alert(1)</script><p>b</p>", "a\n\nb"),
        ('<div style="display: none">preheader</div>Body', "Body"),
        ("<span hidden>no</span>yes", "yes"),
        ("<h1>Title</h1><p>x</p><p></p><p></p><p>y</p>", "Title\n\nx\n\ny"),
        ("<table><tr><td>a</td><td>b</td></tr><tr><td>c</td></tr></table>", "a b\nc"),
        ("<pre>  keep\n    indent</pre>", "keep\n    indent"),
        ("<p>unclosed <b>bold", "unclosed bold"),
        ("", ""),
    ],
)
def test_html_to_text(html: str, text: str) -> None:
    assert html_to_text(html) == text
