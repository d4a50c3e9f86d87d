"""Benchmark functions that live in modules other branches may not have merged yet.

``bench.smtp_e2e.measure_bare_smtp``, ``bench.pooler.measure_drain_via_pgbouncer`` and
``bench.outbox_size.measure_outbox_size`` are written by other helpers (issue 12's contracts). The
run looks them up by name, so this branch runs without them and reports "not measured: <reason>".
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lookup(module: str, attribute: str) -> Callable[..., Any] | str:
    """The function ``module.attribute``, or a sentence saying why it is not there."""
    try:
        found = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == module:
            return f"{module} is not in this build"
        return f"{module} cannot be imported: {exc}"
    except ImportError as exc:
        return f"{module} cannot be imported: {exc}"
    function = getattr(found, attribute, None)
    if not callable(function):
        return f"{module}.{attribute} is not defined"
    return function  # type: ignore[no-any-return]
