"""The inbound SMTP listener over real SMTP (aiosmtplib → aiosmtpd), on SQLite and PostgreSQL.

A DSN for a hard bounce suppresses the job's mailbox globally; an ARF complaint too; a soft
bounce is only counted; an Apple Mail style mailto unsubscribe (empty subject) suppresses in the
job's list scope. Whom to suppress comes from the token in the recipient address, never from
the report: every report below names someone else in its To: and Final-Recipient.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator

import aiosmtplib
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.models import mail_feedback, send_job, suppression
from dispatch.signed_tokens import SigningKeys, address_token
from herald.errors import ConfigError
from herald.mail_settings import MailSettings
from herald.serve.inbound import InboundListener, resolve_recipient
from tests.support import reports
from tests.support.factories import pending

KEYS = SigningKeys.parse("k2:second-secret-0123456789,k1:first-secret-0123456789")
SETTINGS = MailSettings(
    signing_keys=KEYS,
    bounce_domain="bounce.herald.test",
    unsubscribe_domain="unsub.herald.test",
)


@pytest.fixture
def listener(engine: Engine) -> Iterator[InboundListener]:
    with InboundListener(engine, SETTINGS) as running:
        yield running


def bounce_rcpt(key: str, keys: SigningKeys = KEYS) -> str:
    return f"bounce+{address_token(keys, 'bounce', key)}@bounce.herald.test"


def unsub_rcpt(key: str) -> str:
    return f"unsub+{address_token(KEYS, 'unsub', key)}@unsub.herald.test"


def send(listener: InboundListener, rcpt: str, message: bytes, *, sender: str = "") -> None:
    """One SMTP transaction; ``sender=""`` is MAIL FROM:<>, as DSNs come."""

    async def go() -> None:
        async with aiosmtplib.SMTP(hostname=listener.host, port=listener.port, timeout=10) as smtp:
            await smtp.sendmail(sender, [rcpt], message)

    asyncio.run(go())


def suppressions(engine: Engine) -> set[tuple[str, str, str]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(suppression.c.address, suppression.c.scope, suppression.c.source)
        )
        return {tuple(r) for r in rows}


def feedback(engine: Engine) -> list[tuple[str, str, str | None, str | None]]:
    with engine.connect() as conn:
        q = sa.select(
            mail_feedback.c.kind,
            mail_feedback.c.source,
            mail_feedback.c.mailbox,
            mail_feedback.c.status_code,
        ).order_by(mail_feedback.c.id)
        return [tuple(r) for r in conn.execute(q)]


def test_a_hard_bounce_dsn_suppresses_the_mailbox_globally(engine, listener) -> None:
    key = pending(engine, "alice")
    # Case smashed by an MTA on the way back: the token still reads.
    send(listener, bounce_rcpt(key).upper(), reports.dsn(recipient="mallory@example.org"))
    assert suppressions(engine) == {("alice@example.com", "global", "dsn")}
    assert feedback(engine) == [("hard", "dsn", "alice@example.com", "5.1.1")]
    # The MTA delivers the same DSN again (our 250 was lost): recorded once.
    send(listener, bounce_rcpt(key), reports.dsn(recipient="mallory@example.org"))
    assert len(feedback(engine)) == 1


def test_an_arf_complaint_suppresses_globally(engine, listener) -> None:
    key = pending(engine, "bob")
    send(listener, bounce_rcpt(key), reports.arf(rcpt="redacted@example.org"))
    assert suppressions(engine) == {("bob@example.com", "global", "arf")}
    assert feedback(engine) == [("complaint", "arf", "bob@example.com", None)]


def test_a_soft_bounce_is_only_counted(engine, listener) -> None:
    key = pending(engine, "carol")
    send(listener, bounce_rcpt(key), reports.dsn(status="4.2.2", diagnostic="smtp; 452 4.2.2 full"))
    send(
        listener,
        bounce_rcpt(key),
        reports.dsn(status="4.4.7", diagnostic="smtp; 421", message_id="<dsn-2@mx.example.org>"),
    )
    assert suppressions(engine) == set()
    assert [f[0] for f in feedback(engine)] == ["soft", "soft"]


def test_policy_blocks_and_delays_never_suppress(engine, listener) -> None:
    key = pending(engine, "dave")
    send(listener, bounce_rcpt(key), reports.dsn(status="5.7.1", diagnostic="smtp; 550 5.7.1 spam"))
    delayed = reports.dsn(action="delayed", status="4.4.1", message_id="<dsn-3@mx.example.org>")
    send(listener, bounce_rcpt(key), delayed)
    send(listener, bounce_rcpt(key), b"Subject: hi\r\n\r\ngarbage that is no report\r\n")
    assert suppressions(engine) == set()
    assert [f[0] for f in feedback(engine)] == ["block"]


def test_a_mailto_unsubscribe_suppresses_in_the_list_scope(engine, listener) -> None:
    key = pending(engine, "erin")
    other = pending(engine, "frank")
    with engine.begin() as conn:
        conn.execute(send_job.update().where(send_job.c.key == key).values(list_scope="list:news"))
    send(listener, unsub_rcpt(key), reports.apple_mail_unsubscribe(unsub_rcpt(key)), sender="x@y.z")
    # A transactional job (no list scope): the unsubscribe is global.
    send(listener, unsub_rcpt(other), reports.apple_mail_unsubscribe("whoever@example.org"))
    assert suppressions(engine) == {
        ("erin@example.com", "list:news", "mailto"),
        ("frank@example.com", "global", "mailto"),
    }
    assert [f[0] for f in feedback(engine)] == ["unsubscribe", "unsubscribe"]


def test_an_old_key_in_the_ring_still_verifies(engine, listener) -> None:
    key = pending(engine, "gina")
    old = SigningKeys.parse("k1:first-secret-0123456789")
    send(listener, bounce_rcpt(key, old), reports.dsn())
    assert suppressions(engine) == {("gina@example.com", "global", "dsn")}


@pytest.mark.parametrize(
    "rcpt",
    [
        "postmaster@bounce.herald.test",
        "alice@example.com",
        "bounce+@bounce.herald.test",
        "bounce+zzzz.k1.zzzz@bounce.herald.test",
        "{bounce}@other.example",  # a valid token on a domain that is not ours
        "{unsub_as_bounce}@bounce.herald.test",  # an unsubscribe token replayed as a bounce
        "{bounce_as_unsub}@unsub.herald.test",  # a bounce token replayed as an unsubscribe
        "{forged}@bounce.herald.test",
    ],
)
def test_other_recipients_are_refused_at_rcpt(engine, listener, rcpt: str) -> None:
    key = pending(engine, "hank")
    unsub_token = address_token(KEYS, "unsub", key)
    bounce_token = address_token(KEYS, "bounce", key)
    forged_keys = SigningKeys.parse("k2:not-our-secret-at-all-000")
    rcpt = rcpt.format(
        bounce=f"bounce+{bounce_token}",
        unsub_as_bounce=f"bounce+{unsub_token}",
        bounce_as_unsub=f"unsub+{bounce_token}",
        forged=f"bounce+{address_token(forged_keys, 'bounce', key)}",
    )
    with pytest.raises(aiosmtplib.SMTPRecipientsRefused) as refused:
        send(listener, rcpt, reports.dsn())
    assert refused.value.recipients[0].code == 550
    assert suppressions(engine) == set()
    assert feedback(engine) == []


def test_a_token_for_no_job_is_accepted_and_ignored(engine, listener) -> None:
    send(listener, bounce_rcpt("f" * 64), reports.dsn())
    assert feedback(engine) == []


def test_resolve_recipient_is_pure_and_strict() -> None:
    key = "0123456789abcdef" * 4
    token = address_token(KEYS, "bounce", key)
    target = resolve_recipient(f"<bounce+{token}@BOUNCE.herald.test>", SETTINGS)
    assert target is not None
    assert (target.purpose, target.prefix) == ("bounce", key[:16])
    no_keys = MailSettings(bounce_domain="bounce.herald.test")
    assert resolve_recipient(f"bounce+{token}@bounce.herald.test", no_keys) is None
    assert resolve_recipient("bounce+" + token, SETTINGS) is None


def test_the_listener_needs_keys_and_a_domain(engine) -> None:
    with pytest.raises(ConfigError, match="HERALD_SIGNING_KEYS"):
        InboundListener(engine, MailSettings(bounce_domain="b.example"))
    with pytest.raises(ConfigError, match="HERALD_BOUNCE_DOMAIN"):
        InboundListener(engine, MailSettings(signing_keys=KEYS))


def test_start_inbound_runs_in_the_callers_event_loop(engine) -> None:
    """The form ``herald serve`` uses beside uvicorn: one loop, the database in threads."""
    from herald.serve.inbound import running_inbound

    key = pending(engine, "ivan")

    async def scenario() -> None:
        async with running_inbound(engine, SETTINGS, host="127.0.0.1", port=0) as server:
            port = server.sockets[0].getsockname()[1]
            async with aiosmtplib.SMTP(hostname="127.0.0.1", port=port, timeout=10) as smtp:
                await smtp.sendmail("", [bounce_rcpt(key)], reports.dsn())

    asyncio.run(scenario())
    assert suppressions(engine) == {("ivan@example.com", "global", "dsn")}


def test_serve_inbound_runs_until_cancelled(engine) -> None:
    from herald.serve.inbound import serve_inbound

    key = pending(engine, "nina")

    async def scenario() -> None:
        ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(
            serve_inbound(
                engine,
                SETTINGS,
                host="127.0.0.1",
                port=0,
                on_ready=lambda host, port: ready.set_result(port),
            )
        )
        port = await asyncio.wait_for(ready, 10)
        async with aiosmtplib.SMTP(hostname="127.0.0.1", port=port, timeout=10) as smtp:
            await smtp.sendmail("", [bounce_rcpt(key)], reports.arf())
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(aiosmtplib.SMTPConnectError):  # the port is closed again
            await aiosmtplib.SMTP(hostname="127.0.0.1", port=port, timeout=2).connect()

    asyncio.run(scenario())
    assert suppressions(engine) == {("nina@example.com", "global", "arf")}


def test_herald_feedback_shows_counts_and_soft_bounces(engine, db_url, listener) -> None:
    import json

    from tests.support.factories import cli

    key = pending(engine, "judy")
    soft = reports.dsn(status="4.2.2", diagnostic="smtp; 452 4.2.2 [full]\x1b[2J")
    send(listener, bounce_rcpt(key), soft)
    send(listener, bounce_rcpt(key), reports.dsn(message_id="<dsn-9@mx.example.org>"))
    result = cli(db_url, "feedback", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["counts"]["soft"] == 1
    assert doc["counts"]["hard"] == 1
    assert doc["soft_by_mailbox"] == [{"mailbox": "judy@example.com", "count": 1}]
    assert [e["kind"] for e in doc["recent"]] == ["hard", "soft"]
    text = cli(db_url, "feedback")
    assert text.exit_code == 0, text.output
    assert "1 hard, 1 soft" in text.stdout
    assert "\x1b" not in text.stdout
    assert cli(db_url, "feedback", "--kind", "bogus").exit_code == 2


def test_one_transaction_for_an_unsubscribe_and_a_bounce(engine, listener) -> None:
    """Each recipient is handled by its own token's purpose, whatever the other one was."""
    bounced, leaving = pending(engine, "kate"), pending(engine, "liam")

    async def go() -> None:
        async with aiosmtplib.SMTP(hostname=listener.host, port=listener.port, timeout=10) as smtp:
            await smtp.sendmail("", [bounce_rcpt(bounced), unsub_rcpt(leaving)], reports.dsn())

    asyncio.run(go())
    assert suppressions(engine) == {
        ("kate@example.com", "global", "dsn"),
        ("liam@example.com", "global", "mailto"),
    }


def test_an_arf_auth_failure_is_a_block_from_arf(engine, listener) -> None:
    key = pending(engine, "mona")
    send(listener, bounce_rcpt(key), reports.arf(feedback_type="auth-failure"))
    assert suppressions(engine) == set()
    assert feedback(engine) == [("block", "arf", "mona@example.com", None)]


def test_a_bounced_mailbox_is_never_mailed_again(engine, listener, smtp_server) -> None:
    """End to end: the DSN's suppression is what the worker's T4 guard checks."""
    from datetime import UTC, datetime, timedelta

    from dispatch.store import OutboxStore
    from tests.support.campaign_files import run_worker
    from tests.support.factories import key_of, new_job

    first = pending(engine, "olga")
    send(listener, bounce_rcpt(first), reports.dsn())
    later = new_job(key_of("olga-later"), due=datetime.now(UTC) - timedelta(seconds=1))
    later = dataclasses.replace(later, recipient="OLGA@example.com", mailbox="olga@example.com")
    with engine.begin() as conn:
        OutboxStore(engine.dialect.name).enqueue(conn, [later])
    run_worker(engine, smtp_server.host, smtp_server.port)
    assert smtp_server.messages() == []
    with engine.connect() as conn:
        state = conn.execute(sa.select(send_job.c.state).where(send_job.c.key == later.key))
        assert state.scalar_one() in ("failed", "cancelled")  # T4f today; T4c once item 1 lands
