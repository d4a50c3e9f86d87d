"""``herald dkim keygen`` → DNS → ``herald worker`` → the receiver verifies, as real processes.

The keys come from the command an operator would run, the TXT records from its output (the
strings joined, as a resolver joins them), and the signatures are checked by dkimpy for every
message the real SMTP server stored. A broken key stops the worker with one line.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

from sqlalchemy.engine import Engine

from dispatch.signed_tokens import SigningKeys, read_address_token
from tests.support.campaign_files import write_campaign
from tests.support.dkim_dns import resolver, signature_count, signed_headers, verifies
from tests.support.factories import launch, write_yaml
from tests.support.mail_reading import parse
from tests.support.paths import HERALD
from tests.support.smtp_server import LedgerSMTPServer

SIGNING_KEYS = "k1:a-secret-of-at-least-sixteen"
CAMPAIGN = """\
name: keyed
from: news@mail.herald.test
audience: [a@example.com, b@example.com, c@example.org, "d@exämple.com"]
steps:
  - id: one
    subject: Hello {{ email }}
    text: Hi.
  - id: two
    subject: Again
    text: "Ünïcode and a long line: {{ 'y' * 500 }}"
"""


def keygen(tmp_path: Path, selector: str, algorithm: str) -> tuple[Path, dict[str, str]]:
    out = tmp_path / f"{selector}.key"
    done = subprocess.run(
        [str(HERALD), "dkim", "keygen", "--selector", selector, "--domain", "mail.herald.test",
         "--algorithm", algorithm, "--out", str(out), "--json"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    record = json.loads(done.stdout)
    assert all(len(s.encode()) <= 255 for s in record["strings"])
    return out, {record["name"]: "".join(record["strings"])}


def worker_command(db_url: str, server: LedgerSMTPServer) -> list[str]:
    return [
        str(HERALD), "worker", "--until-idle", "--json", "--poll", "0.05",
        "--database-url", db_url, "--smtp-url", f"smtp://{server.host}:{server.port}",
    ]  # fmt: skip


def worker(
    db_url: str, server: LedgerSMTPServer, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    command = worker_command(db_url, server)
    environment = {**os.environ, **env}
    return subprocess.run(
        command, capture_output=True, text=True, timeout=120, check=False, env=environment
    )


def test_keys_from_keygen_sign_everything_two_worker_processes_send(
    tmp_path: Path, engine: Engine, db_url: str, smtp_server: LedgerSMTPServer
) -> None:
    rsa_file, rsa_dns = keygen(tmp_path, "r1", "rsa")
    ed_file, ed_dns = keygen(tmp_path, "e1", "ed25519")
    assert launch(engine, write_yaml(tmp_path / "c", CAMPAIGN)).new_jobs == 8
    assert launch(engine, write_campaign(tmp_path / "more", recipients=20)[0]).new_jobs == 60
    env = {
        "HERALD_DKIM_DOMAIN": "mail.herald.test",
        "HERALD_DKIM_SELECTOR": "r1",
        "HERALD_DKIM_KEY_FILE": str(rsa_file),
        "HERALD_DKIM_ED25519_SELECTOR": "e1",
        "HERALD_DKIM_ED25519_KEY_FILE": str(ed_file),
        "HERALD_SIGNING_KEYS": SIGNING_KEYS,
        "HERALD_BOUNCE_DOMAIN": "b.herald.test",
    }

    workers = [
        subprocess.Popen(
            worker_command(db_url, smtp_server),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},
        )
        for _ in range(2)
    ]
    sent = 0
    for process in workers:
        stdout, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, stderr
        sent += json.loads(stdout)["sent"]

    assert sent == 68
    dns = resolver({**rsa_dns, **ed_dns})
    received = smtp_server.received()
    assert len(received) == 68
    keys = SigningKeys.parse(SIGNING_KEYS)
    for mail_from, raw in received:
        assert signature_count(raw) == 2
        assert verifies(raw, dns, 0)
        assert verifies(raw, dns, 1)
        assert "list-unsubscribe-post" in signed_headers(raw)
        key = parse(raw)["X-Herald-Key"]
        local, _, domain = mail_from.partition("@")
        assert domain == "b.herald.test"
        assert read_address_token(keys, "bounce", local.removeprefix("bounce+")) == key[:16]


def test_a_broken_key_stops_the_worker_with_one_line_and_no_key_material(
    tmp_path: Path, engine: Engine, db_url: str, smtp_server: LedgerSMTPServer
) -> None:
    assert launch(engine, write_yaml(tmp_path / "c", CAMPAIGN)).new_jobs == 8
    broken = tmp_path / "broken.pem"
    secret_line = "MIIEowIBAAKCAQEAsecretsecretsecretsecretTHISMUSTNOTBEPRINTED"
    broken.write_text(
        f"-----BEGIN RSA PRIVATE KEY-----\n{secret_line}\n-----END RSA PRIVATE KEY-----\n"
    )
    env = {
        "HERALD_DKIM_DOMAIN": "mail.herald.test",
        "HERALD_DKIM_SELECTOR": "r1",
        "HERALD_DKIM_KEY_FILE": str(broken),
    }

    done = worker(db_url, smtp_server, env)

    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert secret_line not in done.stderr + done.stdout
    first, *rest = done.stderr.strip().splitlines()
    assert first.startswith("error: HERALD_DKIM_KEY_FILE: the DKIM key in")
    assert "readable PEM private key" in first
    assert all(line.startswith("  hint:") for line in rest)
    assert smtp_server.received() == []  # nothing was claimed or sent

    # Unreadable (a directory: unreadable as a file even for root).
    done = worker(db_url, smtp_server, {**env, "HERALD_DKIM_KEY_FILE": str(tmp_path)})
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "HERALD_DKIM_KEY_FILE: cannot read the DKIM key file" in done.stderr
    assert "Is a directory" in done.stderr
