"""``herald preview`` and ``herald test-send``: see a campaign's messages before launching it.

``preview`` prints the exact message (herald.app.preview); it opens no database. ``test-send``
sends each email step once to an address of the operator's (herald.app.test_send).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from herald.cli.base import JsonFlag, NowOption, SmtpUrl, app, clock_option, errors_mapped, fail
from herald.defaults import DEFAULT_SMTP_URL
from herald.errors import HeraldError
from herald.output import err, out, styled, visible

if TYPE_CHECKING:
    from herald.app.preview import Preview, PreviewMessage

CampaignFile = Annotated[Path, typer.Argument(help="The campaign YAML file.")]
StepOption = Annotated[str | None, typer.Option("--step", help="Only this step (its id).")]


@app.command()
def preview(
    file: CampaignFile,
    recipient: Annotated[
        str | None,
        typer.Option(
            "--recipient",
            help="The audience member to preview (any spelling of the address); default: the"
            " first.",
        ),
    ] = None,
    step: StepOption = None,
    html: Annotated[
        Path | None,
        typer.Option("--html", help="Also write the HTML part, as a browser shows it, here."),
    ] = None,
    as_json: JsonFlag = False,
    now: NowOption = None,
) -> None:
    """Print exactly what launch would send to one recipient, headers included. Writes
    nothing (no database is opened) but the --html file."""
    from herald.app.preview import PreviewFailed
    from herald.app.preview import preview as compose_preview
    from herald.app.unsubscribe import links_from_env
    from herald.cli.launch import print_check

    with errors_mapped():
        try:
            result = compose_preview(
                file,
                recipient=recipient,
                step=step,
                clock=clock_option(now),
                links=links_from_env(),
            )
        except PreviewFailed as exc:
            print_check(exc.report, as_json=False)
            raise
        if html is not None:
            _write_html(result, html)
        if as_json:
            out.print_json(json.dumps(result.to_json()))
        else:
            _print_preview(result)
        if not result.report.ok:
            err.print(
                styled("warning:", "yellow"),
                f"the campaign has {result.report.problem_count} problem(s) elsewhere: launch"
                " would refuse it (see herald validate)",
            )


def _print_preview(result: Preview) -> None:
    several = len(result.messages) > 1
    err.print(
        f"preview: {result.loaded.spec.name}, {result.recipient.where}"
        f" ({result.recipient.email}), occurrence {result.occurrence_at.isoformat()}"
    )
    for where in result.duplicate_rows:
        err.print(f"note: {where} is the same mailbox: sent once, to {result.recipient.where}")
    for message in result.messages:
        facts = f"step {message.step} ({message.channel}), due {message.due.isoformat()}"
        if message.date_at is not None:
            facts += ", Date as stamped when sent then"
        if several:
            _write_line(f"==> {facts} <==")
        else:
            err.print(facts)
        _write_message(message)
        if several:
            _write_line("")


def _write_message(message: PreviewMessage) -> None:
    """The message one line per wire line (CRLF shown as line ends). Control characters a
    body could hold are shown as escapes (herald.output.visible), tabs kept; ``--json``
    carries the exact bytes."""
    text = message.message.decode("utf-8")
    lines = text.split("\r\n") if message.channel == "email" else text.splitlines()
    if lines and lines[-1] == "":
        lines.pop()
    for line in lines:
        _write_line(line)


def _write_line(line: str) -> None:
    out.file.write("\t".join(visible(piece) for piece in line.split("\t")) + "\n")


def _write_html(result: Preview, path: Path) -> None:
    emails = [message for message in result.messages if message.channel == "email"]
    if len(emails) != 1:
        steps = ", ".join(message.step for message in emails) or "none"
        fail(
            f"--html writes one step's HTML part: name it with --step (email steps: {steps})",
            code=2,
        )
    content = emails[0].html()
    if content is None:
        fail(f"step {emails[0].step} has no HTML part: nothing to write to {path}", code=2)
    try:
        # Owner-only, as the database: a rendered message is personal data.
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(content)
    except OSError as exc:
        raise HeraldError(f"cannot write {path}: {exc.strerror or exc}") from None
    err.print(f"wrote the HTML part of step {emails[0].step} to {path}")


@app.command("test-send")
def send_test(
    file: CampaignFile,
    to: Annotated[str, typer.Option("--to", help="The address to send the test messages to.")],
    step: StepOption = None,
    recipient: Annotated[
        str | None,
        typer.Option(
            "--recipient",
            help="Render with this audience member's data (default: the first row's).",
        ),
    ] = None,
    smtp_url: SmtpUrl = DEFAULT_SMTP_URL,
    as_json: JsonFlag = False,
) -> None:
    """Send every email step once to --to through the relay, outside the campaign: nothing is
    stored, the keys and Message-IDs are new, the outbox is untouched."""
    from herald.app.test_send import SendTestFailed, send_tests
    from herald.app.unsubscribe import links_from_env

    with errors_mapped():
        try:
            result = send_tests(
                file,
                to,
                smtp_url=smtp_url,
                step=step,
                recipient=recipient,
                links=links_from_env(),
            )
        except SendTestFailed as exc:
            for sent in exc.sent:
                err.print(f"sent: step {sent.step} ({sent.message_id}): {sent.reply}")
            raise
        if as_json:
            document = {
                "campaign": result.campaign,
                "to": result.to,
                "data_from": result.data_from,
                "sent": [
                    {"step": s.step, "message_id": s.message_id, "reply": s.reply}
                    for s in result.sent
                ],
                "skipped_webhook_steps": result.skipped,
            }
            out.print_json(json.dumps(document))
            return
        for sent in result.sent:
            out.print(f"sent: step {sent.step} to {result.to} ({sent.message_id}): {sent.reply}")
        for skipped in result.skipped:
            err.print(f"skipped: step {skipped} is a webhook step (test-send sends email only)")
        err.print(f"content rendered with the data of {result.data_from}")
