"""The files a campaign names (templates, audience CSV): confined, hashed, named in errors.

Every one is opened through ``templates.files`` (the shared resolver: inside the campaign's
folder once symlinks are resolved, a regular file, re-checked after opening), so a campaign
cannot make Herald read ``/proc/self/environ``, ``/etc/passwd`` or a FIFO. Errors name the file
as the campaign wrote it, at the line and key where it wrote it, and never quote its content.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from campaigns.errors import AudienceError, CampaignError, SpecError
from campaigns.yaml_loader import YamlLines, YamlPath, format_path
from templates.files import OUTSIDE_HINT, FileRefused, open_inside

_HASH_FORMAT = "herald-campaign-hash v1"


def shown_path(campaign_file: str, written: str) -> str:
    """A file the campaign names, as an operator finds it from where they ran the command: the
    campaign file's folder as they typed it, joined with the path as the campaign wrote it."""
    return str(Path(campaign_file).parent / written)


def file_digest(base_dir: Path, written: str) -> str:
    """sha256 of a confined file, read in chunks: audience files can be large.

    Raises FileRefused.
    """
    try:
        with open_inside(base_dir, written) as stream:
            return hashlib.file_digest(stream, "sha256").hexdigest()
    except OSError as error:
        raise FileRefused(written, (error.strerror or type(error).__name__).lower()) from None


def _hint(error: FileRefused) -> str | None:
    return OUTSIDE_HINT if error.outside else None


def template_digests(
    templates: list[tuple[int, str]], base_dir: Path, lines: YamlLines, file: str
) -> list[tuple[str, str]]:
    """(path as written, digest) of each (step index, template path); all problems at once."""
    digests: list[tuple[str, str]] = []
    problems: list[CampaignError] = []
    for index, written in templates:
        try:
            digests.append((written, file_digest(base_dir, written)))
        except FileRefused as error:
            where: YamlPath = ("steps", index, "template")
            problems.append(
                SpecError(
                    f"cannot read template file {shown_path(file, written)!r}: {error.reason}",
                    file=file,
                    line=lines.nearest_line(where),
                    field=format_path(where),
                    hint=_hint(error),
                )
            )
    if problems:
        raise SpecError.from_problems(problems, file=file)
    return digests


def audience_digest(written: str, base_dir: Path, lines: YamlLines, file: str) -> tuple[str, str]:
    try:
        return written, file_digest(base_dir, written)
    except FileRefused as error:
        raise AudienceError(
            f"cannot read audience CSV file {shown_path(file, written)!r}: {error.reason}",
            file=file,
            line=lines.nearest_line(("audience",)),
            field="audience",
            hint=_hint(error),
        ) from None


def campaign_hash(
    source: bytes, templates: list[tuple[str, str]], audience: list[tuple[str, str]]
) -> str:
    """sha256 over a manifest of the YAML bytes and every file it references.

    Each file is hashed on its own (streaming), and the manifest lists those digests with the
    paths as written in the YAML, one per line, JSON-quoted so no path can forge a line. So an
    edit of a template or of the CSV changes the hash, while moving the whole folder does not.
    load_campaign passes the CSV only for a campaign sent once (at launch or start_at): a
    schedule or enrollment re-reads its audience for each occurrence, so the list is data.
    """
    manifest = [_HASH_FORMAT, f"campaign {hashlib.sha256(source).hexdigest()}"]
    manifest += [f"template {json.dumps(ref)} {digest}" for ref, digest in templates]
    manifest += [f"audience {json.dumps(ref)} {digest}" for ref, digest in audience]
    return hashlib.sha256("\n".join(manifest).encode("utf-8")).hexdigest()
