"""How many examples a property test asks hypothesis for.

``make test`` runs the whole suite on every change and must stay inside its time budget, so it
sets ``HERALD_HYPOTHESIS=quick``: each property test runs a quarter of its examples (at least 10,
never more than it asked for), and a test that names no count runs 25 instead of hypothesis'
100. Every test still runs, with every strategy; only the number of draws is smaller.
``make test-thorough`` (and a plain ``pytest``) runs the full counts.
"""

from __future__ import annotations

import os

QUICK = os.environ.get("HERALD_HYPOTHESIS", "thorough") == "quick"
QUICK_DEFAULT_EXAMPLES = 25


def examples(count: int) -> int:
    """``count`` under the thorough profile; a quarter of it (at least 10) under quick."""
    if not QUICK:
        return count
    return min(count, max(10, count // 4))
