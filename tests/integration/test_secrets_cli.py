"""No secret in any CLI output or stored column (issue 7, item 9), through the real ``herald``
CLI: malformed settings, unreachable databases, and a webhook receiver that echoes the
``Authorization`` header back in every usual spelling."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from urllib.parse import quote

import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from herald.db import create_engine
from tests.egress_support.servers import LocalHTTPServer, Reply, SeenRequest
from tests.support.examples import examples
from tests.support.factories import invoke
from tests.support.hostile import HOSTILE, START, leaks

TOKEN_VARIABLE = "HERALD_SECRET_HOOK_TOKEN"
CLI = settings(
    max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """The shared in-process ``invoke``, as (exit code, output) for the properties below."""
    result = invoke(*args, env=env)
    return result.exit_code, result.output


@CLI
@given(
    secret=HOSTILE, port=st.sampled_from(["x25", "25x", ""]), option=st.sampled_from(["", "?x=1"])
)
def test_a_malformed_smtp_url_never_prints_the_password(
    secret: str, port: str, option: str
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        db = f"sqlite:///{folder}/h.db"
        url = f"smtp://user:{quote(secret, safe='')}@127.0.0.1:{port}{option}"
        if not port and not option:
            url += "?starttls=maybe"
        code, output = run("worker", "--until-idle", "--database-url", db, "--smtp-url", url)
    assert code == 2, output
    assert "Traceback" not in output
    assert "hint:" in output
    assert not leaks(output, secret), output


@CLI
@given(secret=HOSTILE, command=st.sampled_from(["status", "recover", "dead"]))
def test_an_unreachable_database_never_prints_the_password(secret: str, command: str) -> None:
    url = f"postgresql://herald:{quote(secret, safe='')}@127.0.0.1:1/herald"
    args = [command, "list"] if command == "dead" else [command]
    code, output = run(*args, "--database-url", url)
    assert code == 1, output
    assert "Traceback" not in output
    assert not leaks(output, secret), output


@CLI
@given(secret=HOSTILE, port=st.sampled_from(["x5432", "5432x"]))
def test_a_malformed_database_url_is_one_line_exit_2(secret: str, port: str) -> None:
    url = f"postgresql://herald:{quote(secret, safe='')}@127.0.0.1:{port}/herald"
    code, output = run("status", "--database-url", url)
    assert code == 2, output
    assert "Traceback" not in output
    assert "hint:" in output
    assert not leaks(output, secret), output


def echo(request: SeenRequest) -> Reply:
    """A receiver that hands the caller's credentials back, in several spellings, after a
    variable amount of filler (so the 1 KiB / 200 character cut lands anywhere)."""
    token = request.headers.get("authorization", "")
    pad = int(request.headers.get("x-pad", "0") or 0)
    body = " " * pad + f"denied {token} / {quote(token, safe='')} / {json.dumps({'auth': token})}"
    return Reply(status=400, body=body.encode("utf-8"))


CAMPAIGN = """\
name: hooks
from: "Acme <news@acme.example>"
max_attempts: 2
audience: [ann@example.com]
steps:
  - id: notify
    channel: webhook
    url: "{url}"
    headers:
      Authorization: "Bearer ${{{variable}}}"
      X-Pad: "{pad}"
    body: {{user: "{{{{ email }}}}"}}
"""


def every_stored_text(db: str) -> str:
    engine = create_engine(db)
    try:
        with engine.connect() as conn:
            names = sa.inspect(conn).get_table_names()
            rows = [
                repr(tuple(row))
                for name in names
                for row in conn.exec_driver_sql(f'select * from "{name}"')
            ]
            return "\n".join(rows)
    finally:
        engine.dispose()


# Header values must be visible ASCII; the markers keep the token from having edge spaces.
HEADER_SAFE = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=24
).map(lambda core: f"{START}{core}QjZ")


@settings(max_examples=examples(12), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(secret=HEADER_SAFE, pad=st.sampled_from([0, 150, 1000, 1010, 1020]))
def test_a_receiver_echoing_the_token_never_gets_it_stored_or_printed(
    secret: str, pad: int
) -> None:
    with LocalHTTPServer({"/hook": echo}) as server, tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "campaign.yaml"
        path.write_text(
            CAMPAIGN.format(url=server.url("/hook"), variable=TOKEN_VARIABLE, pad=pad),
            encoding="utf-8",
        )
        db = f"sqlite:///{folder}/h.db"
        env = {
            TOKEN_VARIABLE: secret,
            "HERALD_EGRESS_ALLOW": "127.0.0.1/32",
            "HERALD_EGRESS_ALLOW_HTTP": "1",
            "HERALD_EGRESS_PORTS": str(server.port),
        }
        outputs = []
        code, output = run("launch", str(path), "--database-url", db, env=env)
        assert code == 0, output
        outputs.append(output)
        code, output = run(
            "worker", "--until-idle", "--idle-horizon", "0", "--poll", "0.05",
            "--database-url", db, env=env,
        )  # fmt: skip
        assert code == 0, output
        outputs.append(output)
        for args in (["dead", "list"], ["dead", "list", "--json"], ["status", "--json"]):
            code, output = run(*args, "--database-url", db, env=env)
            outputs.append(output)
        stored = every_stored_text(db)
        assert server.requests, "the receiver was never called"
        assert server.requests[0].headers["authorization"] == f"Bearer {secret}"
    assert "HTTP 400" in stored, "the outcome text was not stored at all"
    assert not leaks(stored, secret), stored
    assert not leaks("\n".join(outputs), secret), outputs
