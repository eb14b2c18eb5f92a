"""The ledger's Prometheus series: transfer results, by result code (a bounded enum)."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import Counter

from paymanager.ledger.types import TransferEventResult

TRANSFERS = Counter(
    "paymanager_ledger_transfers_total",
    "Transfer events the ledger answered, by result (created, exists, or the refusal's code); a "
    "transfer whose transaction rolled back afterwards is counted too.",
    ["result"],
)


def count_transfers(results: Sequence[TransferEventResult]) -> None:
    for item in results:
        TRANSFERS.labels(item.result.name).inc()
