"""The query gauges of jobs, intents and the ledger's last verification (see `paymanager.metrics`),
and those of the PSP step, the balance monitor, the webhooks and the sessions (`ops.py`)."""

from __future__ import annotations

from collections.abc import Sequence

from paymanager.application.admin.ops import register_ops_gauges
from paymanager.application.admin.store import AdminStore
from paymanager.application.admin.use_cases import VERIFY_FACT
from paymanager.db.pool import Conn
from paymanager.jobs import admin
from paymanager.metrics import QueryGauge, QueryGauges, Sample


async def _jobs(conn: Conn) -> Sequence[Sample]:
    counts = await admin.stats(conn)
    return [((queue, state), float(n)) for queue, states in counts.items() for state, n in states.items()]


async def _oldest(conn: Conn) -> Sequence[Sample]:
    return [((queue,), age) for queue, age in (await admin.oldest_available_age(conn)).items()]


async def _intents(conn: Conn) -> Sequence[Sample]:
    return [((channel, status), n) for channel, status, n in await AdminStore(conn).intent_counts()]


async def _verify(conn: Conn) -> tuple[dict[str, object], float] | None:
    return await AdminStore(conn).read_fact(name=VERIFY_FACT)


async def _verify_ok(conn: Conn) -> Sequence[Sample]:
    fact = await _verify(conn)
    return [] if fact is None else [((), 1.0 if fact[0].get("ok") else 0.0)]


async def _verify_violations(conn: Conn) -> Sequence[Sample]:
    fact = await _verify(conn)
    value = fact[0].get("violations") if fact is not None else None
    return [((), float(value))] if isinstance(value, int) else []


async def _verify_at(conn: Conn) -> Sequence[Sample]:
    fact = await _verify(conn)
    return [] if fact is None else [((), fact[1])]


def register_gauges(gauges: QueryGauges) -> None:
    register_ops_gauges(gauges)
    gauges.register(QueryGauge("paymanager_jobs", "Jobs by queue and state.", ("queue", "state"), _jobs))
    gauges.register(
        QueryGauge(
            "paymanager_job_oldest_available_age_seconds",
            "Per queue, how long its oldest available job has waited since it was due.",
            ("queue",),
            _oldest,
        )
    )
    gauges.register(
        QueryGauge("paymanager_intents", "Intents by channel and status.", ("channel", "status"), _intents)
    )
    gauges.register(
        QueryGauge(
            "paymanager_ledger_verify_ok",
            "1 when the last `ledger verify` (CLI or admin API) found no violation, else 0.",
            (),
            _verify_ok,
        )
    )
    gauges.register(
        QueryGauge(
            "paymanager_ledger_verify_violations",
            "Violations the last ledger verification found.",
            (),
            _verify_violations,
        )
    )
    gauges.register(
        QueryGauge(
            "paymanager_ledger_verify_timestamp_seconds",
            "When the last ledger verification ran (unix time).",
            (),
            _verify_at,
        )
    )
