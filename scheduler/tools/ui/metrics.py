"""``GET /metrics`` of ``sched ui``: the cluster as Prometheus sees it, read from Redis on
every scrape (a custom collector: nothing is kept between scrapes), one ``namespace``
label per namespace of the Redis. The workers' and agents' own metrics are served by
themselves (``workers/metrics.py``); see docs/metrics.md for every name.

Units are Prometheus' base units: cpu in cores, memory in bytes, other resources in units.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from scheduler.client import Client
from scheduler.model import AVAILABILITIES, TASK_STATES
from scheduler.model.states import DOWN, READY
from scheduler.state.app import App
from scheduler.state.memory import MEMORY_ERRORS
from scheduler.tools.ui import data

NODE_STATUSES = (READY, DOWN)


def _base_unit(resource: str, amount: int) -> float:
    return amount / 1000 if resource == "cpu" else float(amount)  # cpu is kept in millicores


class ClusterCollector:
    """Queue depths, nodes by status and availability, allocation and capacity per
    resource, tasks by state and the workers' shared counters, per namespace."""

    def __init__(self, app: App):
        self.app = app

    def collect(self):
        ns = ["namespace"]
        queue = GaugeMetricFamily("sched_queue_tasks", "Tasks in each scheduling queue.", labels=ns + ["queue"])
        nodes = GaugeMetricFamily("sched_nodes", "Nodes by status (ready, down).", labels=ns + ["status"])
        availability = GaugeMetricFamily("sched_nodes_by_availability", "Nodes by availability (active, pause, drain).",
                                         labels=ns + ["availability"])
        capacity = GaugeMetricFamily("sched_capacity", "Capacity of ready nodes per resource "
                                     "(cpu in cores, memory in bytes).", labels=ns + ["resource"])
        allocated = GaugeMetricFamily("sched_allocated", "Allocated on all nodes per resource "
                                      "(cpu in cores, memory in bytes).", labels=ns + ["resource"])
        tasks = GaugeMetricFamily("sched_tasks", "Tasks by state.", labels=ns + ["state"])
        jobs = GaugeMetricFamily("sched_jobs", "Jobs.", labels=ns)
        used = GaugeMetricFamily("sched_redis_used_memory_bytes", "Redis used_memory (the server of the namespace).",
                                 labels=ns)
        limit = GaugeMetricFamily("sched_redis_maxmemory_bytes", "Redis maxmemory (0: no limit).", labels=ns)
        each = GaugeMetricFamily("sched_bytes_per", "Bytes one live task, job (its tasks apart) or node of the "
                                 "namespace takes in Redis, averaged over a sample.", labels=ns + ["kind"])
        drains = GaugeMetricFamily("sched_drains", "Nodes whose drain is in progress.", labels=ns)
        budget = {name: GaugeMetricFamily(f"sched_budget_{name}", help_text, labels=ns + ["job"])
                  for name, help_text in (("expected", "Tasks a job with a disruption budget should have."),
                                          ("healthy", "Its healthy running tasks, as last counted, less the "
                                                      "disruptions since."),
                                          ("desired_healthy", "The healthy tasks its budget keeps."),
                                          ("disruptions_allowed", "The disruptions its budget allows now."))}
        evictions = CounterMetricFamily("sched_budget_evictions", "Evictions its budget granted (drains, sched "
                                        "task evict, the API).", labels=ns + ["job"])
        counters = {name: CounterMetricFamily(f"sched_cluster_{name}", help_text, labels=ns)
                    for name, help_text in (("placements", "Placements committed by all workers (stats hash)."),
                                            ("commit_refusals", "Placements refused at commit, all workers."),
                                            ("batches", "Batches worked by all workers."))}
        for namespace in data.namespaces(self.app):
            app = data.namespace_app(self.app, namespace)
            store = app.store
            for name, count in app.queue.counts().items():
                queue.add_metric([namespace, name], count)
            found = store.nodes()
            for status in sorted({*NODE_STATUSES, *(n.status for n in found)}):
                nodes.add_metric([namespace, status], sum(1 for n in found if n.status == status))
            for value in AVAILABILITIES:
                availability.add_metric([namespace, value], sum(1 for n in found if n.availability == value))
            resources = sorted({r for n in found for r in n.capacity})
            for resource in resources:
                capacity.add_metric([namespace, resource], _base_unit(resource, sum(
                    n.capacity.get(resource, 0) for n in found if n.status == READY)))
                allocated.add_metric([namespace, resource], _base_unit(resource, sum(
                    n.allocated.get(resource, 0) for n in found)))
            summaries = store.job_summaries()
            jobs.add_metric([namespace], len(summaries))
            by_state = dict.fromkeys(TASK_STATES, 0)
            for summary in summaries:
                for state in summary.task_states:
                    by_state[state] = by_state.get(state, 0) + 1
            for state, count in by_state.items():
                tasks.add_metric([namespace, state], count)
            drains.add_metric([namespace], len(store.draining_nodes()))
            for record in Client(app=app).budgets():
                for name, field in (("expected", "expected"), ("healthy", "healthy"),
                                    ("desired_healthy", "desired_healthy"), ("disruptions_allowed", "allowed")):
                    budget[name].add_metric([namespace, record["job"]], record[field])
                evictions.add_metric([namespace, record["job"]], record["evictions"])
            stats = store.stats()
            for name, key in (("placements", "placed"), ("commit_refusals", "refused"), ("batches", "batches")):
                counters[name].add_metric([namespace], stats.get(key, 0))
            try:
                memory = store.memory_report()
            except MEMORY_ERRORS:
                continue  # a Redis user whose role may not run INFO or MEMORY
            used.add_metric([namespace], memory["used_memory"])
            limit.add_metric([namespace], memory["maxmemory"])
            for kind in ("live_task", "job", "node"):
                each.add_metric([namespace, kind], memory[f"bytes_per_{kind}"])
        yield from (queue, nodes, availability, capacity, allocated, tasks, jobs, *counters.values(), used, limit,
                    each, drains, *budget.values(), evictions)


def registry(app: App) -> CollectorRegistry:
    found = CollectorRegistry(auto_describe=False)
    found.register(ClusterCollector(app))
    return found


async def endpoint(request):
    """Prometheus text format, computed now (in a thread: the reads are blocking)."""
    body = await run_in_threadpool(generate_latest, request.app.state.metrics)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
