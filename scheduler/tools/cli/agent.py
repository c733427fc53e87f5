"""``sched agent``: run a node agent, which registers its node, heartbeats and runs the
tasks placed there through RQ."""

from __future__ import annotations

import click

from scheduler.control.heartbeat import DEFAULT_INTERVAL_S
from scheduler.control.processes import process
from scheduler.state.app import App
from scheduler.tools import logs
from scheduler.tools.cli.common import pass_app, run_options
from scheduler.tools.cli.nodes import node_from_options, node_options


@click.command()
@click.argument("name")
@node_options
@click.option("--heartbeat", "interval", type=click.FloatRange(0.05, 60), default=DEFAULT_INTERVAL_S,
              show_default=True, help="Seconds between heartbeats; the TTL is 3 of them. A node whose heartbeat "
                                      "lapsed for a TTL of answering Redis time is down; runs whose agent has gone a "
                                      "TTL without renewing it are frozen (or as their job's disconnect says).")
@click.option("--slots", type=click.IntRange(1, 64), default=None, show_default="one per core of --cpu, 2 to 64",
              help="Tasks this agent runs at the same time (RQ worker processes); the scheduler places no more "
                   "live tasks on the node.")
@click.option("--rq-url", envvar="SCHED_RQ_URL", default=None, metavar="URL",
              help="The execution Redis RQ runs on (plain or Sentinel; also SCHED_RQ_URL). Default: the "
                   "scheduler's Redis, which must then not be a cluster (RQ cannot run on one).")
@click.option("--state-dir", type=click.Path(file_okay=False), default=None,
              help="Where the agent keeps the node's journal of what it runs (keep it across restarts). "
                   "Default: agents/NAMESPACE/NAME in sched's state folder ($SCHED_HOME).")
@run_options
@pass_app
def agent(app, name, interval, slots, rq_url, state_dir, metrics_port, log_level, log_format, **options):
    """Run a node agent: register NAME, heartbeat, and run the tasks placed on it (via RQ).

    Tasks go assigned -> running -> completed or failed. If the agent cannot renew
    its heartbeat for a TTL (3 intervals), its runs are frozen (SIGSTOP) until it
    can: Redis away, restarting or failing over costs them only time. If the node
    stays silent a TTL more while Redis answers, it goes down and its tasks are lost
    and replaced elsewhere; when the agent comes back, it kills whatever was replaced
    meanwhile and resumes the rest. A job chooses otherwise with disconnect.
    """
    node = node_from_options(name, **options)
    logs.configure(log_level, log_format)
    app.app.url  # start the embedded server if there is no URL; the agent waits for a real one
    agent_app = App(redis_url=app.app.url, namespace=app.namespace, rq_url=rq_url,
                    wait_replicas=app.app.wait_replicas)
    agent_app.rq_client  # a cluster given as the RQ Redis is one sentence, before anything starts
    process("node-agent")(agent_app, node, interval_s=interval, slots=slots, metrics_port=metrics_port,
                          state_dir=state_dir)
