"""Queries of a claim session's settings: how the worker's pinned connections (and its listener, when
it claims) plan the claim statements and how long they wait on a lock."""

from __future__ import annotations

SETTINGS = (
    "SELECT current_setting('plan_cache_mode') AS mode, current_setting('enable_seqscan') AS seqscan,"
    " current_setting('enable_bitmapscan') AS bitmapscan"
)
PLANNED = {"mode": "force_generic_plan", "seqscan": "off", "bitmapscan": "off"}
DEFAULT = {"mode": "auto", "seqscan": "on", "bitmapscan": "on"}

LOCK_TIMEOUT = "SELECT current_setting('lock_timeout') AS lock_timeout"
