"""``sched budget``, ``sched task evict`` and ``sched task explain`` of a budgeted job, as
a user types them, and the same through the Python API."""

from __future__ import annotations

import json

import pytest

from scheduler import Client

from budget_helpers import add_nodes, running_job


@pytest.fixture
def web(app):
    add_nodes(app, ["n1", "n2", "n3", "n4"])
    running_job(app, "web", replicas=4, budget={"max_unavailable": 1})
    running_job(app, "plain", replicas=1)
    return app


def test_sched_budget_ls(web, sched):
    lines = sched("budget", "ls").stdout.splitlines()
    assert lines[0].split() == ["JOB", "BUDGET", "EXPECTED", "HEALTHY", "DESIRED", "ALLOWED", "DISRUPTED", "COUNTED"]
    assert lines[1].split()[:8] == ["web", "max_unavailable", "1", "4", "4", "3", "1", "0"]
    records = json.loads(sched("budget", "ls", "--json").stdout)
    assert [(r["job"], r["allowed"]) for r in records] == [("web", 1)]
    assert records == Client(app=web).budgets()


def test_sched_budget_show(web, sched):
    out = sched("budget", "show", "web").stdout.splitlines()
    assert out[0] == "job web's budget (max_unavailable 1): 4 of 4 expected healthy, 3 desired; 1 disruption(s) allowed"
    assert out[1] == "unavailable: 0 of 1"
    record = json.loads(sched("budget", "show", "web", "--json").stdout)
    assert record["desired_healthy"] == 3 and record["disrupted"] == {}


def test_sched_budget_show_of_a_job_without_one_is_one_sentence(web, sched):
    result = sched("budget", "show", "plain", ok=False)
    assert result.exit_code == 2 and result.stderr == (
        "Error: job plain has no disruption_budget; add one to its spec, such as disruption_budget: "
        "{max_unavailable: 1}.\n")
    assert sched("budget", "show", "nope", ok=False).stderr == "Error: job 'nope' does not exist.\n"


def test_sched_task_evict_as_the_budget_allows(web, sched):
    first, second = "web.0", "web.1"
    out = sched("task", "evict", first).stdout
    assert out.startswith(f"task {first} evicted; replacement web.") and out.endswith(" queued\n")
    refused = sched("task", "evict", second, ok=False)
    assert refused.exit_code == 1
    assert refused.stdout == f"task {second} not evicted: waiting on job web's budget, 1 of 1 unavailable\n"
    assert web.store.get_task(second).state == "running"
    assert json.loads(sched("task", "evict", "plain.0", "--json").stdout)["verdict"] == "unbudgeted"
    assert sched("task", "evict", first, ok=False).stdout == f"task {first} is not live on a node: nothing to evict\n"


def test_sched_task_explain_says_the_budget(web, sched):
    out = sched("task", "explain", "web.0").stdout
    assert "job web's budget (max_unavailable 1): 4 of 4 expected healthy, 3 desired; 1 disruption(s) allowed" in out
    assert json.loads(sched("task", "explain", "web.0", "--json").stdout)["budget"]["job"] == "web"
    assert "budget" not in json.loads(sched("task", "explain", "plain.0", "--json").stdout)
