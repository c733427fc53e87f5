"""``sched ui``: a live web dashboard (Starlette + uvicorn, no build step).

``app`` is the ASGI application and its route table, ``server`` runs it with uvicorn,
``pages`` and ``api`` the HTML and JSON routes, ``events`` the server-sent-events stream
(fed by ``live``, one reader of each namespace's event stream), ``activity`` the activity
page, ``data`` every read and write of scheduler state, ``inputs`` the checks on what clients
send, ``security`` the same-origin check and headers, ``templates`` the HTML rendering.
The click command is ``scheduler/tools/cli/ui.py``; ``scheduler/tools/web.py`` serves the
dashboard with the HTTP API beside it. See docs/dashboard.md.
"""
