"""Generate ``docs/states.md`` from the state machine in ``dispatch/states.py``.

    .venv/bin/python -m tools.states_doc          # rewrite docs/states.md
    .venv/bin/python -m tools.states_doc --check  # exit 1 if docs/states.md is out of date

What it reads: ``dispatch.states.State`` (every state, in declaration order),
``dispatch.states.TRANSITIONS`` (every named transition with its source and target states) and,
when present, ``TERMINAL`` and ``LEASED``. ``transitions_from_table`` is the ONE function that
knows the table's data shape; when ``dispatch/states.py`` changes shape, adapt that function
only. Who performs a transition and why are taken from the table entry when it carries them
(attributes ``by``/``actor`` and ``why``/``reason``/``doc``), else from ``_NOTES`` below.

``tests/test_docs.py`` fails when the committed file differs from what this module renders, and
when a transition has no "who"/"why": the documentation cannot drift from the code.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dispatch import states

OUTPUT = Path(__file__).resolve().parents[1] / "docs" / "states.md"
NEW = "(new)"  # the source of a transition that creates the row

# Who performs each transition and why, keyed by its code ("T4", "R1") or, for a transition
# without a code, its full name. Used only when the table entry does not say so itself.
_NOTES: dict[str, tuple[str, str]] = {
    "T1": (
        "scheduler (fan-out)",
        "An occurrence is materialised: `INSERT … ON CONFLICT DO NOTHING` on the unique key, "
        "so re-firing a trigger or relaunching inserts nothing twice.",
    ),
    "T2": (
        "worker",
        "A due job of an active campaign is leased: new fencing token, owner, "
        "`lease_expires_at` on the database clock, `claims + 1`.",
    ),
    "T4": (
        "worker, just before SMTP DATA",
        "The only door to a send: committed durably before the first byte of DATA. Guard: "
        "same token, enough lease left, attempts left, not suppressed, not superseded, "
        "campaign active.",
    ),
    "T5": (
        "worker",
        "The receiver accepted the message (SMTP 250, HTTP 2xx). Also from `in_doubt`: a late "
        "250 still proves delivery.",
    ),
    "T6": (
        "worker",
        "Nothing was delivered (connect, MAIL, RCPT, or T4 refused): back to pending with "
        "backoff, or failed when permanent (e.g. RCPT 550, suppressed, attempts used up).",
    ),
    "T7": (
        "worker",
        "A definitive reply to DATA: 4xx retries with backoff (failed once attempts are used "
        "up), 5xx fails.",
    ),
    "T8": (
        "worker",
        "Timeout, disconnect or cancellation inside DATA: the outcome is unknown (RFC 1047). "
        "The connection is closed, never reused.",
    ),
    "R1": (
        "recovery (any worker, `herald recover`), graceful shutdown",
        "A claim whose lease expired before T4: nothing can have been sent, so back to "
        "pending; failed ('poison') when `claims` reached `max_claims`. Shutdown gives unstarted "
        "claims back the same way, without counting the claim.",
    ),
    "R2": (
        "recovery",
        "The lease expired after T4: the message may have gone out, so the job becomes "
        "`in_doubt` ('lease expired during send'), never resent automatically for email.",
    ),
    "R3": (
        "recovery",
        "Nothing left to spend (`send_attempts` or `claims` exhausted): a dead letter with its "
        "full journal.",
    ),
    "T9": (
        "operator (`herald in-doubt resolve`)",
        "An explicit decision recorded with who and why: `--as sent`, `--as failed`, or "
        "`--resend` (re-armed with one more transmission). Today recovery's automatic resend "
        "of a webhook step with `in_doubt: resend` also journals `in_doubt → pending` and is "
        "allowed only by this edge.",
    ),
    "T10": (
        "campaign control (`herald cancel`)",
        "Everything not yet past T4 is cancelled; a job already sending goes out.",
    ),
    "dead retry": (
        "operator (`herald dead retry`)",
        "A dead letter is re-armed with fresh attempt and claim budgets, due now.",
    ),
    "T11": (
        "`herald launch --force-new-version`",
        "The new version removed this key: pending and claimed jobs are cancelled "
        "('superseded'); a claim is fenced because its T4 needs state `claimed`.",
    ),
    "T12": (
        "`herald launch --force-new-version`",
        "The new version changed this key's content: a claim is released so the job goes out "
        "with the new content.",
    ),
    "T13": (
        "`herald launch --force-new-version`",
        "A key an earlier version removed is back: the cancelled job is re-armed with the new "
        "content.",
    ),
}

_CODE = re.compile(r"[TR]\d+")


@dataclass(frozen=True)
class Transition:
    """One transition as documented: states by value, ``()`` as sources meaning "no row yet"."""

    name: str
    sources: tuple[str, ...]
    targets: tuple[str, ...]
    by: str
    why: str


def _first(entry: object, *names: str) -> Any:
    for name in names:
        value = getattr(entry, name, None)
        if value is not None:
            return value
    return None


def _ordered(values: Iterable[Any]) -> tuple[str, ...]:
    """State values in the enum's declaration order (sets have none of their own)."""
    order = {state.value: index for index, state in enumerate(states.State)}
    found = {str(getattr(v, "value", v)) for v in values if v is not None}
    return tuple(sorted(found, key=lambda value: order.get(value, len(order))))


def _as_states(value: Any) -> Iterable[Any]:
    if value is None:
        return ()
    if isinstance(value, str | states.State):
        return (value,)
    return tuple(value)


def transitions_from_table(table: Any = None) -> list[Transition]:
    """The table of ``dispatch.states`` as a list of documented transitions, in table order.

    The shape read today: ``{name: (frozenset(sources), frozenset(targets))}``. Also accepted,
    so a restructured table needs no change here: a mapping of name to an object with
    ``sources``/``targets`` (or ``source``/``target``) attributes, or an iterable of objects
    that also carry ``name``. A ``None`` source, or no sources, is "no row yet".
    """
    table = states.TRANSITIONS if table is None else table
    items: list[tuple[str, Any]]
    if isinstance(table, Mapping):
        items = [(str(name), entry) for name, entry in table.items()]
    else:
        items = [(str(entry.name), entry) for entry in table]
    result = []
    for name, entry in items:
        if isinstance(entry, tuple) and len(entry) == 2:
            sources, targets = entry
        else:
            sources = _first(entry, "sources", "source", "from_states")
            targets = _first(entry, "targets", "target", "to_states")
        by = _first(entry, "by", "actor", "who")
        why = _first(entry, "why", "reason", "doc")
        code = _code(name)
        if (by is None or why is None) and code in _NOTES:
            by = by if by is not None else _NOTES[code][0]
            why = why if why is not None else _NOTES[code][1]
        if by is None or why is None:
            raise LookupError(
                f"transition {name!r} has no 'who'/'why': add them to its entry in "
                f"dispatch/states.py or to _NOTES in tools/states_doc.py"
            )
        result.append(
            Transition(name, _ordered(_as_states(sources)), _ordered(_as_states(targets)), by, why)
        )
    return result


def edges(transitions: Iterable[Transition]) -> dict[tuple[str, str], list[str]]:
    """(from, to) -> names of the transitions that allow it; ``NEW`` as from for creation."""
    found: dict[tuple[str, str], list[str]] = {}
    for t in transitions:
        for source in t.sources or (NEW,):
            for target in t.targets:
                found.setdefault((source, target), []).append(t.name)
    return found


def _code(name: str) -> str:
    """``T4`` for "T4 start send"; a name without a code ("dead retry") stands for itself."""
    first = name.split()[0]
    return first if _CODE.fullmatch(first) else name


def _label(names: list[str]) -> str:
    # Mermaid labels cannot hold ':'; codes keep the diagram readable, the table has the rest.
    return ", ".join(_code(name) for name in names)


def render(table: Any = None) -> str:
    transitions = transitions_from_table(table)
    allowed = edges(transitions)
    terminal = _ordered(getattr(states, "TERMINAL", ()))
    leased = _ordered(getattr(states, "LEASED", ()))
    lines = [
        "<!-- GENERATED from dispatch/states.py by `python -m tools.states_doc`: do not edit. -->",
        "",
        "# The send-job state machine",
        "",
        "Generated from the transition table in `dispatch/states.py`, the single source the",
        "tests check every job's journal against (`is_valid_path`). A change to the table",
        "without regenerating this file fails `tests/test_docs.py`. The reasoning behind it is",
        "in [design.md §4–§5](design.md#4-the-state-machine).",
        "",
        "States: " + ", ".join(f"`{s.value}`" for s in states.State) + ".",
        "",
    ]
    if terminal:
        lines.append(
            "At rest (terminal at quiescence): "
            + ", ".join(f"`{s}`" for s in terminal)
            + ". `in_doubt` stays there until an operator (or a webhook's `in_doubt: resend`"
            " policy) acts."
        )
    if leased:
        lines.append("A worker holds a lease in: " + ", ".join(f"`{s}`" for s in leased) + ".")
    lines += ["", "## Diagram", "", "```mermaid", "stateDiagram-v2"]
    for (source, target), names in allowed.items():
        start = "[*]" if source == NEW else source
        lines.append(f"    {start} --> {target}: {_label(names)}")
    if terminal:
        lines.append("    classDef rest font-weight:bold,stroke-width:3px")
        lines.append(f"    class {','.join(terminal)} rest")
    lines += ["```", "", "## Transitions", ""]
    lines.append("| transition | from | to | who performs it | why |")
    lines.append("|---|---|---|---|---|")
    for t in transitions:
        source = ", ".join(f"`{s}`" for s in t.sources) or NEW
        target = ", ".join(f"`{s}`" for s in t.targets)
        lines.append(f"| **{t.name}** | {source} | {target} | {_cell(t.by)} | {_cell(t.why)} |")
    lines += ["", "## Allowed edges", ""]
    lines.append("Every `(from, to)` pair a journal may contain, and the transitions allowing it.")
    lines.append("")
    lines.append("| from | to | allowed by |")
    lines.append("|---|---|---|")
    for (source, target), names in allowed.items():
        shown = NEW if source == NEW else f"`{source}`"
        lines.append(f"| {shown} | `{target}` | {', '.join(names)} |")
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
