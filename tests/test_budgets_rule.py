"""Disruption budgets without Redis: the spec field (every error one sentence) and kube's
PodDisruptionBudget arithmetic, table-driven with kube's own examples."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.engine.budgets import NO_LIMIT, desired_healthy, disruptions_allowed, scaled, unavailable, violations
from scheduler.engine.preemption import Victim
from scheduler.model import SpecError, parse_job
from scheduler.model.disruption import DisruptionBudget


def spec(budget, **extra):
    return parse_job({"id": "web", "resources": {"cpu": 1}, "disruption_budget": budget, **extra})


# ----------------------------------------------------------------------------- the field
def test_a_job_without_a_budget_has_none():
    assert parse_job({"id": "web"}).disruption_budget is None


@pytest.mark.parametrize("budget, parsed", [
    ({"max_unavailable": 1}, DisruptionBudget(max_unavailable=1)),
    ({"max_unavailable": "25%"}, DisruptionBudget(max_unavailable="25%")),
    ({"min_available": 3}, DisruptionBudget(min_available=3)),
    ({"min_available": "75%"}, DisruptionBudget(min_available="75%")),
    ({"min_available": " 075% "}, DisruptionBudget(min_available="75%")),
    ({"max_unavailable": 0}, DisruptionBudget(max_unavailable=0)),
])
def test_the_field_parses_and_is_stored_as_written(budget, parsed):
    job = spec(budget, replicas=4)
    assert job.disruption_budget == parsed
    assert job.raw["disruption_budget"] == {parsed.field: parsed.value}
    assert parse_job(job.raw).disruption_budget == parsed  # the stored form parses to the same


def test_a_global_job_takes_either_field():
    assert parse_job({"id": "agent", "type": "global", "disruption_budget": {"max_unavailable": "10%"}}) \
        .disruption_budget == DisruptionBudget(max_unavailable="10%")


def test_a_batch_job_takes_a_whole_min_available():
    job = parse_job({"id": "crunch", "type": "batch", "replicas": 10, "disruption_budget": {"min_available": 8}})
    assert job.disruption_budget == DisruptionBudget(min_available=8)


@pytest.mark.parametrize("budget, words", [
    ([1], "job web: disruption_budget must be a mapping such as {max_unavailable: 1} or {min_available: \"75%\"}."),
    ({}, "job web: disruption_budget takes one of max_unavailable or min_available, and has neither."),
    ({"max_unavailable": 1, "min_available": 2},
     "job web: disruption_budget takes one of max_unavailable or min_available, not both."),
    ({"max_unavailble": 1}, "job web: disruption_budget has unknown field 'max_unavailble' (did you mean "
                            "'max_unavailable'?); known fields are max_unavailable, min_available."),
    ({"maxUnavailable": 1}, "job web: disruption_budget has unknown field 'maxUnavailable' (did you mean "
                            "'max_unavailable'?); known fields are max_unavailable, min_available."),
    ({"max_unavailable": -1}, "job web: disruption_budget.max_unavailable must be a whole number from 0 to 1000000, "
                              "not -1."),
    ({"max_unavailable": 1.5}, "job web: disruption_budget.max_unavailable must be a whole number or a percentage "
                               "such as \"25%\", not 1.5."),
    ({"min_available": True}, "job web: disruption_budget.min_available must be a whole number or a percentage "
                              "such as \"25%\", not True."),
    ({"min_available": "3"}, "job web: disruption_budget.min_available must be a whole number or a percentage "
                             "such as \"25%\", not '3'."),
    ({"min_available": "150%"}, "job web: disruption_budget.min_available must be a percentage from 0% to 100%, "
                                "not '150%'."),
])
def test_bad_values_are_one_sentence(budget, words):
    with pytest.raises(SpecError) as caught:
        spec(budget)
    assert str(caught.value) == words


@pytest.mark.parametrize("budget", [{"max_unavailable": 1}, {"min_available": "50%"}])
def test_a_batch_job_refuses_what_needs_a_steady_count(budget):
    with pytest.raises(SpecError) as caught:
        parse_job({"id": "crunch", "type": "batch", "replicas": 10, "disruption_budget": budget})
    field, value = next(iter(budget.items()))
    assert str(caught.value) == (f"job crunch: disruption_budget of a batch job takes only a whole min_available, "
                                 f"not {field} {value}: its tasks run to completion, so it has no steady count of "
                                 f"tasks to measure that against.")


# ----------------------------------------------------------------------------- the arithmetic
@pytest.mark.parametrize("budget, expected, healthy, desired, allowed", [
    # kube docs, "Specifying a Disruption Budget": percentages are rounded up.
    (DisruptionBudget(min_available="50%"), 7, 7, 4, 3),
    (DisruptionBudget(max_unavailable="50%"), 7, 7, 3, 4),
    (DisruptionBudget(max_unavailable="25%"), 6, 6, 4, 2),
    # kube's disruption_test.go: TestIntegerMaxUnavailable (2 pods, maxUnavailable 1).
    (DisruptionBudget(max_unavailable=1), 2, 2, 1, 1),
    (DisruptionBudget(max_unavailable=1), 2, 1, 1, 0),
    # TestNoSelector / TestUnavailable: minAvailable 3 of 4.
    (DisruptionBudget(min_available=3), 4, 4, 3, 1),
    (DisruptionBudget(min_available=3), 4, 3, 3, 0),
    (DisruptionBudget(min_available=3), 4, 2, 3, 0),
    # TestReplicaSet: minAvailable 20% of 10 is 2.
    (DisruptionBudget(min_available="20%"), 10, 10, 2, 8),
    # TestMaxUnavailableEmptySelector-ish edges: nothing expected.
    (DisruptionBudget(max_unavailable=1), 0, 0, 0, 0),
    (DisruptionBudget(min_available="100%"), 5, 5, 5, 0),
    (DisruptionBudget(max_unavailable="100%"), 5, 5, 0, 5),
    (DisruptionBudget(max_unavailable=0), 3, 3, 3, 0),
    (DisruptionBudget(min_available=0), 3, 3, 0, 3),
    # More healthy than expected (a start-first rollout): more may go.
    (DisruptionBudget(max_unavailable=1), 4, 5, 3, 2),
    # min_available beyond what the job has: none may go, ever.
    (DisruptionBudget(min_available=5), 4, 4, 5, 0),
])
def test_kube_arithmetic(budget, expected, healthy, desired, allowed):
    assert desired_healthy(budget, expected) == desired
    assert disruptions_allowed(budget, expected, healthy) == allowed


def test_a_job_without_a_budget_has_no_limit():
    assert disruptions_allowed(None, 4, 0) == NO_LIMIT


def test_unavailable_says_how_many_are_down_of_how_many_may_be():
    assert unavailable(DisruptionBudget(max_unavailable=1), 4, 3) == (1, 1)
    assert unavailable(DisruptionBudget(min_available="50%"), 4, 4) == (0, 2)


@given(st.integers(0, 100), st.integers(0, 10_000))
def test_a_percentage_is_never_rounded_down(share, expected):
    assert scaled(f"{share}%", expected) * 100 >= share * expected
    assert (scaled(f"{share}%", expected) - 1) * 100 < share * expected


@given(st.integers(0, 50), st.integers(0, 60), st.integers(0, 50), st.booleans(), st.booleans())
def test_allowed_disruptions_never_take_the_job_below_its_budget(expected, healthy, value, is_max, as_percent):
    raw = f"{min(value, 100)}%" if as_percent else value
    budget = DisruptionBudget(max_unavailable=raw) if is_max else DisruptionBudget(min_available=raw)
    allowed = disruptions_allowed(budget, expected, healthy)
    assert 0 <= allowed <= healthy
    if allowed:
        assert healthy - allowed == desired_healthy(budget, expected)


def victim(job, task="t"):
    return Victim(task_id=task, job=job, priority=1, resources={}, ports=())


def test_violations_take_each_jobs_allowance_in_order():
    victims = [victim("web", "w1"), victim("web", "w2"), victim("db", "d1"), victim("batch", "b1")]
    assert violations(victims, {"web": 1, "db": 0}) == [False, True, True, False]
    assert violations(victims, {}) == [False] * 4
