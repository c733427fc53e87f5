// sched dashboard, activity page: new events at the top of the table as they happen, and
// every row's time shown relative to now ("12 s ago"; the exact time is its tooltip).
//
// The page's event stream starts right after the newest event the page was rendered with
// (body[data-activity-after]), so nothing falls between the two, and the browser resumes
// it after a reconnection from the last event it got (Last-Event-ID). Only events that
// match the page's filters (type, job, node) are added; the table keeps its newest rows.
"use strict";

(() => {
  const body = document.body;
  const rows = document.getElementById("activity-rows");
  if (!rows || !window.EventSource) return;
  const ns = body.dataset.ns;
  const want = { type: body.dataset.activityType, job: body.dataset.activityJob, node: body.dataset.activityNode };
  const shown = parseInt(body.dataset.activityShown || "200", 10);
  const SUBJECT = { task: "id", job: "id", node: "name" };
  const CHANGE = ["state", "event", "availability", "status"];

  // ---------------------------------------------------------------- relative times
  function ago(ms) {
    const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
    if (s < 5) return "just now";
    if (s < 60) return s + " s ago";
    if (s < 3600) return Math.floor(s / 60) + " min ago";
    if (s < 86400) return Math.floor(s / 3600) + " h ago";
    return Math.floor(s / 86400) + " d ago";
  }

  function refreshTimes() {
    for (const cell of rows.querySelectorAll("td[data-ts]")) {
      const ts = parseInt(cell.dataset.ts, 10);
      if (ts) cell.textContent = ago(ts);
    }
  }

  // ---------------------------------------------------------------- which events, as rows
  const jobOf = (ev) => ev.type === "job" ? ev.id
    : ev.type === "task" ? (ev.job || String(ev.id).slice(0, String(ev.id).lastIndexOf("."))) : null;
  const nodesOf = (ev) => ev.type === "node" ? [ev.name] : [ev.node, ev.nominated_node].filter(Boolean);

  function matches(ev) {
    return (!want.type || ev.type === want.type) && (!want.job || jobOf(ev) === want.job)
      && (!want.node || nodesOf(ev).includes(want.node));
  }

  function link(path, id) {
    const a = document.createElement("a");
    a.href = path + "/" + encodeURIComponent(id) + "?ns=" + encodeURIComponent(ns);
    a.textContent = id;
    return a;
  }

  function cell(tr, ...children) {
    const td = document.createElement("td");
    td.append(...children);
    tr.append(td);
    return td;
  }

  function rowOf(id, ev) {
    const subjectField = SUBJECT[ev.type] || "id";
    const changeField = CHANGE.find((f) => f in ev);
    let change = changeField ? String(ev[changeField]) : "";
    if (changeField === "availability" || changeField === "status") change = changeField + " " + change;
    const skip = new Set(["type", "ts", subjectField, changeField, ev.type === "task" ? "job" : null]);
    const tr = document.createElement("tr");
    tr.dataset.event = id;
    tr.className = "fresh";
    const when = cell(tr, ago(ev.ts));
    when.className = "when";
    when.dataset.ts = String(ev.ts);
    when.title = new Date(ev.ts).toISOString().replace("T", " ").replace("Z", " UTC");
    cell(tr, String(ev.type));
    const subject = String(ev[subjectField] ?? "");
    const what = cell(tr);
    what.className = "id";
    if (ev.type === "task") {
      what.append(link("/tasks", subject));
      const job = jobOf(ev);
      if (job) {
        const of = document.createElement("span");
        of.className = "muted small";
        of.append(" of ", link("/jobs", job));
        what.append(" ", of);
      }
    } else if (ev.type === "job") what.append(link("/jobs", subject));
    else if (ev.type === "node") what.append(link("/nodes", subject));
    else what.append(subject);
    if (ev.type === "task") {
      const badge = document.createElement("span");
      badge.className = "state state-" + change;
      badge.textContent = change;
      cell(tr, badge);
    } else cell(tr, change);
    const details = cell(tr);
    details.className = "details";
    for (const [k, v] of Object.entries(ev)) {
      if (skip.has(k)) continue;
      const chip = document.createElement("span");
      chip.className = "chip";
      chip.textContent = k + "=" + (v === "" ? "-" : v);
      details.append(chip, " ");
    }
    return tr;
  }

  function add(id, ev) {
    if (!matches(ev) || (id && rows.querySelector(`tr[data-event="${CSS.escape(id)}"]`))) return;
    const empty = rows.querySelector("tr.empty");
    if (empty) empty.remove();
    rows.prepend(rowOf(id, ev));
    while (rows.children.length > shown) rows.lastElementChild.remove();
  }

  // ---------------------------------------------------------------- the event stream
  const indicator = document.getElementById("live");
  const show = (state, text) => {
    body.dataset.liveState = state;
    if (indicator) {
      indicator.textContent = text;
      indicator.className = "live live-" + state;
    }
  };
  const after = body.dataset.activityAfter;
  const source = new EventSource("/api/events?ns=" + encodeURIComponent(ns)
    + (after && after !== "0-0" ? "&after=" + encodeURIComponent(after) : ""));
  source.addEventListener("ready", () => show("connected", "live"));
  source.onmessage = (m) => {
    try {
      add(m.lastEventId, JSON.parse(m.data));
    } catch (err) {
      // not an event we understand
    }
  };
  source.onerror = () => show("reconnecting", "reconnecting");

  refreshTimes();
  setInterval(refreshTimes, 5000); // only the text changes: nothing is fetched
})();
