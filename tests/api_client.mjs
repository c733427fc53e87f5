// A client of the HTTP API that is not our Python code: Node's built-in fetch, with
// the token in SCHED_TOKEN. It submits a job that prints a line and sleeps, follows
// the job's task events (server-sent events) until its task runs, waits for it with
// the wait route too, reads its logs until the line is there, stops the job, and
// prints what it saw as one JSON object. Any unexpected answer ends it with exit 1.
//   node api_client.mjs BASE_URL JOB_ID
const [base, job] = process.argv.slice(2);
const auth = { authorization: `Bearer ${process.env.SCHED_TOKEN}` };
const seen = {};

async function call(method, path, body) {
  const response = await fetch(base + path, {
    method,
    headers: body === undefined ? auth : { ...auth, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const answer = await response.json();
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${answer.detail}`);
  return [response.status, answer];
}

// The task's events as server-sent events, from the start of the stream, until it runs.
async function untilRunning(timeoutMs) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), timeoutMs);
  const response = await fetch(`${base}/v1/events?since=start&type=task&job=${job}`,
                               { headers: auth, signal: controller.signal });
  if (response.headers.get("content-type").split(";")[0] !== "text/event-stream") throw new Error("not a stream");
  const decoder = new TextDecoder();
  let buffer = "";
  const states = [];
  try {
    for await (const chunk of response.body) {
      buffer += decoder.decode(chunk, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const message = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const fields = Object.fromEntries(message.split("\n").filter((l) => !l.startsWith(":"))
          .map((l) => [l.slice(0, l.indexOf(":")), l.slice(l.indexOf(":") + 2)]));
        if (fields.event === "ready" || fields.data === undefined) continue;
        const event = JSON.parse(fields.data);
        states.push(event.state);
        if (event.state === "running") {
          seen.running_event_id = fields.id;
          return states;
        }
      }
    }
  } finally {
    clearTimeout(timer);
    controller.abort();
  }
  throw new Error(`the stream ended before the task ran: ${states}`);
}

try {
  const refused = await fetch(`${base}/v1/jobs`);
  seen.without_token = [refused.status, refused.headers.get("content-type"), (await refused.json()).title];
  const [status, submitted] = await call("POST", "/v1/jobs", {
    id: job, resources: { cpu: 0.1, memory: "32MiB" },
    run: { command: ["sh", "-c", "echo hello from node; sleep 60"] },
  });
  seen.submitted = [status, submitted.id, submitted.tasks];
  seen.states = await untilRunning(60_000);
  const [, waited] = await call("GET", `/v1/jobs/${job}/wait?state=running&timeout=30`);
  seen.waited = [waited.reached, waited.tasks.map((t) => [t.id, t.state, t.node])];
  const deadline = Date.now() + 30_000;
  let logs;
  do {
    [, logs] = await call("GET", `/v1/tasks/${job}.0/logs`);
    if (logs.stdout.includes("hello from node")) break;
    await new Promise((resolve) => setTimeout(resolve, 200));
  } while (Date.now() < deadline);
  seen.stdout = logs.stdout;
  const [, stopped] = await call("POST", `/v1/jobs/${job}/stop`);
  seen.stopped = stopped.stopped;
  const [, shown] = await call("GET", `/v1/jobs/${job}`);
  seen.status = shown.status;
  seen.history = shown.history.map((entry) => [entry.action, entry.by]);
  console.log(JSON.stringify(seen));
} catch (error) {
  console.error(error.message, JSON.stringify(seen));
  process.exit(1);
}
