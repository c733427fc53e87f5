"""``/v1/layout``: the namespace's key layout, and moving it forward in place
(``sched upgrade``)."""

from __future__ import annotations

from scheduler.state.layout import CURRENT
from scheduler.tools.api import schemas as s
from scheduler.tools.api.route import OPERATOR, Call, get, post


def show_layout(call: Call):
    return {"namespace": call.sched.namespace, "layout": call.sched.layout(), "latest": CURRENT}


def upgrade_layout(call: Call):
    return call.sched.upgrade()


ROUTES = [
    get("/v1/layout", show_layout, "The namespace's key layout and the one this sched writes", s.LAYOUT),
    post("/v1/layout/upgrade", upgrade_layout, "Bring the namespace's keys up to the layout this sched writes",
         s.UPGRADED, role=OPERATOR, refusals=(409,),
         description="`sched upgrade`: in place, each step idempotent. A namespace of an older layout is refused "
                     "writes (409, saying so) until then; stop the processes of the older version first. A "
                     "layout newer than this sched knows is a 409."),
]
