"""The run as JSON: every figure (median, range, samples, loads), ratio and target, with the
machine, the git commit and the time, so runs can be compared later and attached to an issue."""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import shutil
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.context import Context
from bench.databases import postgres_version

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PATH = "build/bench/latest.json"
SCHEMA_VERSION = 1


def _git(*args: str) -> str | None:
    git = shutil.which("git")
    if git is None:
        return None
    try:
        done = subprocess.run(
            [git, "-C", str(REPO), *args], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def machine_info(postgres: bool) -> dict[str, Any]:
    status = _git("status", "--porcelain", "--untracked-files=no")
    pg: str | None = None
    if postgres:
        try:
            pg = postgres_version()
        except Exception as exc:  # the version is information; its absence is said, not fatal
            pg = f"unknown ({type(exc).__name__})"
    return {
        "commit": _git("rev-parse", "--short=12", "HEAD"),
        "dirty": bool(status) if status is not None else None,
        "branch": _git("rev-parse", "--abbrev-ref", "HEAD"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_bytes": _memory_bytes(),
        "postgresql": pg,
    }


def document(
    ctx: Context, machine: dict[str, Any], started_at: datetime, elapsed: float
) -> dict[str, Any]:
    return {
        "schema": SCHEMA_VERSION,
        "timestamp": started_at.isoformat(timespec="seconds"),
        "elapsed_seconds": round(elapsed, 1),
        "machine": machine,
        "options": dataclasses.asdict(ctx.options),
        **ctx.report.as_dict(),
    }


def write_json(ctx: Context, machine: dict[str, Any], started_at: datetime, elapsed: float) -> Path:
    path = Path(ctx.options.json_path)
    if not path.is_absolute():
        path = REPO / path
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(document(ctx, machine, started_at, elapsed), indent=2, ensure_ascii=False)
    path.write_text(text + "\n")
    return path
