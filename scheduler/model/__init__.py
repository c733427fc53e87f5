"""The nouns of the scheduler: nodes, job specs and tasks, their states, quantities,
constraints, the reasons a task does not fit, and the errors a user can cause.

Everything here is plain data and validation, with no Redis and nothing else of ours
underneath: validation happens once, before anything reaches Redis, so a spec that
parses is a spec the scheduler can place.
"""

from scheduler.model.errors import NotFound, RedisUnavailable, SchedError, SpecError
from scheduler.model.job import JobSpec, Preference, parse_job
from scheduler.model.names import check_job_id, check_namespace, check_node_name, new_job_id, parse_labels
from scheduler.model.node import Node, Nomination, make_node
from scheduler.model.states import (ACTIVE, ASSIGNED, AVAILABILITIES, BATCH, BINPACK, COMPLETED, DOWN, DRAIN, FAILED,
                                    GLOBAL, JOB_TYPES, LIVE_STATES, LOST, MAX_PRIORITY, MAX_REPLICAS, MIN_PRIORITY,
                                    PAUSE, PENDING, PER_NODE_TYPES, PREEMPTED, READY, RUN_TO_COMPLETION, RUNNING,
                                    SERVICE, SPREAD, STOPPED, STRATEGIES, SYSBATCH, TASK_STATES, TERMINAL_STATES)
from scheduler.model.task import Task, parse_allocation
