"""The one set of test factories: write a campaign, launch it, make an outbox job, run the CLI.

Tests build their data through these, so a change to how Herald launches, what a job row holds
or how the CLI is wired is made here once. ``launch`` is what `herald launch` does after
validation (register the campaign, then fan out its occurrence): when the shell grows an
application layer, this is the one place to call it. The 3-step campaign with a CSV audience and
``run_worker`` live beside it in ``tests.support.campaign_files``.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine
from typer.testing import CliRunner, Result

from campaigns.control import register
from campaigns.spec import LoadedCampaign, load_campaign
from dispatch.states import State
from dispatch.store import ClaimedJob, Completion, NewJob, OutboxStore
from herald.cli import app  # importing the package registers every command
from scheduler.fanout import FanoutResult, materialise
from tests.support.paths import HERALD

# ---------------------------------------------------------------------- campaigns


def write_yaml(folder: Path, text: str, *, name: str = "campaign.yaml") -> Path:
    """Write a campaign file (creating ``folder``) and return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def launch(
    engine: Engine, campaign: Path | LoadedCampaign, *, now: datetime | None = None
) -> FanoutResult:
    """Register the campaign and fan out its occurrence, as `herald launch` does once valid."""
    loaded = campaign if isinstance(campaign, LoadedCampaign) else load_campaign(campaign)
    registration = register(engine, loaded, now=now or datetime.now(UTC))
    return materialise(engine, loaded, registration.campaign.launched_at)


# ---------------------------------------------------------------------- outbox jobs


def key_of(name: str) -> str:
    """A realistic 64-hex key, so 16-character prefixes (as `list` shows them) are unambiguous."""
    return hashlib.sha256(name.encode()).hexdigest()


def new_job(
    key: str,
    *,
    due: datetime,
    campaign: str = "alpha",
    recipient: str | None = None,
    max_send_attempts: int = 5,
    max_claims: int = 10,
) -> NewJob:
    """An email job with exactly this key, due at ``due``: built by hand, not composed."""
    return NewJob(
        key=key,
        key_tuple="[]",
        campaign=campaign,
        step="hello",
        occurrence_at=due,
        channel="email",
        sender="news@herald.test",
        recipient=recipient or f"{key[:16]}@example.com",
        message_id=f"<{key[:32]}@herald.test>",
        payload=b"Subject: x\r\n\r\nbody\r\n",
        not_before=due,
        max_send_attempts=max_send_attempts,
        max_claims=max_claims,
    )


# Jobs put into each state directly with the store, named by ``name`` (the key is key_of(name)
# unless given): a pending job is due in an hour, so no later claim() picks it up.


def pending(
    engine: Engine,
    name: str,
    campaign: str = "alpha",
    *,
    due_in: float = 3600,
    key: str | None = None,
    **kw: Any,
) -> str:
    key = key or key_of(name)
    due = datetime.now(UTC) + timedelta(seconds=due_in)
    job = new_job(key, due=due, campaign=campaign, recipient=f"{name}@example.com", **kw)
    with engine.begin() as conn:
        assert OutboxStore(engine.dialect.name).enqueue(conn, [job]) == 1
    return key


def claimed(
    engine: Engine,
    name: str,
    campaign: str = "alpha",
    *,
    lease: float = 600,
    key: str | None = None,
    **kw: Any,
) -> ClaimedJob:
    key = key or key_of(name)
    store = OutboxStore(engine.dialect.name)
    due = datetime.now(UTC) - timedelta(seconds=1)
    job = new_job(key, due=due, campaign=campaign, recipient=f"{name}@example.com", **kw)
    with engine.begin() as conn:
        assert store.enqueue(conn, [job]) == 1
        (claim,) = store.claim(conn, owner=f"worker-{name}", limit=1, lease_seconds=lease)
    assert claim.key == key, "another due job was claimed: test set-up is wrong"
    return claim


def sending(engine: Engine, name: str, campaign: str = "alpha", **kw: Any) -> ClaimedJob:
    job = claimed(engine, name, campaign, **kw)
    store = OutboxStore(engine.dialect.name)
    with engine.begin() as conn:
        assert store.start_sends(conn, [job.lease], margin_seconds=1, actor="w").keys() == {job.id}
    return job


def complete(engine: Engine, completion: Completion) -> None:
    store = OutboxStore(engine.dialect.name)
    with engine.begin() as conn:
        assert store.complete(conn, [completion], actor="w") == {completion.lease[0]}


def in_doubt(
    engine: Engine, name: str, campaign: str = "alpha", reason: str = "timeout in DATA", **kw: Any
) -> ClaimedJob:
    """T8: the connection died inside DATA."""
    job = sending(engine, name, campaign, **kw)
    complete(engine, Completion(job.lease, State.IN_DOUBT, text="timeout", in_doubt_reason=reason))
    return job


def sent(engine: Engine, name: str, campaign: str = "alpha") -> ClaimedJob:
    job = sending(engine, name, campaign)
    complete(engine, Completion(job.lease, State.SENT, code=250, text="2.0.0 queued"))
    return job


def dead_550(engine: Engine, name: str, campaign: str = "alpha", **kw: Any) -> ClaimedJob:
    """T7: a definitive 5xx after DATA."""
    job = sending(engine, name, campaign, **kw)
    complete(engine, Completion(job.lease, State.FAILED, code=550, text="5.1.1 no such user"))
    return job


# ---------------------------------------------------------------------- the CLI


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    """`herald ARGS` in this process. Whatever the exit code, it never ends in a traceback."""
    result = CliRunner().invoke(app, list(args), env=env)
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


def cli(db_url: str, *args: str, env: dict[str, str] | None = None) -> Result:
    """`herald ARGS --database-url DB_URL` in this process."""
    return invoke(*args, "--database-url", db_url, env=env)


def launch_json(db_url: str, path: Path, *extra: str) -> dict[str, Any]:
    """`herald launch PATH --json`, which must succeed; its JSON report."""
    result = cli(db_url, "launch", str(path), "--json", *extra)
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def run_herald(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """`herald ARGS` as a real process (no traceback on stderr)."""
    result = subprocess.run(
        [str(HERALD), *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result
