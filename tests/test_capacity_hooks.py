"""Acting on capacity answers: a real subprocess for --exec, a local HTTP server for
--webhook, the cooldowns, the recorded answer and its capacity events."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import orjson
import pytest

from scheduler.client import Client
from scheduler.control.capacity_hooks import Cooldowns
from worker_harness import run_worker_until_idle

NO_WAIT = Cooldowns(scale_up_cooldown_s=0, delay_after_add_s=0, scale_down_cooldown_s=0, unneeded_s=0)


@pytest.fixture
def api(app) -> Client:
    return Client(app=app)


def short_of_room(api: Client) -> None:
    """One node full, three tasks waiting, a pool that takes them."""
    api.add_node("n1", cpu=1, memory="2GiB")
    api.add_pool("p", cpu=4, memory="8GiB", cost=2)
    api.submit({"id": "w", "replicas": 4, "resources": {"cpu": 1}})
    run_worker_until_idle(api.app)


def capacity_events(api: Client) -> list[dict]:
    entries, _ = api.store.stream.read("0-0", count=10_000)
    return [event for _, event in entries if event and event.get("type") == "capacity"]


def test_exec_gets_the_decision_on_stdin_and_its_exit_says_whether_it_acted(api, tmp_path):
    short_of_room(api)
    seen = tmp_path / "seen.json"
    script = f"{sys.executable} -c \"import sys,os; open({str(seen)!r},'w').write(os.environ['SCHED_CAPACITY_ACTION'] + '\\n' + sys.stdin.read())\""
    result = api.act_on_capacity(exec_cmd=script, cooldowns=NO_WAIT)
    assert result["hook"]["acted"] is True
    action, body = seen.read_text().split("\n", 1)
    payload = json.loads(body)
    assert action == "scale-up" and payload["action"] == "scale-up"
    assert payload["scale_up"] == [{"pool": "p", "nodes": 1, "tasks": 3, "cost": 2.0}]
    assert payload["namespace"] == api.namespace
    (event,) = capacity_events(api)
    assert event["event"] == "scale-up" and event["acted"] is True and event["hook"] == "exec"
    assert event["add"] == {"p": 1}
    assert api.last_capacity()["scale_up"]["nodes"] == 1
    failed = api.act_on_capacity(exec_cmd="echo no room in the budget >&2; exit 3", cooldowns=NO_WAIT)
    assert failed["hook"]["acted"] is False and "exited 3: no room in the budget" in failed["hook"]["error"]
    assert capacity_events(api)[-1]["error"].startswith("--exec exited 3")


def test_the_scale_up_cooldown_holds_a_second_call_back(api, tmp_path):
    short_of_room(api)
    calls = tmp_path / "calls"
    cmd = f"cat >> {calls}; echo >> {calls}"
    slow = Cooldowns(scale_up_cooldown_s=3600, delay_after_add_s=0, scale_down_cooldown_s=0, unneeded_s=0)
    first = api.act_on_capacity(exec_cmd=cmd, cooldowns=slow)
    second = api.act_on_capacity(exec_cmd=cmd, cooldowns=slow)
    assert first["hook"]["acted"] and "hook" not in second
    assert second["decision"]["action"] is None
    assert second["decision"]["waiting"][0]["why"] == "scale-up cooldown"
    assert 3500 < second["decision"]["waiting"][0]["for_s"] <= 3600
    assert calls.read_text().count('"action":"scale-up"') == 1


def test_scale_down_waits_for_the_unneeded_time_counted_across_runs_and_the_delay_after_a_scale_up(api, clock):
    for name in ("n1", "n2"):
        api.add_node(name, cpu=4, memory="8GiB")
    api.submit({"id": "w", "replicas": 2, "resources": {"cpu": 1}})
    run_worker_until_idle(api.app)
    waits = Cooldowns(scale_up_cooldown_s=0, delay_after_add_s=600, scale_down_cooldown_s=60, unneeded_s=300)
    from scheduler.control import capacity_hooks

    def once(hook_ms: int, cmd="true"):
        return capacity_hooks.run_once(api.store, api.namespace, None, capacity_hooks.Hook(cmd), waits,
                                       now_ms=hook_ms)

    start = clock.now
    first = once(start)
    assert first["scale_down"]["nodes"] == 1 and first["decision"]["action"] is None
    assert first["decision"]["waiting"][0]["why"] == "nodes not unneeded for long enough yet"
    assert once(start + 299_000)["decision"]["action"] is None
    acted = once(start + 300_000)
    assert acted["decision"]["action"] == "scale-down" and acted["hook"]["acted"]
    again = once(start + 330_000)
    assert again["decision"]["waiting"][0]["why"] == "scale-down cooldown"
    api.store.record_capacity({}, "", {}, ("up",), now_ms=start + 400_000)  # a scale-up acted on
    later = once(start + 500_000)
    assert later["decision"]["waiting"][0]["why"] == "scale-down delay after a scale-up"
    final = once(start + 1_000_001)
    assert final["decision"]["action"] == "scale-down", final["decision"]


class _Hook(BaseHTTPRequestHandler):
    bodies: list = []
    status = 200

    def do_POST(self):  # noqa: N802 (the standard library's name)
        length = int(self.headers["Content-Length"])
        type(self).bodies.append((self.headers["Content-Type"], orjson.loads(self.rfile.read(length))))
        self.send_response(type(self).status)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def webhook():
    handler = type("Handler", (_Hook,), {"bodies": [], "status": 200})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/hook", handler
    server.shutdown()
    server.server_close()


def test_the_webhook_gets_the_decision_posted_as_json_and_a_refusal_is_no_action(api, webhook):
    url, handler = webhook
    short_of_room(api)
    result = api.act_on_capacity(webhook=url, cooldowns=NO_WAIT)
    assert result["hook"]["acted"] is True
    ((kind, body),) = handler.bodies
    assert kind == "application/json" and body["action"] == "scale-up" and body["scale_up"][0]["pool"] == "p"
    acted_at = api.store.capacity_record().up_at_ms
    assert acted_at > 0
    handler.status = 503
    refused = api.act_on_capacity(webhook=url, cooldowns=NO_WAIT)
    assert refused["hook"] == {**refused["hook"], "acted": False, "error": "--webhook answered HTTP 503"}
    assert api.store.capacity_record().up_at_ms == acted_at  # the cooldown counts from the call that acted
    gone = api.act_on_capacity(webhook="http://127.0.0.1:9/nothing-listens", cooldowns=NO_WAIT)
    assert gone["hook"]["acted"] is False and "could not be reached" in gone["hook"]["error"]


def test_the_command_with_exec_exits_1_when_the_hook_fails_and_records_the_answer(api, sched):
    short_of_room(api)
    ok = sched("capacity", "--exec", "cat > /dev/null", "--scale-up-cooldown", "0")
    assert "Hook: acted." in ok.stdout
    failed = sched("capacity", "--exec", "exit 4", "--scale-up-cooldown", "0", ok=False)
    assert failed.exit_code == 1 and "failed: --exec exited 4" in failed.stdout
    both = sched("capacity", "--exec", "true", "--webhook", "http://x", ok=False)
    assert both.exit_code == 2 and "not both" in both.stderr
    assert api.last_capacity()["scale_up"]["add"][0]["pool"] == "p"
    held = orjson.loads(sched("capacity", "--record", "--json").stdout)
    assert held["decision"]["waiting"][0]["why"] == "scale-up cooldown"  # the default minute since it acted
    advice = orjson.loads(sched("capacity", "--record", "--json", "--scale-up-cooldown", "0").stdout)
    assert advice["decision"]["action"] == "scale-up" and "hook" not in advice  # advised, no hook called
