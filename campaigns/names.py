"""What a campaign's name may be: lower-case letters, digits, ``_``, ``.`` and ``-``, at most 128
characters, starting with a letter or digit. Apart from the spec's models (campaigns.spec) so that
what checks a name alone (a suppression scope) does not import pydantic and the template engine."""

from __future__ import annotations

import re

CAMPAIGN_NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9_.-]{0,127}")
