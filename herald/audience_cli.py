"""Compatibility alias: ``herald audience check`` lives in ``herald.cli.audience`` (its report
in ``herald.app.audience``) and is registered whenever ``herald.cli`` is imported."""

from herald.app.audience import AudienceReport as AudienceReport
from herald.cli.audience import check as check
