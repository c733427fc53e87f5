"""Render docs/img/dashboard.png: the dashboard's overview of a small demo-like cluster.

Starts a private redis-server in a temporary folder, registers six nodes in three
zones, serves the dashboard on a free loopback port and opens the overview in headless
Chromium (Debian's /usr/bin/chromium). Then, with the page open, a scheduler worker runs
while a few jobs are submitted one after another and some placed tasks are started, so
that the page shows them arriving live (and a placement rate), and takes the screenshot.
Two of web's 8 tasks wait (6 nodes offer host port 8080) and train waits for 2 gpus that
no node has, so the job and task pages have something to say about why. The overview's
charts are drawn from samples of that run taken every 250 ms (the workers take one every
5 s, too sparse for a run of a few seconds).

With ``--deployment``, api is then rolled forward twice, as its ``update`` block says:
version 2 to the end, version 3 half way, with its placed tasks started and marked
healthy as their agents would (there are none here); the screenshot is taken half way.

    .venv/bin/python scripts/dashboard_screenshot.py [--out docs/img/dashboard.png] [--page /jobs/web]
    .venv/bin/python scripts/dashboard_screenshot.py --deployment --page /jobs/api --out docs/img/dashboard-deployment.png
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from playwright.sync_api import sync_playwright  # noqa: E402

from scheduler.control import deployer, reconcile  # noqa: E402
from scheduler.model import make_node, parse_job  # noqa: E402
from scheduler.state.app import App  # noqa: E402
from scheduler.state.embedded import start_server  # noqa: E402
from scheduler.tools.web import Background  # noqa: E402
from workers.scheduler_worker import SchedulerWorker, WorkerConfig  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

NODES = [
    ("eu-a1", "4", "8GiB", None, "eu-a"),
    ("eu-a2", "4", "8GiB", None, "eu-a"),
    ("eu-b1", "8", "16GiB", None, "eu-b"),
    ("eu-b2", "8", "16GiB", "1", "eu-b"),
    ("us-c1", "2", "4GiB", None, "us-c"),
    ("us-c2", "2", "4GiB", None, "us-c"),
]
JOBS = [
    {"id": "web", "type": "service", "replicas": 8, "priority": 60, "resources": {"cpu": 0.5, "memory": "512MiB"},
     "ports": [8080], "preferences": [{"spread": "node.labels.zone"}]},
    {"id": "api", "type": "service", "replicas": 4, "priority": 70, "resources": {"cpu": 1, "memory": "1GiB"},
     "preferences": [{"spread": "node.labels.zone"}], "run": {"command": ["api-server", "--port", "9000"]},
     "health": {"http": {"port": 9000, "path": "/healthz"}, "interval": 2},
     "update": {"max_parallel": 1, "min_healthy_time": 0.5, "auto_revert": True}},
    {"id": "etl", "type": "batch", "replicas": 10, "strategy": "binpack",
     "resources": {"cpu": 0.75, "memory": "768MiB"}},
    {"id": "log-agent", "type": "global", "resources": {"cpu": 0.1, "memory": "64MiB"},
     "constraints": ["node.labels.zone!=us-c"]},
    {"id": "train", "type": "batch", "replicas": 2, "resources": {"cpu": 4, "memory": "8GiB", "gpu": 2}},
]


def add_nodes(app: App) -> None:
    for name, cpu, memory, gpu, zone in NODES:
        app.store.put_node(make_node(name, cpu=cpu, memory=memory, resources={"gpu": gpu} if gpu else None,
                                     labels=[f"zone={zone}"]))


def submit_jobs(app: App, pause_s: float) -> None:
    for raw in JOBS:
        reconcile.submit(app.store, parse_job(raw))
        time.sleep(pause_s)
        start_some(app)


def start_some(app: App, share: float = 0.6) -> None:
    """Mark part of the placed tasks running, as their agents would."""
    tasks = [t for t in app.store.tasks(app.store.all_task_ids()) if t.state == "assigned"]
    for task in tasks[: int(len(tasks) * share)]:
        app.store.start_task(task.id, task.node)


def agents_report(app: App) -> None:
    """Start the placed tasks and mark the running ones healthy, as their agents would."""
    for task in app.store.tasks(app.store.all_task_ids()):
        if task.state == "assigned":
            app.store.start_task(task.id, task.node)
        if task.job == "api" and app.store.get_task(task.id).state == "running" and task.health != "healthy":
            app.store.set_task_health(task.id, task.node, "healthy", "GET /healthz answered 200")


def roll_api(app: App, changes: dict, healthy_new: int) -> None:
    """Submit a new version of api and advance its deployment until ``healthy_new`` of its
    tasks count as healthy (every one: to the end)."""
    spec = {**next(j for j in JOBS if j["id"] == "api"), **changes}
    deployment = reconcile.submit(app.store, parse_job(spec))["deployment"]
    while True:
        state = deployer.advance(app.store, deployment)
        record = app.store.get_deployment(deployment)
        if state != "running" or record["to_counts"]["healthy"] >= healthy_new:
            return
        SchedulerWorker(app, WorkerConfig(until_idle=True)).run()
        agents_report(app)
        time.sleep(0.3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "img" / "dashboard.png"))
    parser.add_argument("--page", default="/", help="the page to render (default: the overview)")
    parser.add_argument("--width", type=int, default=1360)
    parser.add_argument("--deployment", action="store_true", help="roll api forward twice (see above)")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="sched-shot-"))
    redis_process = start_server(folder, folder / "redis.sock", daemonize=False)
    try:
        url_of_redis = f"unix://{folder / 'redis.sock'}"
        app = App(redis_url=url_of_redis, namespace="demo")
        add_nodes(app)
        worker = SchedulerWorker(App(redis_url=url_of_redis, namespace="demo"), WorkerConfig(batch_size=4))
        with Background(app) as url, sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": args.width, "height": 900}, device_scale_factor=1)
            # A job's or task's page exists only once the job is submitted: it is opened after the run.
            early = page.goto(f"{url}{args.page}?ns=demo").status == 200
            if early:
                page.wait_for_selector("body[data-live-state=connected]")
            placing = threading.Thread(target=worker.run, name="worker")
            sampling = threading.Event()

            def sample():
                sampler = App(redis_url=url_of_redis, namespace="demo")
                while not sampling.wait(0.25):
                    capacity: dict[str, int] = {}
                    for node in sampler.store.nodes():
                        for name, amount in node.capacity.items():
                            capacity[name] = capacity.get(name, 0) + amount
                    sampler.store.sample(capacity, every_ms=200)

            sampler = threading.Thread(target=sample, name="sampler")
            sampler.start()
            placing.start()
            try:
                time.sleep(1.0)
                submit_jobs(app, pause_s=0.8)
                time.sleep(1.0)
            finally:
                worker.stop()
                placing.join()
                sampling.set()
                sampler.join()
            start_some(app)
            if args.deployment:
                agents_report(app)
                roll_api(app, {"run": {"command": ["api-server", "--port", "9000", "--workers", "4"]}}, 4)
                roll_api(app, {"run": {"command": ["api-server", "--port", "9000", "--workers", "8"]},
                               "resources": {"cpu": 1, "memory": "1536MiB"}}, 2)
            if not early:
                page.goto(f"{url}{args.page}?ns=demo")
                page.wait_for_selector("body[data-live-state=connected]")
            time.sleep(1.2)  # the page applies the events and refetches its counts (at most once a second)
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=args.out, full_page=True)
            browser.close()
        print(f"wrote {args.out}")
    finally:
        redis_process.terminate()
        redis_process.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
