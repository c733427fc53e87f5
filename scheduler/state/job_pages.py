"""Jobs a page at a time, in id order, from the index ``jobs:byid`` (every job id in a
ZSET of score 0, written by the scripts that create jobs in the same step as ``jobs``,
and taken out by retention with the other indexes of jobs).

A page is one ``ZRANGE BYLEX`` of at most ``per_page + 1`` ids (the one after the page is
the next page's token, as Nomad's ``next_token``), with the namespace's newest event id
in the same round trip (a blocking query's index, read before the page), then the page's
jobs and their tasks' states in two read-only script calls
(:meth:`JobStore.job_summaries`: ``job_page.lua``, ``task_states.lua``), each one reply:
what a page reads grows with the page, never with the namespace. A namespace written before the index
existed has it made on its first page (SSCAN of ``jobs``, a chunk at a time).
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.state.jobs import JobSummary
from scheduler.state.read_steps import BLOCKING_CALLS, Batch, Steps, newest_id, run

BACKFILL_CHUNK = 1000


@dataclass
class Page:
    jobs: list[JobSummary]
    next_token: str | None  # the first id of the next page; None after the last
    newest_event: str = "0-0"  # the namespace's newest event id, read before the page


def lex_range(after: str | None, prefix: str) -> tuple[str, str]:
    """The BYLEX bounds of ids from ``after`` (inclusive) that start with ``prefix``."""
    low = f"[{after}" if after and after > prefix else (f"[{prefix}" if prefix else "-")
    high = f"[{prefix}\xff" if prefix else "+"  # \xff sorts after every character of an id
    return low, high


def job_page(store, per_page: int, after: str | None = None, prefix: str = "") -> Page:
    """Up to ``per_page`` jobs from id ``after`` on (the token of an earlier page), of ids
    starting with ``prefix``."""
    return run(store, job_page_steps(store, per_page, after, prefix))


def job_page_steps(store, per_page: int, after: str | None = None, prefix: str = "") -> Steps:
    """:func:`job_page` as steps (state/read_steps.py); making the index, and taking out
    of it ids whose job is gone, are blocking."""
    k = store.keys
    low, high = lex_range(after, prefix)
    batch = Batch()
    batch.execute_command("XREVRANGE", k.stream, "+", "-", "COUNT", 1)
    batch.execute_command("ZCARD", k.jobs_by_id)
    batch.execute_command("SCARD", k.jobs)
    batch.execute_command("ZRANGE", k.jobs_by_id, low, high, "BYLEX", "LIMIT", 0, per_page + 1)
    newest, indexed, listed, ids = yield batch
    if indexed < listed:  # a namespace from before the index: make it, then read again
        yield BLOCKING_CALLS
        backfill(store)
        ids = store.client.zrange(k.jobs_by_id, low, high, bylex=True, offset=0, num=per_page + 1)
    more = ids[per_page] if len(ids) > per_page else None
    summaries = yield from store.job_summaries_steps(ids[:per_page])
    gone = set(ids[:per_page]) - {summary.id for summary in summaries}
    if gone:  # removed between the two reads, or an index entry a backfill raced with a removal
        yield BLOCKING_CALLS
        stale = [job_id for job_id in gone if not store.client.exists(k.job(job_id))]
        if stale:
            store.client.zrem(k.jobs_by_id, *stale)
    return Page(summaries, more, newest_id(newest))


def backfill(store) -> int:
    """Put every job of ``jobs`` in ``jobs:byid`` (ZADD NX: idempotent, safe beside the
    scripts that add jobs). Returns how many were added."""
    k = store.keys
    added, chunk = 0, []
    for job_id in store.client.sscan_iter(k.jobs, count=BACKFILL_CHUNK):
        chunk.append(job_id)
        if len(chunk) >= BACKFILL_CHUNK:
            added += store.client.zadd(k.jobs_by_id, dict.fromkeys(chunk, 0), nx=True)
            chunk = []
    if chunk:
        added += store.client.zadd(k.jobs_by_id, dict.fromkeys(chunk, 0), nx=True)
    return added
