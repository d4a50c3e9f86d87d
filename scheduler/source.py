"""A scheduled campaign is re-read from its file for every occurrence and drip step.

Its audience (the list of the day) and templates are read where it was launched from
(``campaign.source_path``). Only the definition that was launched may be sent: if the file is
gone, no longer valid, or its hash differs from the stored ``spec_hash`` (someone edited it
without launching the change), the scheduler fires nothing for the campaign and says why in
``campaign.scheduler_note`` (``herald status`` shows it) until the file is restored or the
change launched (``herald launch --force-new-version``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from campaigns.errors import CampaignError
from campaigns.spec import LoadedCampaign, load_campaign
from campaigns.store import CampaignRow

RELAUNCH_HINT = "launch it again to use it (herald launch FILE --force-new-version)"


@dataclass(frozen=True)
class Reloaded:
    loaded: LoadedCampaign | None
    note: str | None  # why it cannot be used (None when ``loaded`` is set)


def reload(row: CampaignRow) -> Reloaded:
    """The campaign as launched, read again from its file; or why it cannot be."""
    if not row.source_path:
        return Reloaded(None, "no campaign file is recorded for it: launch it again")
    path = Path(row.source_path)
    if not path.is_file():
        return Reloaded(None, f"campaign file {path} is missing: restore it, or {RELAUNCH_HINT}")
    try:
        loaded = load_campaign(path)
    except CampaignError as exc:
        first = str(exc).splitlines()[0]
        return Reloaded(None, f"campaign file {path} cannot be read: {first}")
    except OSError as exc:
        return Reloaded(None, f"campaign file {path} cannot be read: {exc.strerror or exc}")
    if loaded.spec.name != row.name or loaded.spec_hash != row.spec_hash:
        return Reloaded(
            None,
            f"campaign file {path} changed since it was launched; nothing is sent from the "
            f"changed file until it is launched: {RELAUNCH_HINT}",
        )
    return Reloaded(loaded, None)
