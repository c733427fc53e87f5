// sched dashboard: live updates from the namespace's event stream, and forms sent with fetch.
//
// Each event is applied to the page at once (a task row's state, node and health, a job's
// counts, a node's task count and availability, a deployment's state and counts). When events have arrived, the page's JSON route
// (body[data-live]) is fetched again, at most once a second, to set the exact counts; when
// it lists something the page does not show yet (a new job, node or task), the page's
// regions ([data-region]) are swapped for freshly rendered ones. Nothing is fetched while
// nothing happens: no timer runs without an event behind it (the one timer that does run
// only rewrites relative times, "3 min ago", from the page's own clock).
//
// A list's search and filters (form[data-listing]) are applied as they are typed: the
// query string is replaced and the regions swapped, and the JSON route followed from then
// on (body[data-live], as rendered) carries the same choices, so both list the same rows.
"use strict";

(() => {
  const body = document.body;
  const ns = body.dataset.ns;
  body.classList.add("js");
  const TERMINAL = new Set(["completed", "failed", "preempted", "lost", "stopped"]);
  const MIN_GAP_MS = 1000;

  const esc = (s) => (window.CSS && CSS.escape ? CSS.escape(s) : String(s).replace(/["\\]/g, "\\$&"));
  const all = (sel, root = document) => Array.from(root.querySelectorAll(sel));
  const jobOf = (taskId) => taskId.slice(0, taskId.lastIndexOf("."));

  function pageUrl(path, segment) {
    return path + "/" + encodeURIComponent(segment) + "?ns=" + encodeURIComponent(ns);
  }

  // ---------------------------------------------------------------- small DOM helpers
  function setState(cell, state) {
    if (!cell) return;
    let badge = cell.querySelector(".state");
    if (!badge) {
      badge = document.createElement("span");
      cell.replaceChildren(badge);
    }
    badge.className = "state state-" + state;
    badge.textContent = state;
  }

  function setNodeLink(cell, node) {
    if (!cell || !node) return;
    const link = document.createElement("a");
    link.href = pageUrl("/nodes", node);
    link.textContent = node;
    cell.replaceChildren(link);
  }

  function setBadge(el, value) {
    if (!el || el.textContent === value) return;
    el.textContent = value;
    el.className = "badge badge-" + value;
  }

  function bump(el, delta) {
    if (!el) return;
    const n = Math.max(0, (parseInt(el.textContent, 10) || 0) + delta);
    el.textContent = String(n);
    el.classList.toggle("zero", n === 0);
  }

  function setHealth(cell, health) {
    if (!cell || !health) return;
    let badge = cell.querySelector(".health");
    if (!badge) {
      badge = document.createElement("span");
      cell.prepend(badge);
      for (const dash of all(":scope > .muted", cell)) dash.remove(); // "–", or "not checked yet"
    }
    badge.className = "health health-" + health;
    badge.textContent = health;
  }

  function setAvailability(row, value) {
    setBadge(row.querySelector('[data-field="availability"]'), value);
    for (const input of all('input[name="availability"]', row)) {
      const button = input.form.querySelector("button");
      if (button) button.disabled = input.value === value;
    }
  }

  // ---------------------------------------------------------------- applying one event
  let structureChanged = false;

  function applyTask(ev) {
    const job = ev.job || jobOf(ev.id);
    const rows = all(`[data-task="${esc(ev.id)}"]`);
    const before = rows.length ? rows[0].querySelector('[data-field="state"] .state')?.textContent : undefined;
    for (const row of rows) {
      setState(row.querySelector('[data-field="state"]'), ev.state);
      if (ev.node) setNodeLink(row.querySelector('[data-field="node"]'), ev.node);
    }
    // A task this page should list but does not show yet.
    if (!rows.length && (body.dataset.jobPage === job || (ev.node && body.dataset.nodePage === ev.node))) {
      structureChanged = true;
    }
    // Job counts: move one task from its previous state to the new one.
    let from = before;
    if (from === undefined) {
      const created = ev.state === "pending" && !ev.queue && !ev.reason && !ev.nominated_node;
      from = created ? null : ev.state === "assigned" ? "pending" : ev.state === "running" ? "assigned" : undefined;
    }
    if (from !== undefined && from !== ev.state) {
      for (const row of all(`[data-job="${esc(job)}"]`)) {
        if (from) bump(row.querySelector(`[data-count="${from}"]`), -1);
        bump(row.querySelector(`[data-count="${ev.state}"]`), +1);
      }
    }
    // Node task counts: an assignment adds one; a live task that ends (it names its node) removes one.
    if (ev.node && (ev.state === "assigned" || TERMINAL.has(ev.state))) {
      for (const row of all(`[data-node="${esc(ev.node)}"]`)) {
        bump(row.querySelector('[data-field="tasks"]'), ev.state === "assigned" ? +1 : -1);
      }
    }
  }

  function applyHealth(ev) {
    for (const row of all(`[data-task="${esc(ev.id)}"]`)) setHealth(row.querySelector('[data-field="health"]'), ev.health);
  }

  // A deployment's counts, from an event (to_healthy...) or a record (to_counts.healthy...).
  const COUNTS = ["desired", "placed", "healthy", "unhealthy"];

  function flatCounts(d) {
    if (!d.to_counts) return d;
    const flat = { id: d.id, job: d.job, state: d.state };
    for (const side of ["to", "from"]) for (const c of COUNTS) flat[side + "_" + c] = d[side + "_counts"][c];
    return flat;
  }

  // Sets what the deployment's rows show; true when one shows another state (its buttons change).
  function setDeployment(d) {
    let differs = false;
    for (const row of all(`[data-deployment="${esc(d.id)}"]`)) {
      if (row.dataset.state !== d.state) differs = true;
      for (const side of ["to", "from"]) {
        for (const c of COUNTS) {
          const value = d[side + "_" + c];
          if (value === undefined) continue;
          for (const el of all(`[data-dcount="${side}_${c}"]`, row)) el.textContent = String(value);
        }
      }
      const bar = row.querySelector("[data-rollout-bar]");
      if (bar && d.to_desired !== undefined) {
        const want = Math.max(1, d.to_desired);
        const healthy = Math.min(100, (100 * d.to_healthy) / want);
        const placed = Math.max(0, Math.min(100, (100 * d.to_placed) / want) - healthy);
        bar.querySelector('[data-seg="healthy"]').style.width = healthy.toFixed(1) + "%";
        bar.querySelector('[data-seg="placed"]').style.width = placed.toFixed(1) + "%";
        const text = row.querySelector('[data-field="dprogress"]');
        if (text) text.textContent = d.to_healthy + "/" + d.to_desired;
      }
    }
    return differs;
  }

  function applyDeployment(ev) {
    const shown = all(`[data-deployment="${esc(ev.id)}"]`).length > 0;
    if (!shown || setDeployment(ev)) structureChanged = true; // a new deployment, or a new state
  }

  function applyNode(ev) {
    const rows = all(`[data-node="${esc(ev.name)}"]`);
    if (ev.event === "added" || ev.event === "removed") structureChanged = true;
    for (const row of rows) {
      if (ev.availability) setAvailability(row, ev.availability);
      if (ev.status) setBadge(row.querySelector('[data-field="status"]'), ev.status);
    }
  }

  function relevant(ev) {
    const page = body.dataset.page;
    const ofTask = ev.type === "task" || ev.type === "health";
    if (page === "task") {
      // A pending task's page also shows every node's room for it: what moves on nodes matters.
      const waiting = body.dataset.pending === "1" && (ev.type === "node" || (ev.type === "task" && ev.node));
      return (ofTask && ev.id === body.dataset.taskPage) || waiting;
    }
    if (page === "job") {
      return (ofTask || ev.type === "deployment") && (ev.job || jobOf(ev.id)) === body.dataset.jobPage;
    }
    if (page === "node") {
      return (ev.type === "node" && ev.name === body.dataset.nodePage)
        || (ofTask && (ev.node === body.dataset.nodePage || all(`[data-task="${esc(ev.id)}"]`).length > 0));
    }
    if (page === "overview") return ev.type !== "health";
    return ev.type === "task" || ev.type === "node";
  }

  function onEvent(ev) {
    if (!ev || !relevant(ev)) return;
    if (ev.type === "task") applyTask(ev);
    else if (ev.type === "node") applyNode(ev);
    else if (ev.type === "health") applyHealth(ev);
    else if (ev.type === "deployment") applyDeployment(ev);
    schedule();
  }

  // ---------------------------------------------------------------- refetching, at most once a second
  let timer = null;
  let lastFetch = 0;
  let sample = null; // {placed, now} of the last reading, for placements per second

  function schedule(delay) {
    if (timer) return;
    const wait = delay !== undefined ? delay : Math.max(0, lastFetch + MIN_GAP_MS - Date.now());
    timer = setTimeout(refresh, wait);
  }

  async function refresh() {
    timer = null;
    lastFetch = Date.now();
    try {
      if (structureChanged) {
        structureChanged = false;
        await swapRegions();
      }
      const response = await fetch(body.dataset.live, { headers: { Accept: "application/json" } });
      if (!response.ok) return;
      const d = await response.json();
      if (applyData(d)) await swapRegions();
    } catch (err) {
      // the next event tries again
    }
  }

  // Returns true when the page lacks something the data lists (or shows something it no longer does).
  function applyData(d) {
    let differs = false;
    if (d.queues) {
      for (const [name, n] of Object.entries(d.queues)) {
        for (const el of all(`[data-queue="${esc(name)}"]`)) el.textContent = String(n);
      }
    }
    if (d.placed !== undefined) applyRate(d.placed, d.now_ms);
    if (d.nodes) {
      setStat("nodes", d.total !== undefined ? d.total : d.nodes.length); // a list narrowed by a search says its total
      setStat("ready", d.nodes.filter((n) => n.status === "ready").length);
    }
    if (d.jobs) setStat("jobs", d.total !== undefined ? d.total : d.jobs.length);
    const nodes = d.nodes || (d.node ? [d.node] : null);
    if (nodes) differs = applyNodes(nodes) || differs;
    const jobs = d.jobs || (d.job ? [d.job] : null);
    if (jobs) differs = applyJobs(jobs) || differs;
    if (d.tasks) differs = applyTasks(d.tasks) || differs;
    if (d.deployment !== undefined) differs = applyJobDeployment(d.deployment, d.versions) || differs;
    if (d.deployments) differs = applyDeployments(d.deployments) || differs;
    if (d.task) differs = stampOf(d.task, d.places) !== body.dataset.stamp || differs;
    return differs;
  }

  function setStat(name, value) {
    for (const el of all(`[data-stat="${name}"]`)) el.textContent = String(value);
  }

  function listed(attr, region) {
    const root = region ? document.querySelector(`[data-region="${region}"]`) : null;
    return root ? new Set(all(`[${attr}]`, root).map((el) => el.getAttribute(attr))) : null;
  }

  function sameSet(shown, ids) {
    if (!shown) return true;
    if (shown.size !== ids.length) return false;
    return ids.every((id) => shown.has(id));
  }

  function applyNodes(nodes) {
    for (const n of nodes) {
      for (const row of all(`[data-node="${esc(n.name)}"]`)) {
        const tasks = row.querySelector('[data-field="tasks"]');
        if (tasks) tasks.textContent = String(n.tasks);
        setBadge(row.querySelector('[data-field="status"]'), n.status);
        setAvailability(row, n.availability);
        const meaning = row.querySelector('[data-field="meaning"]');
        if (meaning && n.meaning) {
          meaning.textContent = n.meaning;
          meaning.classList.toggle("node-blocked", n.status === "down" || n.availability !== "active");
        }
        for (const u of n.usage) {
          const bar = row.querySelector(`[data-resource="${esc(u.resource)}"]`);
          if (!bar) continue;
          const fill = bar.querySelector(".bar-fill");
          fill.style.width = u.pct + "%";
          fill.className = "bar-fill level-" + u.level;
          bar.querySelector(".bar-text").textContent = u.text;
        }
      }
    }
    const limit = parseInt(body.dataset.limit || "0", 10) || nodes.length;
    return !sameSet(listed("data-node", "nodes"), nodes.slice(0, limit).map((n) => n.name));
  }

  function applyJobs(jobs) {
    let differs = false;
    for (const j of jobs) {
      for (const row of all(`[data-job="${esc(j.id)}"]`)) {
        const status = row.querySelector('[data-field="status"]');
        if (status && status.textContent.trim() !== j.phase) differs = true; // what it shows, and its buttons
        for (const [state, n] of Object.entries(j.tasks)) {
          const el = row.querySelector(`[data-count="${esc(state)}"]`);
          if (el) {
            el.textContent = String(n);
            el.classList.toggle("zero", n === 0);
          }
        }
      }
    }
    return !sameSet(listed("data-job", "jobs"), jobs.map((j) => j.id)) || differs;
  }

  // The job page: its latest deployment and its versions, as the page shows them?
  function applyJobDeployment(deployment, versions) {
    const card = document.querySelector("[data-deployment]");
    let differs = deployment ? !card || card.dataset.deployment !== deployment.id : !!card;
    if (deployment && setDeployment(flatCounts(deployment))) differs = true;
    const history = document.querySelector("[data-versions]");
    const ids = (versions || []).map((v) => v.version).join(",");
    return differs || (history ? history.dataset.versions !== ids : (versions || []).length > 1);
  }

  function applyDeployments(deployments) {
    let differs = false;
    for (const d of deployments) differs = setDeployment(flatCounts(d)) || differs;
    return !sameSet(listed("data-deployment", "deployments"), deployments.map((d) => d.id)) || differs;
  }

  function applyTasks(tasks) {
    for (const t of tasks) {
      for (const row of all(`[data-task="${esc(t.id)}"]`)) {
        setState(row.querySelector('[data-field="state"]'), t.state);
        if (t.node) setNodeLink(row.querySelector('[data-field="node"]'), t.node);
        // An ended task's health is history: the list shows only why it failed, if it did.
        if (!TERMINAL.has(t.state) || t.health === "unhealthy") setHealth(row.querySelector('[data-field="health"]'), t.health);
      }
    }
    const listsTasks = body.dataset.page === "job" || body.dataset.page === "node";
    const root = listsTasks ? document.querySelector('[data-region="tasks"] table.tasks') : null;
    if (!root) return false;
    const shown = new Set(all("[data-task]", root).map((el) => el.getAttribute("data-task")));
    return !sameSet(shown, tasks.map((t) => t.id));
  }

  function stampOf(t, places) {
    return [t.state, t.node || "", t.attempts, t.assigned_ms, t.started_ms, t.ended_ms,
      places ? places.fits : "", t.health || ""].join("|");
  }

  function applyRate(placed, now) {
    setStat("placed", placed);
    const rateEl = document.querySelector('[data-stat="rate"]');
    if (!rateEl) return;
    if (!sample && rateEl.dataset.placed) sample = { placed: +rateEl.dataset.placed, now: +rateEl.dataset.now };
    if (sample && now > sample.now) {
      const rate = (placed - sample.placed) / ((now - sample.now) / 1000);
      rateEl.textContent = rate >= 10 ? String(Math.round(rate)) : rate.toFixed(1);
      // While the counter moves, read it once more a second later, so the rate falls back to 0.
      if (placed !== sample.placed) schedule(MIN_GAP_MS);
    }
    sample = { placed, now };
  }

  // ---------------------------------------------------------------- swapping rendered regions
  async function swapRegions() {
    const response = await fetch(location.href, { headers: { Accept: "text/html" } });
    if (!response.ok) return;
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
    for (const region of all("[data-region]")) {
      if (region.contains(document.activeElement) && ["INPUT", "SELECT"].includes(document.activeElement.tagName)) {
        structureChanged = true; // someone is typing here: swap on a later event
        continue;
      }
      const next = fresh.querySelector(`[data-region="${esc(region.dataset.region)}"]`);
      if (next) region.replaceWith(document.adoptNode(next));
    }
    if (fresh.body.dataset.stamp !== undefined) body.dataset.stamp = fresh.body.dataset.stamp;
    if (fresh.body.dataset.live) body.dataset.live = fresh.body.dataset.live;
    if (fresh.body.dataset.pending !== undefined) body.dataset.pending = fresh.body.dataset.pending;
    bindForms();
    showTimes();
  }

  // ---------------------------------------------------------------- relative times
  // The same words as templates.relative; the absolute time stays in the title (hover).
  function relative(ms, now) {
    const seconds = (now - ms) / 1000;
    if (Math.abs(seconds) < 5) return "just now";
    const size = Math.abs(seconds);
    let words = "";
    for (const [unit, length] of [["d", 86400], ["h", 3600], ["min", 60], ["s", 1]]) {
      if (size >= length) {
        words = Math.floor(size / length) + " " + unit;
        break;
      }
    }
    return seconds > 0 ? words + " ago" : "in " + words;
  }

  function showTimes() {
    const now = Date.now();
    for (const el of all("time[data-ms]")) el.textContent = relative(+el.dataset.ms, now);
  }

  // ---------------------------------------------------------------- search, filters, sorting
  let typing = null;

  function applyListing(form) {
    const params = new URLSearchParams();
    for (const [name, value] of new FormData(form)) if (value) params.set(name, value);
    const next = location.pathname + "?" + params.toString();
    if (next === location.pathname + location.search) return;
    history.replaceState(null, "", next);
    swapRegions();
  }

  function bindListings() {
    for (const form of all("form[data-listing]")) {
      form.addEventListener("input", (e) => {
        if (e.target.type !== "search") return;
        clearTimeout(typing);
        typing = setTimeout(() => applyListing(form), 250);
      });
      form.addEventListener("change", (e) => {
        if (e.target.tagName === "SELECT") applyListing(form);
      });
      form.addEventListener("submit", (e) => {
        e.preventDefault();
        clearTimeout(typing);
        applyListing(form);
      });
    }
  }

  // ---------------------------------------------------------------- the event stream
  function connect() {
    if (!body.dataset.live || !window.EventSource) return;
    const indicator = document.getElementById("live");
    const show = (state, text) => {
      body.dataset.liveState = state;
      if (indicator) {
        indicator.textContent = text;
        indicator.className = "live live-" + state;
      }
    };
    const source = new EventSource("/api/events?ns=" + encodeURIComponent(ns));
    source.addEventListener("ready", () => {
      show("connected", "live");
      schedule(0); // catch up with anything that changed before the subscription
    });
    source.onmessage = (m) => {
      try {
        onEvent(JSON.parse(m.data));
      } catch (err) {
        // not an event we understand
      }
    };
    source.onerror = () => show("reconnecting", "reconnecting");
  }

  // ---------------------------------------------------------------- forms and the namespace chooser
  function flash(text, ok) {
    const el = document.getElementById("flash");
    if (!el) return;
    el.textContent = text;
    el.className = "flash " + (ok ? "flash-ok" : "flash-error");
    el.hidden = false;
  }

  function bindForms() {
    for (const form of all("form[data-api]")) {
      if (form.dataset.bound) continue;
      form.dataset.bound = "1";
      form.addEventListener("submit", async (e) => {
        e.preventDefault();
        const button = e.submitter || form.querySelector("button");
        if (button && button.dataset.confirm && !window.confirm(button.dataset.confirm)) return;
        try {
          const response = await fetch(form.action, {
            method: "POST",
            headers: { Accept: "application/json", "Content-Type": "application/x-www-form-urlencoded" },
            body: new URLSearchParams(new FormData(form)),
          });
          const d = await response.json();
          flash(response.ok ? d.message : d.error, response.ok);
          structureChanged = true;
          schedule();
        } catch (err) {
          flash("The request failed: " + err, false);
        }
      });
    }
  }

  const chooser = document.getElementById("ns-choice");
  if (chooser) chooser.addEventListener("change", () => chooser.form.submit());
  bindForms();
  bindListings();
  showTimes();
  setInterval(showTimes, 15000);
  connect();
})();
