"""Jobs a page at a time, in id order, from the index ``jobs:byid`` (every job id in a
ZSET of score 0, written by the scripts that create jobs in the same step as ``jobs``,
and taken out by retention with the other indexes of jobs).

A page is one ``ZRANGE BYLEX`` of at most ``per_page + 1`` ids (the one after the page is
the next page's token, as Nomad's ``next_token``), then the page's jobs and their tasks'
states in two read-only script calls (:meth:`JobStore.job_summaries`: ``job_page.lua``,
``task_states.lua``), each one reply: what a page reads grows with the page, never with
the namespace. A namespace written before the index
existed has it made on its first page (SSCAN of ``jobs``, a chunk at a time).
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.state.jobs import JobSummary

BACKFILL_CHUNK = 1000


@dataclass
class Page:
    jobs: list[JobSummary]
    next_token: str | None  # the first id of the next page; None after the last


def lex_range(after: str | None, prefix: str) -> tuple[str, str]:
    """The BYLEX bounds of ids from ``after`` (inclusive) that start with ``prefix``."""
    low = f"[{after}" if after and after > prefix else (f"[{prefix}" if prefix else "-")
    high = f"[{prefix}\xff" if prefix else "+"  # \xff sorts after every character of an id
    return low, high


def job_page(store, per_page: int, after: str | None = None, prefix: str = "") -> Page:
    """Up to ``per_page`` jobs from id ``after`` on (the token of an earlier page), of ids
    starting with ``prefix``."""
    k = store.keys
    low, high = lex_range(after, prefix)
    with store.client.pipeline(transaction=False) as pipe:
        pipe.zcard(k.jobs_by_id)
        pipe.scard(k.jobs)
        pipe.zrange(k.jobs_by_id, low, high, bylex=True, offset=0, num=per_page + 1)
        indexed, listed, ids = pipe.execute()
    if indexed < listed:  # a namespace from before the index: make it, then read again
        backfill(store)
        ids = store.client.zrange(k.jobs_by_id, low, high, bylex=True, offset=0, num=per_page + 1)
    more = ids[per_page] if len(ids) > per_page else None
    summaries = store.job_summaries(ids[:per_page])
    gone = set(ids[:per_page]) - {summary.id for summary in summaries}
    if gone:  # removed between the two reads, or an index entry a backfill raced with a removal
        stale = [job_id for job_id in gone if not store.client.exists(k.job(job_id))]
        if stale:
            store.client.zrem(k.jobs_by_id, *stale)
    return Page(summaries, more)


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
