"""The named states and kinds: task states (with the live and terminal sets), node
availability and status, job types, strategies and the priority range."""

# Task states (the contract's names). A task is in exactly one at a time.
PENDING, ASSIGNED, RUNNING = "pending", "assigned", "running"
COMPLETED, FAILED, PREEMPTED, LOST, STOPPED = "completed", "failed", "preempted", "lost", "stopped"
TASK_STATES = (PENDING, ASSIGNED, RUNNING, COMPLETED, FAILED, PREEMPTED, LOST, STOPPED)
LIVE_STATES = frozenset({ASSIGNED, RUNNING})  # holding resources on a node
TERMINAL_STATES = frozenset({COMPLETED, FAILED, PREEMPTED, LOST, STOPPED})

# Node availability (set by people) and status (observed).
ACTIVE, PAUSE, DRAIN = "active", "pause", "drain"
AVAILABILITIES = (ACTIVE, PAUSE, DRAIN)
READY, DOWN = "ready", "down"

SERVICE, BATCH, GLOBAL, SYSBATCH = "service", "batch", "global", "sysbatch"
JOB_TYPES = (SERVICE, BATCH, GLOBAL, SYSBATCH)
PER_NODE_TYPES = frozenset({GLOBAL, SYSBATCH})  # one task on every eligible node, no replicas
RUN_TO_COMPLETION = frozenset({BATCH, SYSBATCH})  # a task that completed is done
SPREAD, BINPACK = "spread", "binpack"
STRATEGIES = (SPREAD, BINPACK)

MIN_PRIORITY, MAX_PRIORITY = 0, 1000
MAX_REPLICAS = 1_000_000
