"""Delivering one webhook: the handler of the `webhook.deliver` jobs of the `webhooks` queue.

An attempt loads its delivery, takes one of its endpoint's slots (a per-endpoint bound in each
process, so a slow or hanging endpoint holds at most `WEBHOOK_ENDPOINT_CONCURRENCY` of the queue's
`WEBHOOK_CONCURRENCY` slots; a delivery finding its endpoint's slots all taken is snoozed without
spending an attempt), checks the URL with the SSRF guard again, signs the event's stored body (the
same bytes and event id on every attempt, a fresh timestamp each time) and POSTs it. A 2xx succeeds
(the successes of the deliveries a worker runs at once are recorded, and their jobs completed, in
shared fenced transactions: one transaction and a few statements per group, not one per delivery);
a 410 disables the endpoint; anything else is retried on `WEBHOOK_RETRY_SCHEDULE_MS` until
`WEBHOOK_MAX_ATTEMPTS`, then the delivery (and its job) is dead, replayable. An endpoint whose
deliveries have all failed for `WEBHOOK_DISABLE_AFTER_FAILING_SEC` is disabled.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from paymanager.adapters.secret_box import Sealed, SecretBox
from paymanager.application.context import Payments
from paymanager.application.webhooks.address_guard import AddressGuard, CheckedUrl, WebhookUrlRefusedError
from paymanager.application.webhooks.store import AttemptOutcome, DeliveryWork, Success, WebhookStore
from paymanager.db.pool import Conn, Pool
from paymanager.jobs import DeadJob, JobContext, PermanentError, Schedule
from paymanager.jobs.batch import SharedTransactions
from paymanager.logging import get_logger
from paymanager.metrics import webhooks as webhook_metrics
from paymanager.webhooks import EVENT_ID_HEADER, SIGNATURE_HEADER, sign

log = get_logger("paymanager.webhooks")

DELIVER_KIND = "webhook.deliver"
WEBHOOK_QUEUE = "webhooks"
ERROR_LENGTH_MAX = 1_000


@dataclass(frozen=True, slots=True)
class SendResult:
    status_code: int | None
    error: str | None
    latency_ms: int


class Sender(Protocol):
    async def send(self, checked: CheckedUrl, body: bytes, headers: dict[str, str]) -> SendResult: ...


class DeliveryFailedError(Exception):
    """An attempt failed and will be retried on the schedule."""


class EndpointSlots:
    """Deliveries in flight per endpoint in this process."""

    def __init__(self, per_endpoint: int) -> None:
        self.per_endpoint = per_endpoint
        self._held: Counter[str] = Counter()

    def try_acquire(self, endpoint_id: str) -> bool:
        if self._held[endpoint_id] >= self.per_endpoint:
            return False
        self._held[endpoint_id] += 1
        return True

    def release(self, endpoint_id: str) -> None:
        self._held[endpoint_id] -= 1
        if self._held[endpoint_id] <= 0:
            del self._held[endpoint_id]


async def _record_successes(conn: Conn, items: list[tuple[JobContext, Success]]) -> list[Exception | None]:
    """A group's successes in two statements on the shared transaction (jobs/batch.py); a statement's
    error fails the group, so no success is recorded alone."""
    successes = [success for _, success in items]
    store = WebhookStore(conn)
    await store.record_successes(successes=successes)
    await store.record_endpoint_successes(endpoint_ids=[s.endpoint_id for s in successes])
    return [None] * len(items)


def secrets_of(box: SecretBox, work: DeliveryWork, payments: Payments) -> list[str]:
    """The secrets that sign now: the current one, and the previous one inside its grace period."""
    found = [box.open(Sealed(work.secret_key_id, work.secret_ciphertext), work.endpoint_id.encode())]
    expires = work.previous_secret_expires_at
    if (
        work.previous_secret_ciphertext is not None
        and work.previous_secret_key_id is not None
        and expires is not None
        and expires > payments.clock()
    ):
        sealed = Sealed(work.previous_secret_key_id, work.previous_secret_ciphertext)
        found.append(box.open(sealed, work.endpoint_id.encode()))
    return [secret.reveal().decode() for secret in found]


class WebhookDeliverer:
    def __init__(
        self,
        payments: Payments,
        guard: AddressGuard,
        sender: Sender,
        slots: EndpointSlots,
        schedule: Schedule,
    ) -> None:
        self.payments = payments
        self.guard = guard
        self.sender = sender
        self.slots = slots
        self.schedule = schedule
        settings = payments.settings
        self._successes: SharedTransactions[Success, None] = SharedTransactions(
            payments.pool,
            _record_successes,
            batch_max=settings.outbox_batch_size,
            batches_in_flight_max=settings.outbox_settle_batches_in_flight,
        )

    async def deliver(self, ctx: JobContext) -> dict[str, object]:
        delivery_id = str(ctx.payload["delivery_id"])
        async with self.payments.pool.acquire() as conn:
            work = await WebhookStore(conn).load_delivery(delivery_id=delivery_id)
            if work is None or work.status not in ("pending", "retrying"):
                return {"skipped": "finished" if work is not None else "missing"}
            if work.endpoint_status != "enabled":
                reason = f"the endpoint is {work.endpoint_status}"
                await WebhookStore(conn).cancel_delivery(
                    delivery_id=delivery_id, reason=reason, now=self.payments.clock()
                )
                return {"skipped": reason}
        if not self.slots.try_acquire(work.endpoint_id):
            ctx.snooze(self.payments.settings.webhook_busy_snooze_ms)
        try:
            result = await self._attempt(work)
        finally:
            self.slots.release(work.endpoint_id)
        return await self._record(ctx, work, result)

    async def _attempt(self, work: DeliveryWork) -> SendResult:
        try:
            checked = await self.guard.check(work.url)
        except WebhookUrlRefusedError as exc:
            return SendResult(None, f"address refused: {exc.message}", 0)
        now = self.payments.clock()
        body = work.body.encode()
        headers = {
            SIGNATURE_HEADER: sign(
                body, secrets_of(self.payments.box, work, self.payments), int(now.timestamp())
            ),
            EVENT_ID_HEADER: work.event_id,
            "Paymanager-Event-Type": work.type,
            "Paymanager-Delivery-Id": work.id,
            "User-Agent": "paymanager-webhooks/1",
        }
        result = await self.sender.send(checked, body, headers)
        webhook_metrics.sent(result.latency_ms)
        return result

    async def _record(self, ctx: JobContext, work: DeliveryWork, result: SendResult) -> dict[str, object]:
        now = self.payments.clock()
        code, error = result.status_code, (result.error or "")[:ERROR_LENGTH_MAX] or None
        if code is not None and 200 <= code < 300:
            answer: dict[str, object] = {"status_code": code}
            ctx.result = answer  # the job's result, stored by the shared transaction's completion
            await self._successes.run(ctx, Success(work.id, work.endpoint_id, code, result.latency_ms, now))
            webhook_metrics.record("succeeded")
            return answer
        if code == 410:
            async with ctx.transaction() as conn:
                store = WebhookStore(conn)
                reason = "the endpoint answered 410 Gone"
                await store.disable_endpoint(endpoint_id=work.endpoint_id, reason=reason, now=now)
                outcome = AttemptOutcome(
                    "cancelled", code, f"{reason}: endpoint disabled", result.latency_ms, now, None
                )
                await store.record_attempt(delivery_id=work.id, outcome=outcome)
            webhook_metrics.record("gone")
            log.warning("webhook endpoint disabled", endpoint_id=work.endpoint_id, reason=reason)
            return {"status_code": code, "endpoint": "disabled"}
        error = error or f"answered {code}"
        async with self.payments.pool.acquire() as conn, conn.transaction():
            store = WebhookStore(conn)
            since = await store.record_endpoint_failure(endpoint_id=work.endpoint_id, now=now)
            limit = timedelta(seconds=self.payments.settings.webhook_disable_after_failing_sec)
            disabled = now - since >= limit
            if disabled:
                reason = f"every delivery failed since {since.isoformat()}"
                await store.disable_endpoint(endpoint_id=work.endpoint_id, reason=reason, now=now)
                log.warning("webhook endpoint disabled", endpoint_id=work.endpoint_id, reason=reason)
            last = disabled or ctx.attempt >= ctx.max_attempts
            next_at = None if last else now + timedelta(milliseconds=self.schedule.delay_ms(ctx.attempt))
            outcome = AttemptOutcome(
                "dead" if last else "retrying", code, error, result.latency_ms, now, next_at
            )
            await store.record_attempt(delivery_id=work.id, outcome=outcome)
        webhook_metrics.record("dead" if last else "retrying")
        if last:
            raise PermanentError(f"delivery {work.id} dead after {ctx.attempt} attempts: {error}")
        raise DeliveryFailedError(f"delivery {work.id} attempt {ctx.attempt}: {error}")


async def dead_letter_with_job(pool: Pool, job: DeadJob) -> str | None:
    """A `webhook.deliver` job died without its handler recording the end (the rescuer gave up on
    it after workers holding it stopped JOB_MAX_STALLED + 1 times): its delivery is dead too, or it
    would stay pending with nothing left to try it, missing from the dead letters and their replay.
    The id of the delivery so ended, if one was still unfinished."""
    error = (job.error or {}).get("error") if isinstance(job.error, dict) else None
    reason = f"its job {job.id} died: {error or 'no error recorded'}"[:ERROR_LENGTH_MAX]
    async with pool.acquire() as conn:
        ended = await WebhookStore(conn).dead_letter_for_job(job_id=job.id, reason=reason)
    if ended is not None:
        log.warning("webhook delivery dead with its job", delivery_id=ended, job_id=job.id)
    return ended
