"""SMTP AUTH never in clear text (issue 7, item 8), through the real ``herald`` CLI and a real
aiosmtpd server on 127.0.0.1 that records whether its session was encrypted when each command
arrived. The server itself accepts AUTH in clear (``auth_require_tls=False``): refusing it is
Herald's job.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
import trustme
from typer.testing import Result

from dispatch.smtp import SmtpConfig, SmtpUrlError
from herald.db import create_engine
from tests.egress_support.servers import tls_pair
from tests.support.auth_smtp import AuthSMTPServer
from tests.support.campaign_files import write_campaign
from tests.support.factories import invoke

PASSWORD = "pa55-w0rd/with?odd#chars"
USER = "mailer"
MESSAGES = 6  # write_campaign(recipients=2): three steps, all due now


def encoded(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def trusted(ca: trustme.CA, tmp_path: Path) -> dict[str, str]:
    """The CLI's environment: it trusts the test CA the way an operator would (SSL_CERT_FILE)."""
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    return {"SSL_CERT_FILE": str(bundle)}


@pytest.fixture
def launched(tmp_path: Path) -> str:
    path, _ = write_campaign(tmp_path / "campaign", recipients=2)
    db = f"sqlite:///{tmp_path / 'herald.db'}"
    result = invoke("launch", str(path), "--database-url", db)
    assert result.exit_code == 0, result.output
    return db


def run_worker(db: str, smtp_url: str, env: dict[str, str] | None = None) -> Result:
    args = ["worker", "--until-idle", "--database-url", db, "--smtp-url", smtp_url]
    args += ["--poll", "0.05", "--idle-horizon", "0", "--concurrency", "2"]
    return invoke(*args, env=env)


def job_rows(db: str) -> list[sa.Row[tuple[str, int, str | None]]]:
    engine = create_engine(db)
    try:
        with engine.connect() as conn:
            return list(
                conn.execute(sa.text("select state, send_attempts, outcome_text from send_job"))
            )
    finally:
        engine.dispose()


def url(server: AuthSMTPServer, options: str = "", *, credentials: bool = True) -> str:
    userinfo = f"{USER}:{encoded(PASSWORD)}@" if credentials else ""
    return f"smtp://{userinfo}127.0.0.1:{server.port}{options}"


def test_password_is_sent_only_after_starttls(
    ca: trustme.CA, trusted: dict[str, str], launched: str
) -> None:
    with AuthSMTPServer(tls=tls_pair(ca, "127.0.0.1").server) as server:
        result = run_worker(launched, url(server), trusted)
        assert result.exit_code == 0, result.output
        assert f"{MESSAGES} sent" in result.output
        auths = server.auths()
        assert auths, "the server never saw AUTH"
        assert all(a.tls for a in auths), auths
        assert {(a.login, a.password) for a in auths} == {(USER, PASSWORD)}
        commands = server.commands()
        assert all(c.tls for c in commands if c.command in ("AUTH", "MAIL")), commands
        assert len(server.messages()) == MESSAGES


def test_starttls_is_used_when_offered_even_without_credentials(
    ca: trustme.CA, trusted: dict[str, str], launched: str
) -> None:
    with AuthSMTPServer(tls=tls_pair(ca, "127.0.0.1").server) as server:
        result = run_worker(launched, url(server, credentials=False), trusted)
        assert result.exit_code == 0, result.output
        mails = [c for c in server.commands() if c.command == "MAIL"]
        assert len(mails) == MESSAGES
        assert all(c.tls for c in mails)


def test_credentials_without_starttls_are_refused_before_anything_is_sent(
    launched: str,
) -> None:
    with AuthSMTPServer(tls=None) as server:
        # More runs than a job's max_claims (10): a refused run must not use up its claims,
        # or the jobs would end as dead letters without ever being tried.
        for _ in range(11):
            result = run_worker(launched, url(server))
            assert result.exit_code == 2, result.output
        assert "refusing to send the SMTP password" in result.output
        assert "insecure_auth=true" in result.output  # the hint names the way out
        assert "Traceback" not in result.output
        assert PASSWORD not in result.output
        assert encoded(PASSWORD) not in result.output
        assert server.auths() == []
        assert server.messages() == []
        assert [c.command for c in server.commands()] == []  # no AUTH, no MAIL
    rows = job_rows(launched)
    assert len(rows) == MESSAGES
    # Not an attempt, nothing in doubt: every job is as it was, ready for a fixed worker.
    assert {(r.state, r.send_attempts, r.outcome_text) for r in rows} == {("pending", 0, None)}
    with AuthSMTPServer(tls=None) as server:  # the operator fixes the setting: all are sent
        fixed = run_worker(launched, url(server, "?insecure_auth=true"))
        assert fixed.exit_code == 0, fixed.output
        assert len(server.messages()) == MESSAGES


def test_insecure_auth_true_allows_auth_in_clear(launched: str) -> None:
    with AuthSMTPServer(tls=None) as server:
        result = run_worker(launched, url(server, "?insecure_auth=true"))
        assert result.exit_code == 0, result.output
        assert server.auths()
        assert not any(a.tls for a in server.auths())
        assert len(server.messages()) == MESSAGES


def test_starttls_true_refuses_a_server_without_it(launched: str) -> None:
    with AuthSMTPServer(tls=None) as server:
        result = run_worker(launched, url(server, "?starttls=true", credentials=False))
        assert result.exit_code == 2, result.output
        assert "does not offer STARTTLS" in result.output
        assert server.commands() == []
        assert server.messages() == []
    assert {r.state for r in job_rows(launched)} == {"pending"}


def test_an_unverifiable_certificate_stops_the_worker_unless_verify_false(
    ca: trustme.CA, launched: str
) -> None:
    # The CLI's environment does not trust the test CA here.
    with AuthSMTPServer(tls=tls_pair(ca, "127.0.0.1").server) as server:
        result = run_worker(launched, url(server))
        assert result.exit_code == 2, result.output
        assert "does not verify" in result.output
        assert "verify=false" in result.output
        assert server.auths() == []
        assert server.messages() == []
        result = run_worker(launched, url(server, "?verify=false"))
        assert result.exit_code == 0, result.output
        assert all(a.tls for a in server.auths())
        assert len(server.messages()) == MESSAGES


def test_a_server_echoing_the_password_in_its_refusal_is_scrubbed(
    ca: trustme.CA, trusted: dict[str, str], launched: str
) -> None:
    def refuse(login: str, password: str) -> str:
        return f"535 5.7.8 bad credentials {login}:{password}"

    with AuthSMTPServer(tls=tls_pair(ca, "127.0.0.1").server, check=refuse) as server:
        result = run_worker(launched, url(server), trusted)
        assert server.auths()
    assert PASSWORD not in result.output
    # A refused login is the relay's problem (issue 10): one line, exit 1, and the jobs keep
    # their attempts; the server's words, scrubbed, are in the line, the journal and
    # relay_status.
    assert result.exit_code == 1, result.output
    assert "authentication refused: 535" in result.output
    assert "bad credentials" in result.output
    rows = job_rows(launched)
    assert {(r.state, r.send_attempts) for r in rows} == {("pending", 0)}
    engine = create_engine(launched)
    try:
        with engine.connect() as conn:
            details = [d or "" for (d,) in conn.execute(sa.text("select detail from send_event"))]
            errors = [
                e or "" for (e,) in conn.execute(sa.text("select last_error from relay_status"))
            ]
    finally:
        engine.dispose()
    assert any("bad credentials" in e for e in errors), errors
    assert not any(PASSWORD in text for text in details + errors)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", (False, False, True)),
        ("?starttls=true", (True, False, True)),
        ("?insecure_auth=yes&verify=false", (False, True, False)),
    ],
)
def test_url_options(query: str, expected: tuple[bool, bool, bool]) -> None:
    config = SmtpConfig.from_url(f"smtp://u:p@relay.test:587{query}")
    assert (config.starttls, config.insecure_auth, config.validate_certs) == expected
    assert config.pipelining


def test_pipelining_can_be_turned_off() -> None:
    assert not SmtpConfig.from_url("smtp://relay.test:25?pipelining=false").pipelining
    assert SmtpConfig.from_url("smtp://relay.test:25?pipelining=true").pipelining


@pytest.mark.parametrize(
    "query",
    ["?insecure_auth=maybe", "?starttls=2", "?timeout=soon", "?tls=true", "?pipelining=sometimes"],
)
def test_bad_url_options_are_errors(query: str) -> None:
    with pytest.raises(SmtpUrlError):
        SmtpConfig.from_url(f"smtp://u:p@relay.test:587{query}")


def test_starttls_with_smtps_is_an_error() -> None:
    with pytest.raises(SmtpUrlError, match="smtps"):
        SmtpConfig.from_url("smtps://relay.test?starttls=true")
