"""Which completion a send's outcome becomes: the retry and attempt-budget rules.

Pure: the worker records what this returns (T5, T6, T6f, T7, T7f, T8).
"""

from __future__ import annotations

from dispatch.backoff import retry_delay
from dispatch.outbox.jobs import sent_completion
from dispatch.states import State
from dispatch.store import ClaimedJob, Completion
from dispatch.transport import Outcome, Verdict


def completion_for(
    job: ClaimedJob, outcome: Outcome, *, before_data: bool, retry_base: float
) -> Completion:
    """``before_data``: the outcome came before DATA, so nothing can have been delivered: a
    retry is always allowed then, spaced by how often the job was claimed, and never uses up
    one of ``max_send_attempts``."""
    verdict = outcome.verdict
    if verdict is Verdict.SENT:
        return sent_completion(job.lease, outcome.code, outcome.text)  # the common one, cheaper
    if verdict is Verdict.IN_DOUBT:
        return Completion(
            job.lease, State.IN_DOUBT, outcome.code, outcome.text, in_doubt_reason=outcome.text
        )
    if verdict is Verdict.RETRY:
        used = job.claims if before_data else job.send_attempts + 1
        if before_data or used < job.max_send_attempts:
            delay = retry_delay(used, retry_after=outcome.retry_after, base=retry_base)
            return Completion(
                job.lease,
                State.PENDING,
                outcome.code,
                outcome.text,
                retry_in=delay,
                before_data=before_data,
            )
        text = f"attempts exhausted; last: {outcome.text}"
        return Completion(job.lease, State.FAILED, outcome.code, text)
    return Completion(job.lease, State.FAILED, outcome.code, outcome.text, before_data=before_data)
