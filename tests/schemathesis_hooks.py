"""Schemathesis's hooks for tests/test_api_clients.py (SCHEMATHESIS_HOOKS): the files the
API takes (JSON lines, gzip) are bytes, as its own octet-stream serializer sends them."""

import schemathesis

schemathesis.serializer.alias(["application/x-ndjson", "application/jsonl", "application/gzip"],
                              "application/octet-stream")

