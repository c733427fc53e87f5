"""One job, read whole for its record (``sched job show``, ``GET /v1/jobs/{id}``) in two
round trips, whatever it holds: ``job_read.lua`` (its hash, task ids, history, what
retention's removal time needs, and the namespace's newest event id, all in one step),
then its tasks' states (``task_states.lua`` calls, all in one round trip; a sysbatch
job's tasks whole, as its status looks at the last task on each node). Written as steps
(state/read_steps.py), so that the API reads it on its event loop as well.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from scheduler.model import SYSBATCH, Task, check_job_id
from scheduler.model.errors import NotFound
from scheduler.state.read_steps import Batch, Steps, as_hash, run
from scheduler.state.retention import removal_ms


@dataclass
class JobView:
    """A job as read for its record."""

    id: str
    fields: dict[str, str]  # its hash as stored
    spec: dict
    task_states: list[str]  # of the tasks that exist, in index order
    tasks: list[Task] | None  # the tasks whole, for a sysbatch job only
    history: list[dict] = field(default_factory=list)  # its audit trail, when asked for
    remove_at: int | None = None  # when retention removes it (ms), once finished
    newest_event: str = "0-0"  # the namespace's newest event id as of this read


def read_job(store, job_id: str, history: bool = False) -> JobView:
    """The job ``job_id`` (NotFound when there is none); ``history``: with its audit trail."""
    return run(store, read_job_steps(store, job_id, history))


def read_job_steps(store, job_id: str, history: bool = False) -> Steps:
    """:func:`read_job` as steps."""
    check_job_id(job_id)
    k = store.keys
    batch = Batch()
    store.scripts.queue(batch, "job_read", [k.job(job_id), k.job_tasks(job_id), k.job_history(job_id), k.stream,
                                            k.jobs_expiring, k.jobs_finished, k.config],
                        [job_id, "1" if history else "0"], read_only=True)
    [reply] = yield batch
    newest, flat, task_ids, entries, expiring, finished, retention = reply
    if not flat:
        raise NotFound(f"job {job_id!r} does not exist.")
    fields = dict(zip(flat[::2], flat[1::2]))
    spec = orjson.loads(fields["spec"])
    if spec.get("type") == SYSBATCH:
        batch = Batch()
        for task_id in task_ids:
            batch.execute_command("HGETALL", k.task(task_id))
        tasks = [Task.from_hash(as_hash(reply)) for reply in (yield batch) if reply]
        states = [task.state for task in tasks]
    else:
        tasks = None
        states = [state for state in (yield from store.task_states_steps(task_ids)) if state is not None]
    return JobView(job_id, fields, spec, states, tasks, [orjson.loads(entry) for entry in entries],
                   removal_ms(expiring, finished, retention), newest)
