"""Application metrics: the registry every component adds its series to, and the rendering of
`/metrics` (the api's port, or METRICS_PORT on a headless process).

Two kinds of series, both on prometheus_client's default registry (so the process and GC series
come along):

- Counters and histograms a component updates as things happen: declare them with prometheus_client
  in the component's own module (`jobs/metrics.py`, `ledger/metrics.py`, `api/http_metrics.py`), named
  `paymanager_<noun>_<unit>`, `_total` for counters, `_seconds` for durations, with labels from a
  bounded set (a queue, a channel, a status; never an id, an amount or a free text).
- Gauges that need a query (jobs by queue and state, intents by channel and status): register a
  `QueryGauge` with `QUERY_GAUGES.register(...)` at build time. They are computed at most once per
  METRICS_QUERY_INTERVAL_MS for the whole cluster: the scrape that finds the shared snapshot (the
  `metric_snapshot` row) older than that computes every registered gauge under the row's lock and
  stores the samples; every other scrape, of any process, reads the stored samples. So N processes
  scraped every 15 s cost one set of queries per 15 s, not N.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass

import asyncpg
import orjson
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from paymanager.db.pool import Conn, Pool
from paymanager.db.sql import load_queries
from paymanager.logging import get_logger

__all__ = [
    "CONTENT_TYPE_LATEST",
    "QUERY_GAUGES",
    "QueryGauge",
    "QueryGauges",
    "Sample",
    "render",
]

Q = load_queries("paymanager.metrics", "metrics.sql")
log = get_logger("paymanager.metrics")

# One sample: its label values (in the gauge's label order) and its value.
Sample = tuple[tuple[str, ...], float]
SNAPSHOT = "query_gauges"

SNAPSHOT_ERRORS = Counter(
    "paymanager_metrics_snapshot_errors_total",
    "Scrapes that could not compute or read the query gauges (the last samples were served).",
)


@dataclass(frozen=True, slots=True)
class QueryGauge:
    """A gauge computed by a query: `query(conn)` returns every sample of it."""

    name: str
    documentation: str
    labels: tuple[str, ...]
    query: Callable[[Conn], Awaitable[Sequence[Sample]]]


class QueryGauges(Collector):
    """The registered query gauges and the samples last computed or read for them."""

    def __init__(self) -> None:
        self._gauges: dict[str, QueryGauge] = {}
        self._samples: dict[str, list[Sample]] = {}
        self._age_s: float | None = None
        # The pool and monotonic time of this process's last refresh: a second scrape within the
        # interval (two Prometheus servers) is answered from memory, without a round trip.
        self._last: tuple[Pool, float] | None = None
        self._lock = asyncio.Lock()

    def register(self, gauge: QueryGauge) -> None:
        """Add (or replace, by name) a gauge; components call this when they are built."""
        self._gauges[gauge.name] = gauge

    @property
    def names(self) -> list[str]:
        return sorted(self._gauges)

    async def refresh(self, pool: Pool, interval_ms: int) -> None:
        """Bring the samples up to date: from memory, the shared snapshot, or by computing it."""
        async with self._lock:
            now = time.monotonic()
            if self._last is not None and self._last[0] is pool and now - self._last[1] < interval_ms / 1000:
                return
            try:
                async with pool.acquire() as conn, conn.transaction():
                    await conn.execute(Q["metric_snapshot_ensure"], SNAPSHOT)
                    if await conn.fetchval(Q["metric_snapshot_claim"], SNAPSHOT, interval_ms) is not None:
                        samples = await self._compute(conn)
                        await conn.execute(Q["metric_snapshot_write"], SNAPSHOT, samples)
                    row = await conn.fetchrow(Q["metric_snapshot_read"], SNAPSHOT)
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                # The database is down: the process's own series are still worth serving.
                SNAPSHOT_ERRORS.inc()
                log.warning("query gauges not refreshed", error=str(exc))
                return
            self._last = (pool, now)
            if row is not None:
                self._load(row["samples"], float(row["age_s"]))

    async def _compute(self, conn: Conn) -> dict[str, list[list[object]]]:
        computed: dict[str, list[list[object]]] = {}
        for gauge in self._gauges.values():
            computed[gauge.name] = [[list(labels), value] for labels, value in await gauge.query(conn)]
        return computed

    def _load(self, stored: object, age_s: float) -> None:
        samples: dict[str, list[Sample]] = {}
        if isinstance(stored, str):
            stored = orjson.loads(stored)
        if isinstance(stored, dict):
            for name, rows in stored.items():
                samples[name] = [(tuple(str(v) for v in labels), float(value)) for labels, value in rows]
        self._samples = samples
        self._age_s = age_s

    def collect(self) -> Iterator[GaugeMetricFamily]:
        for name, gauge in sorted(self._gauges.items()):
            family = GaugeMetricFamily(name, gauge.documentation, labels=list(gauge.labels))
            for labels, value in self._samples.get(name, []):
                if len(labels) == len(gauge.labels):
                    family.add_metric(list(labels), value)
            yield family
        if self._age_s is not None:
            yield GaugeMetricFamily(
                "paymanager_metrics_snapshot_age_seconds",
                "Age of the query gauges' shared snapshot when this process last read it.",
                value=self._age_s,
            )


QUERY_GAUGES = QueryGauges()
REGISTRY.register(QUERY_GAUGES)


async def render(pool: Pool, interval_ms: int) -> bytes:
    """The text exposition of every series of this process, the query gauges refreshed first."""
    await QUERY_GAUGES.refresh(pool, interval_ms)
    return generate_latest(REGISTRY)
