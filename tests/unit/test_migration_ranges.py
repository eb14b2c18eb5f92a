"""The job engine's schema migrates alone (`paymanager jobs migrate`): every migration that defines
or changes a job* object must be one of JOB_ENGINE_VERSIONS, or a library user's database would
miss it."""

from __future__ import annotations

import re

from paymanager.db import migrations

DEFINES_A_JOB_OBJECT = re.compile(
    r"\b(CREATE|ALTER|DROP)\s+(OR\s+REPLACE\s+)?(TABLE|FUNCTION|INDEX|TYPE|DOMAIN|TRIGGER|SEQUENCE)\s+"
    r"(IF\s+(NOT\s+)?EXISTS\s+)?job",
    re.IGNORECASE,
)


def test_every_migration_of_a_job_object_is_in_the_engines_set() -> None:
    outside = [
        f"{m.version:04d}_{m.name}"
        for m in migrations.available_migrations()
        if DEFINES_A_JOB_OBJECT.search(m.sql) and m.version not in migrations.JOB_ENGINE_VERSIONS
    ]
    assert outside == []


def test_the_engines_migrations_touch_no_other_component() -> None:
    others = re.compile(r"\b(ledger_|intent|payment|webhook|psp_|checkout|service)\w*", re.IGNORECASE)
    for m in migrations.available_migrations():
        if m.version in migrations.JOB_ENGINE_VERSIONS:
            code = "\n".join(line.split("--", 1)[0] for line in m.sql.splitlines())
            assert not others.search(code), f"{m.version:04d}_{m.name}"
