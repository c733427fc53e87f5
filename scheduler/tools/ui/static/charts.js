// sched dashboard: the overview's charts over time (charts.py), as small SVG lines.
//
// The samples come from /api/series (section[data-charts]): every one kept when the page
// opens (the last hour), then, every sample interval while the page is visible, only the
// newer ones. Placements per second are the difference of two samples' `placed` counters
// over their times; a gap of more than three intervals (no worker ran) breaks a line.
"use strict";

(() => {
  const section = document.querySelector("[data-charts]");
  if (!section) return;
  const SVG = "http://www.w3.org/2000/svg";
  const every = parseInt(section.dataset.every || "5000", 10);
  let kept = 720;
  let samples = [];
  let timer = null;

  const QUEUES = [["active", "active"], ["backoff", "backoff"], ["unschedulable", "unschedulable"], ["inflight", "in flight"]];

  function rates() {
    const out = [];
    for (let i = 1; i < samples.length; i++) {
      const a = samples[i - 1], b = samples[i];
      const seconds = (b.ts - a.ts) / 1000;
      out.push([b.ts, seconds > 0 ? Math.max(0, b.placed - a.placed) / seconds : 0]);
    }
    return out;
  }

  function resourcesOf() {
    const names = new Set();
    for (const s of samples) for (const name of Object.keys(s.cap || {})) names.add(name);
    const order = ["cpu", "memory", "gpu"];
    return Array.from(names).sort((a, b) => ((order.indexOf(a) + 1 || 9) - (order.indexOf(b) + 1 || 9)) || (a < b ? -1 : 1));
  }

  function series(kind) {
    if (kind === "placements") return { unit: "/s", lines: [["placements / s", rates()]] };
    if (kind === "queues") return { unit: "", lines: QUEUES.map(([key, label]) => [label, samples.map((s) => [s.ts, s[key] || 0])]) };
    return {
      unit: "%", top: 100,
      lines: resourcesOf().map((name) => [name, samples.map((s) => {
        const cap = (s.cap || {})[name] || 0;
        return [s.ts, cap > 0 ? Math.min(100, (100 * ((s.alloc || {})[name] || 0)) / cap) : 0];
      })]),
    };
  }

  // A value for people: counts whole, rates and shares with one decimal below 100.
  function number(value, unit) {
    return value >= 100 || unit === "" ? String(Math.round(value)) : value.toFixed(1).replace(/\.0$/, "");
  }

  function shown(value, unit) {
    return number(value, unit) + (unit === "%" ? " %" : unit ? " " + unit : "");
  }

  function draw(figure, kind, start, end) {
    const svg = figure.querySelector("svg");
    const legend = figure.querySelector(".chart-legend");
    const { unit, lines, top } = series(kind);
    let max = top || 1;
    if (!top) for (const [, points] of lines) for (const [, v] of points) max = Math.max(max, v);
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    legend.textContent = "";
    const x = (t) => (300 * (t - start)) / Math.max(1, end - start);
    const y = (v) => 98 - (96 * v) / max;
    lines.forEach(([label, points], n) => {
      let run = [];
      const flush = () => {
        if (run.length) {
          const line = document.createElementNS(SVG, "polyline");
          line.setAttribute("points", run.join(" "));
          line.setAttribute("class", "line line-" + n);
          line.setAttribute("vector-effect", "non-scaling-stroke");
          svg.appendChild(line);
        }
        run = [];
      };
      let last = null;
      for (const [t, v] of points) {
        if (t < start) continue;
        if (last !== null && t - last > 3 * every) flush();
        run.push(x(t).toFixed(1) + "," + y(v).toFixed(1));
        last = t;
      }
      flush();
      const key = document.createElement("span");
      key.className = "key line-" + n;
      key.dataset.series = label;
      const latest = points.length ? points[points.length - 1][1] : 0;
      key.textContent = label + " " + (unit === "%" ? shown(latest, unit) : number(latest, unit));
      legend.appendChild(key);
    });
    figure.querySelector('[data-axis="top"]').textContent = "top " + shown(max, unit);
    const minutes = Math.round((end - start) / 60000);
    figure.querySelector('[data-axis="from"]').textContent = minutes >= 1 ? "−" + minutes + " min" : "−" + Math.round((end - start) / 1000) + " s";
  }

  function render() {
    const note = section.querySelector("[data-charts-note]");
    if (note) note.hidden = samples.length >= 2;
    if (!samples.length) return;
    const end = samples[samples.length - 1].ts;
    const start = Math.max(samples[0].ts, end - kept * every);
    for (const figure of section.querySelectorAll("[data-chart]")) draw(figure, figure.dataset.chart, start, end);
    section.dataset.samples = String(samples.length);
  }

  async function load() {
    timer = null;
    const after = samples.length ? samples[samples.length - 1].ts : 0;
    try {
      const response = await fetch(section.dataset.charts + "&after=" + after, { headers: { Accept: "application/json" } });
      if (response.ok) {
        const d = await response.json();
        kept = d.kept || kept;
        samples = samples.concat(d.samples || []).slice(-(kept + 1));
        render();
      }
    } catch (err) {
      // the next turn tries again
    }
    if (document.visibilityState === "visible") timer = setTimeout(load, every);
  }

  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible" && timer === null) load();
  });
  load();
})();
