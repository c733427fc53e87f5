"""Static traces small enough for an exact answer, and that answer.

A static trace is a workload that arrives at once and stays: every task at time 0, none
ending. Placing it is vector bin packing over cpu, memory and any other resource the
tasks ask for. ``static_trace`` draws one from a seed (the same seed, the same trace) in
one of ``SHAPES``; ``optimum`` computes, with OR-tools' CP-SAT, the fewest nodes of the
trace's inventory that hold every task: the inventory's nodes taken in turn (as
``sched simulate --compact`` takes them: ``replay.shaped_nodes``), or, with
``prefix=False``, any of them.
"""

from __future__ import annotations

import math
import random

MiB = 2**20
GiB = 2**30

# Node shapes as (cpu cores, memory GiB, gpus); an inventory is taken in turn.
UNIFORM = ((16, 64, 0),)
# The machine mix of Google's 2011 cluster (sched simulate generate), scaled to 32 cores
# and 128 GiB, in the proportions of its three commonest shapes and its largest.
MIXED = ((16, 64, 0), (16, 32, 0), (16, 64, 0), (32, 128, 0), (16, 32, 0), (16, 96, 0), (16, 64, 0), (16, 32, 0))
GPU = ((16, 64, 0), (16, 64, 0), (16, 64, 0), (32, 128, 8))
SHAPES = ("uniform", "mixed", "cpu_memory", "large_small", "gpu")


def _lognormal(rng: random.Random, median: float, sigma: float, low: float, high: float) -> float:
    return min(high, max(low, median * math.exp(rng.gauss(0.0, sigma))))


def _count(rng: random.Random) -> int:
    """Tasks of a job: one for most jobs, else a few to a dozen."""
    return 1 if rng.random() < 0.6 else rng.randint(2, 12)


def _request(rng: random.Random, shape: str, most_gib: int) -> dict:
    """One job's request, as a trace's ``resources`` field (at most ``most_gib`` of memory:
    the largest node's)."""
    gpus = 0
    if shape == "cpu_memory":  # half cpu-heavy, half memory-heavy: they pack best together
        if rng.random() < 0.5:
            cpu, per_core = _lognormal(rng, 2.0, 0.5, 0.5, 8.0), _lognormal(rng, 1.0, 0.3, 0.25, 2.0)
        else:
            cpu, per_core = _lognormal(rng, 0.5, 0.5, 0.1, 2.0), _lognormal(rng, 12.0, 0.3, 6.0, 24.0)
    elif shape == "large_small":  # a few large tasks among many small ones
        if rng.random() < 0.1:
            cpu, per_core = rng.uniform(6.0, 12.0), _lognormal(rng, 4.0, 0.3, 2.0, 5.0)
        else:
            cpu, per_core = _lognormal(rng, 0.5, 0.6, 0.1, 2.0), _lognormal(rng, 4.0, 0.5, 1.0, 12.0)
    else:
        cpu, per_core = _lognormal(rng, 1.0, 0.8, 0.1, 8.0), _lognormal(rng, 4.0, 0.5, 0.5, 12.0)
        if shape == "gpu" and rng.random() < 0.08:
            gpus = rng.randint(1, 2)
    memory = min(most_gib * 1024, max(1, round(cpu * per_core * 1024)))
    resources = {"cpu": f"{max(1, round(cpu * 1000))}m", "memory": f"{memory}MiB"}
    if gpus:
        resources["gpu"] = gpus
    return resources


def static_trace(shape: str, seed: int, tasks: int) -> list[dict]:
    """The events of a static trace of about ``tasks`` tasks (at least, at most one job
    more) on an inventory of ``shape``'s node shapes."""
    rng = random.Random(f"{shape}/{seed}")
    inventory = {"mixed": MIXED, "gpu": GPU}.get(shape, UNIFORM)
    events: list[dict] = []
    for i, (cpu, memory, gpus) in enumerate(inventory):
        node = {"kind": "node", "time": 0, "name": f"n{i}", "cpu": cpu, "memory": f"{memory}GiB"}
        if gpus:
            node["gpu"] = gpus
        events.append(node)
    made = 0
    while made < tasks:
        count = min(_count(rng), tasks - made)
        events.append({"kind": "task", "time": 0, "job": f"j{len(events):04d}", "count": count,
                       "resources": _request(rng, shape, max(memory for _, memory, _ in inventory))})
        made += count
    return events


def optimum(trace, prefix: bool = True, limit_s: float = 60.0, workers: int = 2) -> dict:
    """The fewest nodes that hold every task of ``trace`` (a static
    :class:`~scheduler.tools.simulate.trace.Trace`), by CP-SAT: ``nodes`` (the best found),
    ``bound`` (proven: no fewer can do) and ``proven`` (the two agree). With ``prefix`` the
    nodes are the inventory's taken in turn and only the first N may be used (what
    compaction asks); without, any N of as many nodes."""
    from ortools.sat.python import cp_model

    from scheduler.tools.simulate.replay import shaped_nodes
    from scheduler.tools.simulate.trace import TASK

    jobs = [(event.spec.resources, event.count) for event in trace.events if event.kind == TASK]
    resources = sorted({r for needs, _ in jobs for r, amount in needs.items() if amount > 0})
    size = _first_fit_nodes(trace, jobs, resources)
    nodes = shaped_nodes(trace.nodes, size)
    model = cp_model.CpModel()
    used = [model.new_bool_var(f"used{j}") for j in range(size)]
    on = {}  # (job, node) -> tasks of the job on the node
    for k, (needs, count) in enumerate(jobs):
        for j, node in enumerate(nodes):
            most = min([count] + [node.capacity.get(r, 0) // needs[r] for r in resources if needs.get(r, 0) > 0])
            if most > 0:
                on[k, j] = model.new_int_var(0, most, f"x{k}_{j}")
        model.add(sum(var for (kk, _), var in on.items() if kk == k) == count)
    for j, node in enumerate(nodes):
        for r in resources:
            terms = [jobs[k][0].get(r, 0) * var for (k, jj), var in on.items() if jj == j and jobs[k][0].get(r, 0)]
            if terms:
                model.add(sum(terms) <= node.capacity.get(r, 0) * used[j])
    shapes = [_shape(node) for node in nodes]
    for j in range(1, size):
        if prefix:
            model.add_implication(used[j], used[j - 1])  # the first N, as compaction takes them
        else:  # nodes of one shape are interchangeable: use the earlier ones first
            earlier = [i for i in range(j) if shapes[i] == shapes[j]]
            if earlier:
                model.add_implication(used[j], used[earlier[-1]])
    for r in resources:  # the volume bound, which helps the solver prove
        model.add(sum(node.capacity.get(r, 0) * used[j] for j, node in enumerate(nodes))
                  >= sum(needs.get(r, 0) * count for needs, count in jobs))
    model.minimize(sum(used))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = limit_s
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = 0
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise AssertionError(f"CP-SAT found no packing on {size} nodes (status {solver.status_name(status)}).")
    best, bound = round(solver.objective_value), math.ceil(solver.best_objective_bound - 1e-6)
    return {"nodes": best, "bound": bound, "proven": best == bound, "wall_s": solver.wall_time}


def _shape(node) -> tuple:
    return tuple(sorted(node.capacity.items()))


def _first_fit_nodes(trace, jobs, resources) -> int:
    """How many nodes, taken in turn, first-fit decreasing needs: the solver's room."""
    from scheduler.tools.simulate.replay import shaped_nodes

    tasks = sorted((needs for needs, count in jobs for _ in range(count)),
                   key=lambda needs: -sum(needs.get(r, 0) / max(1, trace.nodes[0].capacity.get(r, 1))
                                          for r in resources))
    size = max(1, len(trace.nodes))
    for needs in tasks:
        if not any(all(node.capacity.get(r, 0) >= needs.get(r, 0) for r in resources) for node in trace.nodes):
            raise ValueError(f"a task asking {needs} fits no node of the inventory.")
    while True:
        nodes = shaped_nodes(trace.nodes, size)
        free = [dict(node.capacity) for node in nodes]
        for needs in tasks:
            for room in free:
                if all(room.get(r, 0) >= needs.get(r, 0) for r in resources):
                    for r in resources:
                        room[r] = room.get(r, 0) - needs.get(r, 0)
                    break
            else:
                break
        else:
            return size
        size = size * 5 // 4 + 1
