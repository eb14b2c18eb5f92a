from __future__ import annotations

import pytest

from paymanager.db.sql import parse_queries


def test_named_blocks_are_parsed_and_comments_dropped() -> None:
    queries = parse_queries(
        "-- name: job_get\n-- Fetch one.\nSELECT 1;\n\n-- name: job_put\nINSERT INTO t VALUES (1);\n"
    )
    assert queries["job_get"] == "SELECT 1"
    assert queries["job_put"] == "INSERT INTO t VALUES (1)"


def test_unknown_name_lists_known_ones() -> None:
    queries = parse_queries("-- name: a\nSELECT 1;")
    with pytest.raises(KeyError, match="known: a"):
        queries["b"]


def test_duplicate_name_is_an_error() -> None:
    with pytest.raises(ValueError, match="defined twice"):
        parse_queries("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;")
