"""The HTTP API (``sched api``, and under ``/v1/`` of ``sched ui``): everything the
Python ``Client`` does, for programs in any language, guarded by tokens.

One module per noun (``nodes``, ``jobs``, ``tasks``, ``deployments``, ``queues``,
``quotas``, ``tenants``, ``events``, ``meta``), each a list of routes that are thin
layers over the ``Client`` calls the CLI makes; ``route`` serves them (checks, errors),
``access`` admits tokens, ``problems`` makes errors RFC 9457 documents, ``schemas`` and
``openapi`` describe it all, ``sse`` streams events, ``app`` puts it together and
``command`` is ``sched api``. docs/http-api.md is the user's guide.
"""
