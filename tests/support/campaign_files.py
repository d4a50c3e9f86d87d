"""Write campaign YAML/CSV/template files for tests, and run a worker to completion."""

from __future__ import annotations

import asyncio
import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine

from dispatch.smtp import SmtpConfig, SmtpTransport
from dispatch.worker import Worker, WorkerConfig, WorkerReport


def write_audience(path: Path, count: int, *, domain: str = "example.com") -> list[str]:
    """A CSV of ``count`` recipients; returns their addresses in order."""
    addresses = [f"user{i:05d}@{domain}" for i in range(count)]
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["email", "name", "city"])
        for i, address in enumerate(addresses):
            writer.writerow([address, f"User {i}", f"City{i % 7}"])
    return addresses


THREE_STEPS = """\
name: {name}
from: "Herald Tests <news@herald.test>"
audience: people.csv
max_attempts: {max_attempts}
steps:
  - id: welcome
    subject: "Welcome {{{{ name }}}}"
    text: "Hello {{{{ name }}}} from {{{{ city }}}}."
    html: "<p>Hello <b>{{{{ name }}}}</b> from {{{{ city }}}}.</p>"
  - id: tips
    after: 0
    subject: "Tips for {{{{ city }}}}"
    text: "Tip for {{{{ email }}}}"
  - id: later
    after: {later}
    subject: "Later, {{{{ name }}}}"
    html: "<p>See you, {{{{ name }}}}</p>"
"""


def write_campaign(
    folder: Path,
    *,
    recipients: int = 10,
    name: str = "onboarding",
    max_attempts: int = 5,
    later: str = "0",
) -> tuple[Path, list[str]]:
    folder.mkdir(parents=True, exist_ok=True)
    addresses = write_audience(folder / "people.csv", recipients)
    path = folder / "campaign.yaml"
    path.write_text(THREE_STEPS.format(name=name, max_attempts=max_attempts, later=later))
    return path, addresses


def fast_config(**overrides: Any) -> WorkerConfig:
    defaults: dict[str, Any] = {
        "concurrency": 20,
        "lease_seconds": 30.0,
        "t4_margin_seconds": 2.0,
        "poll_interval": 0.05,
        "recovery_interval": 0.5,
        "recovery_grace_seconds": 0.0,
        "retry_base_seconds": 0.01,
        "until_idle": True,
    }
    defaults.update(overrides)
    return WorkerConfig(**defaults)


def run_worker(
    engine: Engine, host: str, port: int, *, config: WorkerConfig | None = None, **kw: Any
) -> WorkerReport:
    transport = SmtpTransport(SmtpConfig(host=host, port=port, command_timeout=10, data_timeout=10))
    worker = Worker(engine, {"email": transport}, config or fast_config(), **kw)
    return asyncio.run(worker.run())


def keys_of(rows: Sequence[Any]) -> list[str]:
    return [r.key for r in rows]
