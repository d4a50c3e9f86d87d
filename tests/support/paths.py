"""Where things are, for tests that read the repository or start the installed console script."""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "examples"
# The installed console script, for tests that need a real process (signals, resource limits,
# two launches at once).
HERALD = Path(sys.executable).parent / "herald"
