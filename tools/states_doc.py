"""Generate ``docs/states.md`` from the state machine in ``dispatch/states.py``.

    .venv/bin/python -m tools.states_doc          # rewrite docs/states.md
    .venv/bin/python -m tools.states_doc --check  # exit 1 if docs/states.md is out of date

What it reads: ``dispatch.states.State`` (every state, in declaration order),
``dispatch.states.MACHINE`` (every ``Transition``: code, name, source states, one target, actor
kind), ``TERMINAL`` and ``LEASED``. Who performs a transition and why are prose, kept in
``NOTES`` below keyed by the transition's code; a transition without an entry (or an entry
without a transition) is refused, and so is a transition without a code or a name.

``tests/unit/test_docs.py`` fails when the committed file differs from what this module renders:
the documentation cannot drift from the code.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dispatch import states

OUTPUT = Path(__file__).resolve().parents[1] / "docs" / "states.md"
NEW = "(new)"  # the source of a transition that creates the row

# Who performs each transition and why, keyed by its code. ``dispatch.states.Transition`` carries
# the actor *kind*; the individual actor and the reason are prose, so they live here rather than
# in the module the store imports. Every code in ``MACHINE`` needs an entry, and an entry for a
# code ``MACHINE`` no longer has is an error too: the two cannot drift apart.
NOTES: dict[str, tuple[str, str]] = {
    "T1": (
        "scheduler fan-out (`herald launch`)",
        "An occurrence is materialised: `INSERT … ON CONFLICT DO NOTHING` into `send_key` "
        "(unique key, unique mailbox identity), and a job only for a key inserted, so "
        "re-firing a trigger or relaunching inserts nothing twice.",
    ),
    "T2": (
        "worker",
        "A due job of an active campaign is leased: new fencing token, owner, "
        "`lease_expires_at` on the database clock, `claims + 1`.",
    ),
    "T4": (
        "worker, after RCPT, beside the DATA command or once it was answered 354 with MAIL and "
        "RCPT (PIPELINING; the command delivers nothing)",
        "The only door to a send: committed durably before the first byte of the message. Guard: "
        "same token, enough lease left, attempts left, mailbox not suppressed (`global`, or "
        "the job's `list_scope`), not superseded, campaign active.",
    ),
    "T4c": (
        "worker, after T4 refused",
        "The T4 guard refused because the job was superseded by a new version, its mailbox is "
        "suppressed (globally or in the job's list; reason `suppressed`: an address suppressed "
        "after materialisation is never sent to) or its campaign was cancelled: the claim ends "
        "cancelled.",
    ),
    "T4f": (
        "worker, after T4 refused",
        "The T4 guard refused because the send attempts are used up: the claim ends failed.",
    ),
    "T4r": (
        "worker, after T4 refused",
        "The T4 guard refused for a passing reason (campaign paused, too little lease left): "
        "the job goes back to pending untouched.",
    ),
    "T5": (
        "worker",
        "The receiver accepted the message (SMTP 250, HTTP 2xx). Also from `in_doubt`: a late "
        "250 still proves delivery.",
    ),
    "T6": (
        "worker",
        "Nothing was delivered (connect, EHLO, MAIL or RCPT failed temporarily, or a DATA command "
        "sent with them was refused): back to pending with backoff.",
    ),
    "T6f": (
        "worker",
        "Nothing was delivered and retrying cannot help (e.g. RCPT 550, attempts used up): failed.",
    ),
    "T7": (
        "worker",
        "A definitive temporary refusal of DATA (4xx), or a connection lost at the DATA command,"
        " before any of the message: back to pending with backoff.",
    ),
    "T7f": (
        "worker",
        "A definitive refusal of DATA: 5xx, or 4xx once the attempts are used up: failed.",
    ),
    "T8": (
        "worker",
        "Timeout, disconnect or cancellation inside DATA: the outcome is unknown (RFC 1047). "
        "The connection is closed, never reused.",
    ),
    "W1": (
        "worker (graceful shutdown, unusable transport)",
        "The worker gives back claims it will not start (shutdown, or a transport that cannot "
        "be used as configured), without counting the claim.",
    ),
    "W2": (
        "worker, at claim and again when the send starts",
        "The job's send window (`send_job.send_window`) is closed on the worker's clock (a "
        "retry's backoff or a wait moved it outside): back to pending with `not_before` at the "
        "window's next opening, without counting the claim.",
    ),
    "W3": (
        "worker, in place of T4 (the slot is taken in T4's transaction), or right after the "
        "claim for claims it expects no slot for soon (dispatch.rate_gate)",
        "The job's campaign (`rate:`) or recipient domain (defaults, `HERALD_DOMAIN_RATES`) "
        "has no slot free now in the shared `rate_limit` cell: back to pending with "
        "`not_before` at its estimated slot, without counting the claim or an attempt, so the "
        "worker keeps sending to other domains.",
    ),
    "W4": (
        "worker, when `prepare` cannot reach the relay (`dispatch.relay_circuit`)",
        "A connection refused, DNS failure, connect timeout, TLS failure, refused greeting, "
        "EHLO or authentication, or a connection dropped before MAIL is the relay's problem, "
        "not the recipient's: the claim goes back "
        "without counting it or an attempt, due when the worker's circuit breaker next tries "
        "the relay; `relay_status` records the outage and `herald status` shows it.",
    ),
    "R1": (
        "recovery (any worker's loop, `herald recover`)",
        "A claim whose lease expired before T4: nothing can have been sent, so back to pending.",
    ),
    "R1p": (
        "recovery",
        "An expired claim of a job whose `claims` reached `max_claims` ('poison': it keeps "
        "killing its workers): failed.",
    ),
    "R2": (
        "recovery",
        "The lease expired after T4: the message may have gone out, so the job becomes "
        "`in_doubt` ('lease expired during send'), never resent automatically for email.",
    ),
    "R3": (
        "recovery",
        "A pending job with nothing left to spend (`send_attempts` or `claims` exhausted): a "
        "dead letter with its full journal; its outcome names the budget that ran out. "
        "Hand-backs (W1, W2, W4) count neither, so a relay outage cannot exhaust a job.",
    ),
    "R4": (
        "recovery",
        "Automatic resend by channel policy: an `in_doubt` webhook job with `in_doubt: resend` "
        "(the receiver dedupes on Idempotency-Key), attempts left, not superseded. Never email.",
    ),
    "T9s": (
        "operator (`herald in-doubt resolve --as sent`)",
        "The operator checked downstream that the message arrived; recorded with who and why.",
    ),
    "T9r": (
        "operator (`herald in-doubt resolve --resend`)",
        "The operator accepts a possible duplicate: re-armed with one more transmission.",
    ),
    "T9f": (
        "operator (`herald in-doubt resolve --as failed`)",
        "The operator checked that the message did not arrive, and does not want it resent.",
    ),
    "T10": (
        "operator (`herald cancel`)",
        "Everything not yet past T4 is cancelled; a job already sending goes out.",
    ),
    "D1": (
        "operator (`herald dead retry`)",
        "A dead letter is re-armed with fresh attempt and claim budgets, due now.",
    ),
    "T11": (
        "scheduler (`herald launch --force-new-version`)",
        "The new version removed this key: pending and claimed jobs are cancelled "
        "('superseded'); a claim is fenced because its T4 needs state `claimed`.",
    ),
    "T12": (
        "scheduler (`herald launch --force-new-version`)",
        "The new version changed this key's content: a claim is released so the job goes out "
        "with the new content.",
    ),
    "T13": (
        "scheduler (`herald launch --force-new-version`)",
        "A key an earlier version removed is back: the cancelled job is re-armed with the new "
        "content.",
    ),
    "T14": (
        "scheduler (a pass that re-reads an enrollment campaign's audience)",
        "A drip recipient left the audience: the step's job not yet past T4 is cancelled with "
        "the reason as its outcome; a claim is fenced because its T4 needs state `claimed`. A "
        "job already sending goes out.",
    ),
}


@dataclass(frozen=True)
class Documented:
    """One transition as documented: states by value, ``()`` as sources meaning "no row yet"."""

    code: str
    name: str
    sources: tuple[str, ...]
    target: str
    actor: str
    who: str
    why: str

    @property
    def label(self) -> str:
        return f"{self.code} {self.name}"


def _ordered(values: Iterable[states.State]) -> tuple[str, ...]:
    """State values in the enum's declaration order (sets have none of their own)."""
    order = {state: index for index, state in enumerate(states.State)}
    return tuple(s.value for s in sorted(set(values), key=order.__getitem__))


def documented(
    machine: Sequence[states.Transition] | None = None,
    notes: dict[str, tuple[str, str]] | None = None,
) -> list[Documented]:
    """The transitions of ``machine`` (default ``dispatch.states.MACHINE``), in its order, each
    with its "who" and "why" from ``notes`` (default ``NOTES``).

    Raises ``LookupError`` for a transition without a code, a name or a note, and for a note
    whose code is not in the machine.
    """
    machine = states.MACHINE if machine is None else machine
    notes = NOTES if notes is None else notes
    result = []
    for t in machine:
        if not t.code.strip() or not t.name.strip():
            raise LookupError(f"transition {t!r} has no code or no name in dispatch/states.py")
        note = notes.get(t.code)
        if note is None or not all(part.strip() for part in note):
            raise LookupError(
                f"transition {t.label!r} has no 'who'/'why': add them to NOTES in "
                f"tools/states_doc.py"
            )
        who, why = note
        result.append(
            Documented(t.code, t.name, _ordered(t.sources), t.target.value, t.actor.value, who, why)
        )
    codes = [t.code for t in machine]
    duplicated = sorted({code for code in codes if codes.count(code) > 1})
    if duplicated:
        raise LookupError(f"transition codes used twice: {', '.join(duplicated)}")
    stale = sorted(set(notes) - set(codes))
    if stale:
        raise LookupError(f"NOTES in tools/states_doc.py has no transition for: {', '.join(stale)}")
    return result


def edges(transitions: Iterable[Documented]) -> dict[tuple[str, str], list[str]]:
    """(from, to) -> codes of the transitions that allow it; ``NEW`` as from for creation."""
    found: dict[tuple[str, str], list[str]] = {}
    for t in transitions:
        for source in t.sources or (NEW,):
            found.setdefault((source, t.target), []).append(t.code)
    return found


def render(
    machine: Sequence[states.Transition] | None = None,
    notes: dict[str, tuple[str, str]] | None = None,
) -> str:
    transitions = documented(machine, notes)
    allowed = edges(transitions)
    terminal = _ordered(states.TERMINAL)
    leased = _ordered(states.LEASED)
    lines = [
        "<!-- GENERATED from dispatch/states.py by `python -m tools.states_doc`: do not edit. -->",
        "",
        "# The send-job state machine",
        "",
        "Generated from `dispatch.states.MACHINE`, the single definition the outbox executes:",
        "every store operation declares the transitions it performs (`@performs`) and takes its",
        "SQL guard and its journal rows' from/to from them, and the tests check every job's",
        "journal against it (`is_valid_path`). A change to the machine without regenerating this",
        "file fails `tests/unit/test_docs.py`. The reasoning behind it is in",
        "[design.md §4–§5](design.md#4-the-state-machine).",
        "",
        "States: " + ", ".join(f"`{s.value}`" for s in states.State) + ".",
        "",
        "At rest (terminal at quiescence): "
        + ", ".join(f"`{s}`" for s in terminal)
        + ". `in_doubt` stays there until an operator acts, or R4 (a webhook's"
        " `in_doubt: resend` policy).",
        "A worker holds a lease in: " + ", ".join(f"`{s}`" for s in leased) + ".",
        "",
        "## Diagram",
        "",
        "```mermaid",
        "stateDiagram-v2",
    ]
    for (source, target), codes in allowed.items():
        start = "[*]" if source == NEW else source
        # Mermaid labels cannot hold ':'; codes keep the diagram readable, the table has the rest.
        lines.append(f"    {start} --> {target}: {', '.join(codes)}")
    lines.append("    classDef rest font-weight:bold,stroke-width:3px")
    lines.append(f"    class {','.join(terminal)} rest")
    lines += ["```", "", "## Transitions", ""]
    lines.append("One row per `Transition` in `dispatch.states.T`, each with one target state.")
    lines.append("")
    lines.append("| transition | from | to | actor | who performs it | why |")
    lines.append("|---|---|---|---|---|---|")
    for t in transitions:
        source = ", ".join(f"`{s}`" for s in t.sources) or NEW
        lines.append(
            f"| **{t.code}** {_cell(t.name)} | {source} | `{t.target}` | {t.actor} "
            f"| {_cell(t.who)} | {_cell(t.why)} |"
        )
    lines += ["", "## Allowed edges", ""]
    lines.append("Every `(from, to)` pair a journal may contain, and the transitions allowing it.")
    lines.append("")
    lines.append("| from | to | allowed by |")
    lines.append("|---|---|---|")
    for (source, target), codes in allowed.items():
        shown = NEW if source == NEW else f"`{source}`"
        lines.append(f"| {shown} | `{target}` | {', '.join(codes)} |")
    lines.append("")
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="fail if the file is out of date")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    text = render()
    current = args.output.read_text(encoding="utf-8") if args.output.exists() else None
    if args.check:
        if current != text:
            print(f"{args.output} is out of date: run python -m tools.states_doc", file=sys.stderr)
            return 1
        return 0
    if current != text:
        args.output.write_text(text, encoding="utf-8")
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
