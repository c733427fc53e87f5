"""The report as a folder: ``report.json``, PNG plots made with matplotlib, and an
``index.html`` that shows them with the figures' tables. Several reports (``--compare``)
share each plot, one line or bar per setting. docs/simulate.md explains each figure."""

from __future__ import annotations

import html
from pathlib import Path

import orjson


def _plt():
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def _lines(plt, path: Path, reports: list[dict], names: list[str], title: str, ylabel: str, series_key="series",
           percent=True) -> None:
    fig, ax = plt.subplots(figsize=(9, 3.6))
    for report in reports:
        series = report[series_key]
        t = [x / 3600 for x in series["t"]]
        for name in names:
            if name in series:
                label = name.split(".", 1)[-1]
                if len(reports) > 1:
                    label = f"{report['settings']}: {label}"
                values = [v * 100 for v in series[name]] if percent else series[name]
                ax.step(t, values, where="post", label=label, linewidth=1.2)
    ax.set_title(title)
    ax.set_xlabel("hours into the trace")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _delays(plt, path: Path, reports: list[dict]) -> None:
    fig, ax = plt.subplots(figsize=(9, 3.6))
    priorities = sorted({int(p) for r in reports for p in r["queueing_delay_s"]}, reverse=True)
    width = 0.8 / max(1, 3 * len(reports))
    for ri, report in enumerate(reports):
        for qi, q in enumerate(("p50", "p95", "p99")):
            offset = (ri * 3 + qi) * width
            values = [report["queueing_delay_s"].get(str(p), {}).get(q, 0) for p in priorities]
            label = q if len(reports) == 1 else f"{report['settings']}: {q}"
            ax.bar([i + offset for i in range(len(priorities))], values, width, label=label)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(priorities))], [str(p) for p in priorities])
    ax.set_title("queueing delay per priority")
    ax.set_xlabel("priority")
    ax.set_ylabel("seconds waiting")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _compaction(plt, path: Path, reports: list[dict]) -> None:
    fig, ax = plt.subplots(figsize=(9, 3.2))
    labels = [r["settings"] for r in reports]
    ax.bar([i - 0.2 for i in range(len(reports))], [r.get("nodes_needed") or 0 for r in reports], 0.4,
           label="nodes needed")
    ax.bar([i + 0.2 for i in range(len(reports))], [r.get("lower_bound") or 0 for r in reports], 0.4,
           label="lower bound")
    ax.set_xticks(range(len(reports)), labels, fontsize=8)
    ax.set_title("compaction: the fewest nodes that place the trace")
    ax.set_ylabel("nodes")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _table(headers: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def write(out: Path, reports: list[dict]) -> Path:
    """Write the folder; returns the page's path."""
    plt = _plt()
    out.mkdir(parents=True, exist_ok=True)
    document = reports[0] if len(reports) == 1 else {"runs": reports}
    (out / "report.json").write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2))
    resources = list(reports[0]["utilisation"])
    _lines(plt, out / "utilisation.png", reports, [f"utilisation.{r}" for r in resources],
           "allocated share of the ready nodes' capacity", "%")
    _lines(plt, out / "pending.png", reports, ["pending"], "tasks waiting to be placed", "tasks", percent=False)
    _lines(plt, out / "stranded.png", reports, [f"stranded.{r}" for r in resources],
           "stranded: free on nodes where another resource is exhausted", "% of capacity")
    _delays(plt, out / "delay.png", reports)
    tenants = sorted({t for r in reports for t in r["tenants"]})
    _lines(plt, out / "tenants.png", reports, tenants, "tenants' dominant share", "% of the cluster",
           series_key="tenant_series")
    figures = ["utilisation", "pending", "stranded", "delay", "tenants"]
    if any("nodes_needed" in r for r in reports):
        _compaction(plt, out / "compaction.png", reports)
        figures.append("compaction")
    names = [r["settings"] for r in reports]
    summary = _table(["", *names], [
        ["tasks", *(r["tasks"] for r in reports)],
        ["placed", *(r["placed"] for r in reports)],
        ["pending at the end", *(r["pending_at_end"] for r in reports)],
        *[[f"utilisation {res} (mean, %)", *(round(r["utilisation"][res] * 100, 1) for r in reports)]
          for res in resources],
        *[[f"utilisation {res} (mean over the arrival window, %)",
           *(round(r["utilisation_arrival_window"][res] * 100, 1) for r in reports)] for res in resources],
        *[[f"stranded {res} (mean, %)", *(round(r["stranded"][res] * 100, 1) for r in reports)] for res in resources],
        ["preemptions", *(r["preemptions"] for r in reports)],
        ["longest wait (s)", *(r["longest_wait_s"] for r in reports)],
        *([["nodes needed", *(r.get("nodes_needed") for r in reports)],
           ["lower bound", *(r.get("lower_bound") for r in reports)],
           ["peak demand (nodes)", *(r.get("peak_demand_nodes") for r in reports)]] if "compaction" in figures else []),
        ["replay wall time (s)", *(r["wall_s"] for r in reports)],
    ])
    delays = "".join(f"<h3>{html.escape(r['settings'])}</h3>" + _table(
        ["priority", "tasks", "p50 (s)", "p95 (s)", "p99 (s)", "max (s)"],
        [[p, d["tasks"], d["p50"], d["p95"], d["p99"], d["max"]] for p, d in r["queueing_delay_s"].items()])
        for r in reports)
    reasons = "".join(f"<h3>{html.escape(r['settings'])}</h3>" + _table(
        ["reason", "waiting tasks seen"], [[k, v] for k, v in r["pending_reasons"].items()] or [["(none)", 0]])
        for r in reports)
    tenants_table = "".join(f"<h3>{html.escape(r['settings'])}</h3>" + _table(
        ["tenant", "weight", "fair share %", "dominant share, mean %", "peak %"],
        [[t, v["weight"], round(v["fair_share"] * 100, 1), round(v["dominant_share_mean"] * 100, 1),
          round(v["dominant_share_peak"] * 100, 1)] for t, v in r["tenants"].items()]) for r in reports)
    images = "".join(f'<h2>{name}</h2><img src="{name}.png" alt="{name}">' for name in figures)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>sched simulate: {html.escape(reports[0]['source'])}</title>
<style>body{{font-family:sans-serif;max-width:980px;margin:2em auto;color:#222}}table{{border-collapse:collapse;margin:.5em 0}}
td,th{{border:1px solid #ccc;padding:.2em .6em;text-align:right}}th{{background:#f3f3f3}}img{{max-width:100%}}</style></head>
<body><h1>How well it placed: {html.escape(reports[0]['source'])}</h1>
<p>Replayed through the scheduler on a virtual clock (docs/simulate.md explains each figure).</p>
{summary}{images}<h2>Queueing delay</h2>{delays}<h2>Why tasks waited</h2>{reasons}<h2>Tenants</h2>{tenants_table}
</body></html>"""
    index = out / "index.html"
    index.write_text(page, encoding="utf-8")
    return index
