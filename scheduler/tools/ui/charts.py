"""The overview's charts over time: placements per second, the queue depths and the share
of the ready nodes' capacity that live tasks hold, per resource, over the last hour.

They are drawn by the page's script (``static/charts.js``, small SVG lines) from the
namespace's series (``scheduler/state/series.py``): samples the scheduler workers take
every 5 s into a capped list in Redis, so the charts have their past when the page is
loaded again, or by another person, and cost nothing while no page is open.
``/api/series?ns=&after=MS`` gives the samples taken after ``after`` (all kept without).
"""

from __future__ import annotations

from scheduler.state.series import SAMPLE_EVERY_MS, SAMPLES_KEPT
from scheduler.tools.ui import api, inputs
from scheduler.tools.ui.inputs import BadInput


def api_series(request):
    app = inputs.scoped_app(request)
    after = request.query_params.get("after", "0")
    if not after.isdigit() or len(after) > 16:
        raise BadInput(f"after {after[:40]!r} is not a time in milliseconds.")
    return api.JSON({"namespace": app.keys.namespace, "every_ms": SAMPLE_EVERY_MS, "kept": SAMPLES_KEPT,
                     "samples": app.store.series(int(after))})
