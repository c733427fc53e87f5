"""What a request of the HTTP API costs Redis, against the suite's real redis-server: the
round trips of one job, one task, a page of jobs and the nodes, counted on the
connection (each write of commands to Redis is one), constant whatever the job or the
namespace holds; and the tokens a server keeps (no read for a kept token, a revocation
heard at once by every server, a lost subscription forgetting them all, a token deleted
by hand believed no longer than the bound)."""

from __future__ import annotations

import redis
from starlette.testclient import TestClient

from scheduler.client import Client
from scheduler.state.api_tokens import TOKEN_PREFIX, ApiTokens, digest
from scheduler.state.app import App
from scheduler.tools.api.app import create_api

from api_harness import tokens  # noqa: F401 (a fixture)
from api_harness import Api

ONE = {"id": "one", "type": "batch", "resources": {"cpu": "10m", "memory": "1Mi"}}


def counting_app(redis_url: str, namespace: str) -> tuple[App, list[int]]:
    """An App whose client counts its round trips: each write of commands on any of its
    connections (a command, a pipeline, a script call) is one."""
    sent = [0]
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    base = client.connection_pool.connection_class

    class Counting(base):
        def send_packed_command(self, command, check_health=True):
            sent[0] += 1
            return super().send_packed_command(command, check_health)

    client.connection_pool.connection_class = Counting
    return App(redis_url=redis_url, namespace=namespace, client=client), sent


def round_trips(sent: list[int], call) -> int:
    before = sent[0]
    call()
    return sent[0] - before


def counting_loop(web, sent: list[int]) -> None:
    """Count the round trips the API makes on its event loop's connection too."""
    connection = web.state.loop_redis
    execute = connection.execute

    async def counted(commands):
        sent[0] += 1
        return await execute(commands)

    connection.execute = counted


def test_a_job_is_read_in_two_round_trips_whatever_it_holds(app, redis_url):
    counted, sent = counting_app(redis_url, app.keys.namespace)
    sched = Client(app=counted)
    sched.add_node("n1", cpu=4, memory="8GiB")  # a sysbatch job has a task per node
    sched.submit(ONE)
    sched.submit({**ONE, "id": "many", "replicas": 1500})  # more tasks than a task_states.lua call takes
    sched.submit({**ONE, "id": "nodes", "type": "sysbatch"})
    sched.scale("one", 0)
    for job_id in ("one", "many", "nodes"):
        assert round_trips(sent, lambda: sched.job(job_id)) == 2, job_id
        assert round_trips(sent, lambda: sched.job(job_id, history=True)) == 2, job_id
    record = sched.job("many", history=True)
    assert record["status"] == "running" and record["history"][0]["action"] == "submit"
    assert sched.job("one")["status"] == "complete"  # scaled to none: its one task stopped


def test_the_api_reads_a_job_a_task_a_page_and_the_nodes_in_constant_round_trips(app, redis_url, tokens):
    counted, sent = counting_app(redis_url, app.keys.namespace)
    sched = Client(app=counted)
    sched.add_node("n1", cpu=4, memory="8GiB")
    sched.submit_many([{**ONE, "id": f"job-{i:03d}"} for i in range(250)])
    sched.submit({**ONE, "id": "many", "replicas": 1500})
    web = create_api(counted)
    counting_loop(web, sent)
    with TestClient(web) as http:
        api = Api(http, tokens("viewer"))
        assert api("GET", "/v1/token").status_code == 200  # the token read once, then kept
        for job_id in ("job-000", "many"):
            assert round_trips(sent, lambda: api("GET", f"/v1/jobs/{job_id}")) == 2, job_id
        answer = api("GET", "/v1/jobs/many")
        assert answer.json()["status"] == "running" and int(answer.headers["x-sched-index"]) > 0
        assert round_trips(sent, lambda: api("GET", "/v1/tasks/many.1499")) == 1
        for start in ("job-000", "job-150"):  # 100 of 251 jobs, read from the index
            trips = round_trips(sent, lambda: api("GET", f"/v1/jobs?per_page=100&next_token={start}"))
            assert trips == 3, start
        first = api("GET", "/v1/nodes")
        assert round_trips(sent, lambda: api("GET", "/v1/nodes")) == 1  # no node changed: the kept list
        sched.pause("n1")
        assert round_trips(sent, lambda: api("GET", "/v1/nodes")) > 1  # read again
        after = api("GET", "/v1/nodes")
        assert [n["availability"] for n in first.json()] == ["active"]
        assert [n["availability"] for n in after.json()] == ["pause"]
        assert int(after.headers["x-sched-index"]) > int(first.headers["x-sched-index"])


def test_a_revocation_ends_a_kept_token_at_once_on_every_server(app, tokens):
    token = tokens("viewer")
    with TestClient(create_api(app)) as one, TestClient(create_api(app)) as two:
        servers = [Api(one, token), Api(two, token)]
        for api in servers:
            assert api("GET", "/v1/nodes").status_code == 200  # checked, and kept
        ApiTokens(app.client).revoke(tokens.names[-1])
        for api in servers:
            assert api("GET", "/v1/nodes").status_code == 401


def test_a_server_that_lost_its_subscription_forgets_the_tokens_it_kept(app, tokens):
    token = tokens("viewer")
    web = create_api(app)
    with TestClient(web) as http:
        api = Api(http, token)
        assert api("GET", "/v1/nodes").status_code == 200
        web.state.guard.checked._revocations.connection.disconnect()  # as a Redis restart would
        app.client.delete(TOKEN_PREFIX + digest(token))  # gone without a word on the channel
        assert api("GET", "/v1/nodes").status_code == 401


def test_a_token_deleted_by_hand_is_believed_no_longer_than_the_bound(app, tokens):
    token = tokens("viewer")
    web = create_api(app)
    now = [1000.0]
    checked = web.state.guard.checked
    checked.clock = lambda: now[0]
    with TestClient(web) as http:
        api = Api(http, token)
        assert api("GET", "/v1/nodes").status_code == 200
        app.client.delete(TOKEN_PREFIX + digest(token))  # no revocation published
        now[0] += checked.kept_s - 0.1
        assert api("GET", "/v1/nodes").status_code == 200  # kept
        now[0] += 0.2
        assert api("GET", "/v1/nodes").status_code == 401  # read again


# ----------------------------------------------------------------------------- reads on the event loop
def served_on_threads(web) -> list[int]:
    """Count the requests the API hands to its request threads."""
    handed = [0]
    threads = web.state.threads
    submit = threads.submit

    def counted(*args, **kwargs):
        handed[0] += 1
        return submit(*args, **kwargs)

    threads.submit = counted
    return handed


def test_reads_on_the_event_loop_answer_as_those_on_a_thread(app, tokens):
    sched = Client(app=app)
    sched.add_node("n1", cpu=4, memory="8GiB", labels={"zone": "a"})
    sched.submit_many([{**ONE, "id": f"job-{i:03d}"} for i in range(30)])
    sched.submit({**ONE, "id": "web", "type": "service", "replicas": 3})
    sched.stop("job-007")
    token = tokens("viewer")
    paths = ["/v1/token", "/v1/jobs/web", "/v1/jobs/job-007", "/v1/nodes", "/v1/jobs?per_page=10&next_token=job-005",
             '/v1/jobs?per_page=5&filter=status%20%3D%3D%20%22stopped%22']
    answers = []
    for on_loop in (True, False):
        web = create_api(app)
        if not on_loop:
            web.state.loop_redis = None
        handed = served_on_threads(web)
        with TestClient(web) as http:
            api = Api(http, token)
            api("GET", "/v1/token")  # the token read (on a thread) and kept
            handed[0] = 0
            answers.append([(r.status_code, r.json(), r.headers.get("x-sched-index"), r.headers.get("x-sched-next-token"))
                            for r in (api("GET", path) for path in paths)])
        assert handed[0] == (0 if on_loop else len(paths)), on_loop
    assert answers[0] == answers[1]
    assert answers[0][2][1]["status"] == "stopped" and answers[0][5][1][0]["id"] == "job-007"


def test_a_read_the_loop_cannot_finish_is_done_on_a_thread(app, tokens):
    sched = Client(app=app)
    sched.submit(ONE)
    sched.submit({**ONE, "id": "nightly", "periodic": {"cron": "0 2 * * *"}})
    web = create_api(app)
    handed = served_on_threads(web)
    with TestClient(web) as http:
        api = Api(http, tokens("viewer"))
        api("GET", "/v1/token")
        handed[0] = 0
        assert api("GET", "/v1/jobs/nightly").json()["next_launch"]  # a launcher's launches: blocking reads
        assert handed[0] == 1
        app.client.script_flush()  # Redis lost its scripts: the loop's call is refused, the thread's reloads
        assert api("GET", "/v1/jobs/one").json()["status"] == "running"
        assert handed[0] == 2
        assert api("GET", "/v1/jobs/one").json()["status"] == "running"  # on the loop again
        assert handed[0] == 2
        web.state.loop_redis.address = {"path": "/nonexistent/redis.sock"}  # a loop that cannot connect
        web.state.loop_redis._protocol.close()
        assert api("GET", "/v1/jobs/one").status_code == 200
        assert handed[0] == 3


def test_the_kept_node_list_shows_a_drain_in_progress_as_it_is(app, tokens):
    from budget_helpers import add_nodes, running_job

    add_nodes(app, ["n3"], cpu=3)
    add_nodes(app, ["n1"], cpu=1)
    running_job(app, "web", replicas=4, budget={"max_unavailable": 1})  # n3 drains one task at a time
    add_nodes(app, ["n2"], cpu=4)
    with TestClient(create_api(app)) as http:
        api = Api(http, tokens("operator"))
        assert all("drain" not in node for node in api("GET", "/v1/nodes").json())  # now kept
        api("POST", "/v1/nodes/n3/drain", json={"deadline": "10m"})
        listed = {node["name"]: node for node in api("GET", "/v1/nodes").json()}
        assert listed["n3"]["availability"] == "drain" and listed["n3"]["drain"]["state"] == "draining"
        seq = app.client.get(app.keys.node_seq)
        app.store.set_drain("n3", ("draining",), "", {"message": "still at it"})  # the drain moves, the node not
        assert app.client.get(app.keys.node_seq) == seq
        listed = {node["name"]: node for node in api("GET", "/v1/nodes").json()}
        assert listed["n3"]["drain"]["message"] == "still at it" and "drain" not in listed["n2"]
