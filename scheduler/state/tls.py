"""TLS settings for ``rediss://`` and ``rediss+cluster://`` URLs from the environment.

redis-py reads TLS options from a URL's query (``?ssl_ca_certs=/etc/sched/ca.pem&
ssl_certfile=...&ssl_keyfile=...``). A URL is often shared or set once for many
processes, so the files may instead come from ``SCHED_REDIS_CA`` (the CA that signed the
server's certificate), ``SCHED_REDIS_CERT`` and ``SCHED_REDIS_KEY`` (this client's
certificate and key, for a server that asks for one: ``tls-auth-clients yes``).
:func:`with_tls_env` adds them to a TLS URL's query, unless the query names them
itself; every client (``connection.client_for``) is made from the URL it returns.
"""

from __future__ import annotations

import os
from urllib.parse import parse_qsl, quote

from scheduler.model.errors import SpecError

TLS_SCHEMES = ("rediss", "rediss+cluster")
# Environment variable -> the redis-py connection option it sets.
TLS_ENV = {"SCHED_REDIS_CA": "ssl_ca_certs", "SCHED_REDIS_CERT": "ssl_certfile", "SCHED_REDIS_KEY": "ssl_keyfile"}


def with_tls_env(url: str) -> str:
    """``url`` with the TLS files named in the environment added to its query (a URL
    that is not TLS comes back unchanged). A file named, by either, that cannot be read
    is one sentence (:class:`SpecError`), before any connection is tried."""
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme not in TLS_SCHEMES:
        return url
    base, mark, query = url.partition("?")
    given = dict(parse_qsl(query, keep_blank_values=True))
    added = []
    for variable, option in TLS_ENV.items():
        path = os.environ.get(variable)
        if path and option not in given:
            given[option] = path
            added.append(f"{option}={quote(path, safe='/')}")
    for variable, option in TLS_ENV.items():
        path = given.get(option)
        if path and not os.access(path, os.R_OK):
            where = variable if option not in dict(parse_qsl(query)) else f"the URL's {option}"
            raise SpecError(f"{where} names {path}, which cannot be read.")
    if not added:
        return url
    return base + "?" + "&".join(filter(None, [query, *added]))
