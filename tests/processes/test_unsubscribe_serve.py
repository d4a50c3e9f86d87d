"""One-click unsubscribe end to end: real `herald launch`/`worker` processes, a real SMTP server,
a real `herald serve` on 127.0.0.1 and real HTTP requests (SQLite and PostgreSQL).

The messages the server receives carry List-Unsubscribe (https and mailto) and
List-Unsubscribe-Post; a POST to the link suppresses the mailbox in the campaign's list scope,
idempotently, urlencoded or multipart; a GET or HEAD changes nothing; a forged, altered or
removed-key token is a 404 that changes nothing; a token of an old key works while that key is
still listed.
"""

from __future__ import annotations

import email
import email.policy
import json
import socket
import subprocess
from pathlib import Path

import httpx
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from campaigns.addresses import mailbox_identity
from dispatch.signed_tokens import SigningKeys, unsubscribe_token
from tests.support.paths import HERALD
from tests.support.serve_process import herald_env, herald_serve
from tests.support.smtp_server import LedgerSMTPServer

OLD = "k1:old-secret-0123456789"
NEW = "k2:new-secret-0123456789"
SETTINGS = {
    "HERALD_SIGNING_KEYS": f"{NEW},{OLD}",
    "HERALD_PUBLIC_URL": "https://unsubscribe.herald.test",
    "HERALD_UNSUBSCRIBE_DOMAIN": "unsub.herald.test",
}
CAMPAIGN = """\
name: news-0301
list: newsletter
from: "Herald News <news@herald.test>"
audience: [{email: Ann.Lee@Example.COM, name: "Ann <Lee> & Co"}, bob@example.com]
steps:
  - id: issue
    subject: "Issue 1"
    html: '<p>Hello</p><p><a href="{{ unsubscribe_url }}">Unsubscribe</a></p>'
"""


def herald(settings: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(HERALD), *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=herald_env(settings),
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result


def state(engine: Engine) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    with engine.connect() as conn:
        suppressed = conn.execute(
            sa.text("select address, scope, source from suppression order by address")
        )
        feedback = conn.execute(
            sa.text("select kind, mailbox, source, detail from mail_feedback order by id")
        )
        return [tuple(r) for r in suppressed], [tuple(r) for r in feedback]


def test_received_messages_carry_the_headers_and_a_post_to_the_link_unsubscribes(
    tmp_path: Path, db_url: str, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    path = tmp_path / "news.yaml"
    path.write_text(CAMPAIGN, encoding="utf-8")
    launched = herald(SETTINGS, "launch", str(path), "--database-url", db_url, "--json")
    assert launched.returncode == 0, launched.stderr
    assert "warning" not in launched.stderr
    smtp_url = f"smtp://{smtp_server.host}:{smtp_server.port}"
    sent = herald(
        SETTINGS, "worker", "--until-idle", "--json", "--database-url", db_url,
        "--smtp-url", smtp_url, "--poll", "0.05",
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout)["sent"] == 2

    paths: dict[str, str] = {}
    for raw in smtp_server.messages():
        message = email.message_from_bytes(raw, policy=email.policy.SMTP)
        assert isinstance(message, email.message.EmailMessage)
        assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
        https, mailto = str(message["List-Unsubscribe"]).split(", ")
        assert https.startswith("<https://unsubscribe.herald.test/u/")
        assert https.endswith(">")
        assert mailto.startswith("<mailto:unsub+")
        assert mailto.endswith("@unsub.herald.test?subject=unsubscribe>")
        url = https[1:-1]
        html = message.get_body(("html",))
        assert html is not None
        assert f'href="{url}"' in html.get_content()
        # The proxy in front of herald serve maps the public URL to it: the path is what counts.
        paths[message["To"].addresses[0].addr_spec] = url.removeprefix(
            SETTINGS["HERALD_PUBLIC_URL"]
        )
    assert sorted(paths) == ["Ann.Lee@example.com", "bob@example.com"]
    ann, bob = paths["Ann.Lee@example.com"], paths["bob@example.com"]
    ann_mailbox = mailbox_identity("Ann.Lee@Example.COM")

    with herald_serve(db_url, {"HERALD_SIGNING_KEYS": SETTINGS["HERALD_SIGNING_KEYS"]}) as served:
        assert len(served.lines) == 1  # one start-up line
        with httpx.Client(base_url=served.base_url, follow_redirects=False, timeout=30) as http:
            # GET and HEAD (scanners, prefetchers) show the page and change nothing.
            page = http.get(ann)
            assert page.status_code == 200
            assert 'method="post"' in page.text
            assert ann_mailbox in page.text
            assert "newsletter" in page.text
            assert http.head(ann).status_code == 200
            assert "set-cookie" not in page.headers
            assert state(engine) == ([], [])

            # One-click POST, as Gmail sends it: 200, no redirect, no cookie.
            done = http.post(
                ann,
                content=b"List-Unsubscribe=One-Click",
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )
            assert done.status_code == 200, done.text
            assert "location" not in done.headers
            assert "set-cookie" not in done.headers
            after_first = state(engine)
            assert after_first[0] == [(ann_mailbox, "list:newsletter", "https")]
            assert len(after_first[1]) == 1
            assert after_first[1][0][:3] == ("unsubscribe", ann_mailbox, "https")
            assert "one-click" in after_first[1][0][3]
            # Idempotent: again, the same answer and nothing more.
            assert http.post(ann, data={"List-Unsubscribe": "One-Click"}).status_code == 200
            assert state(engine) == after_first

            # Multipart (RFC 8058's preference).
            multipart = http.post(bob, files={"List-Unsubscribe": (None, "One-Click")})
            assert multipart.status_code == 200, multipart.text
            suppressed, feedback = state(engine)
            assert ("bob@example.com", "list:newsletter", "https") in suppressed
            assert "one-click" in feedback[-1][3]

            # Forged (another secret), altered (claim swapped under a genuine MAC), truncated,
            # malformed: one neutral 404 each, nothing written.
            before = state(engine)
            forged = unsubscribe_token(
                SigningKeys.parse("k2:attacker-secret-01234"),
                mailbox="carol@example.com",
                scope="global",
                campaign="news-0301",
            )
            carol = unsubscribe_token(
                SigningKeys.parse(NEW), mailbox="carol@example.com", scope="global", campaign="x"
            )
            genuine = ann.removeprefix("/u/").split(".")
            altered = ".".join([*genuine[:2], carol.split(".")[2], genuine[3]])
            refused = [f"/u/{forged}", f"/u/{altered}", ann[:-3], ann + "A", "/u/1.k2.x.y", "/u/x"]
            for bad in refused:
                for answer in (
                    http.get(bad),
                    http.post(bad, data={"List-Unsubscribe": "One-Click"}),
                ):
                    assert answer.status_code == 404, (bad, answer.status_code)
                    assert "not valid" in answer.text
                    assert "carol" not in answer.text
            assert state(engine) == before
    assert served.process.returncode == 0  # SIGTERM: a graceful stop, exit 0


def test_key_rotation_old_key_valid_while_listed_refused_once_removed(
    tmp_path: Path, db_url: str, engine: Engine
) -> None:
    old_token = unsubscribe_token(
        SigningKeys.parse(OLD), mailbox="old@example.com", scope="list:n", campaign="n"
    )
    later_token = unsubscribe_token(
        SigningKeys.parse(OLD), mailbox="later@example.com", scope="list:n", campaign="n"
    )
    new_token = unsubscribe_token(
        SigningKeys.parse(NEW), mailbox="new@example.com", scope="list:n", campaign="n"
    )
    with herald_serve(db_url, {"HERALD_SIGNING_KEYS": f"{NEW},{OLD}"}) as served:
        answer = httpx.post(
            f"{served.base_url}/u/{old_token}", data={"List-Unsubscribe": "One-Click"}
        )
        assert answer.status_code == 200
    assert state(engine)[0] == [("old@example.com", "list:n", "https")]
    # k1 retired: its tokens are refused, k2's still work.
    with (
        herald_serve(db_url, {"HERALD_SIGNING_KEYS": NEW}) as served,
        httpx.Client(base_url=served.base_url, follow_redirects=False) as http,
    ):
        assert http.get(f"/u/{later_token}").status_code == 404
        assert http.post(f"/u/{later_token}", data={}).status_code == 404
        assert http.post(f"/u/{new_token}").status_code == 200  # an empty body is fine too
    assert [row[0] for row in state(engine)[0]] == ["new@example.com", "old@example.com"]


def test_serve_errors_are_one_line_without_traceback(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'h.db'}"
    missing = herald({}, "serve", "--port", "0", "--database-url", db)
    assert missing.returncode == 2
    assert "herald serve needs HERALD_SIGNING_KEYS" in missing.stderr
    malformed = herald({"HERALD_SIGNING_KEYS": "k1:short"}, "serve", "--database-url", db)
    assert malformed.returncode == 2
    assert "HERALD_SIGNING_KEYS" in malformed.stderr
    assert "short" not in malformed.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        taken = herald(
            {"HERALD_SIGNING_KEYS": NEW}, "serve", "--port", str(port), "--database-url", db
        )
    assert taken.returncode == 1
    assert f"port {port} on 127.0.0.1 is already in use" in taken.stderr
    assert len(taken.stderr.strip().splitlines()) == 2  # the error and its hint


def test_validate_and_launch_warn_when_marketing_mail_would_have_no_header(
    tmp_path: Path, db_url: str
) -> None:
    path = tmp_path / "news.yaml"
    path.write_text(CAMPAIGN.replace("{{ unsubscribe_url }}", "https://example.com/prefs"))
    checked = herald({}, "validate", str(path))
    assert checked.returncode == 0, checked.stderr
    assert "carry no List-Unsubscribe header" in checked.stderr
    launched = herald({}, "launch", str(path), "--database-url", db_url)
    assert launched.returncode == 0
    assert "carry no List-Unsubscribe header" in launched.stderr
    transactional = tmp_path / "receipt.yaml"
    transactional.write_text(
        "name: receipt\ntransactional: true\nfrom: shop@herald.test\naudience: [a@example.com]\n"
        "steps: [{id: r, subject: Receipt, text: Thanks}]\n"
    )
    quiet = herald({}, "validate", str(transactional))
    assert quiet.returncode == 0
    assert "warning" not in quiet.stderr
