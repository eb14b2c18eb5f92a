"""Webhook endpoints of a service: register (secret shown once), list, delete, rotate, re-enable;
and the delivery log with its replay."""

from __future__ import annotations

import re
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from paymanager.adapters.secret_box import SecretBox
from paymanager.application.webhooks.address_guard import AddressGuard
from paymanager.application.webhooks.deliver import DELIVER_KIND, WEBHOOK_QUEUE
from paymanager.application.webhooks.store import Delivery, Endpoint, WebhookStore
from paymanager.db.pool import Conn
from paymanager.domain.errors import InvalidInputError, InvalidTransitionError, NotFoundError
from paymanager.jobs import enqueue

SECRET_BYTES = 24
ENDPOINTS_PER_SERVICE_MAX = 50
LIST_LIMIT_MAX = 200
# Event types a subscription may name ('*' is every type).
EVENT_TYPES = frozenset(
    {
        f"intent.{s}"
        for s in ("created", "confirmed", "requires_capture", "settled", "failed", "cancelled", "expired")
    }
    | {f"refund.{s}" for s in ("pending", "succeeded", "failed")}
    | {f"session.{s}" for s in ("completed", "failed", "expired", "cancelled")}
    | {"*"}
)
ENDPOINT_ID = re.compile(r"^we_[0-9a-f]{32}$")
DELIVERY_ID = re.compile(r"^whd_[0-9a-f]{32}$")


@dataclass(frozen=True, slots=True)
class NewEndpoint:
    url: str
    event_types: list[str]
    description: str | None


def endpoint_view(endpoint: Endpoint, secret: str | None = None) -> dict[str, object]:
    view: dict[str, object] = {
        "id": endpoint.id,
        "object": "webhook_endpoint",
        "url": endpoint.url,
        "event_types": endpoint.event_types,
        "description": endpoint.description,
        "status": endpoint.status,
        "disabled_reason": endpoint.disabled_reason,
        "failing_since": endpoint.failing_since.isoformat() if endpoint.failing_since else None,
        "previous_secret_expires_at": (
            endpoint.previous_secret_expires_at.isoformat() if endpoint.previous_secret_expires_at else None
        ),
        "created_at": endpoint.created_at.isoformat(),
    }
    if secret is not None:
        view["secret"] = secret
    return view


def delivery_view(delivery: Delivery) -> dict[str, object]:
    def iso(value: datetime | None) -> str | None:
        return value.isoformat() if value else None

    return {
        "id": delivery.id,
        "object": "webhook_delivery",
        "event_id": delivery.event_id,
        "event_type": delivery.type,
        "endpoint_id": delivery.endpoint_id,
        "status": delivery.status,
        "attempts": delivery.attempts,
        "last_status_code": delivery.last_status_code,
        "last_error": delivery.last_error,
        "last_latency_ms": delivery.last_latency_ms,
        "last_attempt_at": iso(delivery.last_attempt_at),
        "next_attempt_at": iso(delivery.next_attempt_at),
        "created_at": iso(delivery.created_at),
        "finished_at": iso(delivery.finished_at),
    }


def _check_types(types: list[str]) -> list[str]:
    unknown = sorted(set(types) - EVENT_TYPES)
    if not types or unknown:
        raise InvalidInputError(
            "event_types must name known event types", {"unknown": unknown, "known": sorted(EVENT_TYPES)}
        )
    return sorted(set(types))


def _new_secret() -> str:
    return "whsec_" + secrets.token_hex(SECRET_BYTES)


async def create_endpoint(
    conn: Conn, box: SecretBox, guard: AddressGuard, service_id: str, wanted: NewEndpoint, now: datetime
) -> tuple[Endpoint, str]:
    """Register an endpoint; returns it and its signing secret, shown this once."""
    types = _check_types(wanted.event_types)
    await guard.check(wanted.url)
    store = WebhookStore(conn)
    if len(await store.list_endpoints(service_id=service_id, limit=ENDPOINTS_PER_SERVICE_MAX)) >= (
        ENDPOINTS_PER_SERVICE_MAX
    ):
        raise InvalidInputError("too many webhook endpoints", {"max": ENDPOINTS_PER_SERVICE_MAX})
    endpoint_id = "we_" + uuid.uuid4().hex
    secret = _new_secret()
    sealed = box.seal(secret.encode(), endpoint_id.encode())
    endpoint = await store.insert_endpoint(
        endpoint_id=endpoint_id, service_id=service_id, url=wanted.url, event_types=types,
        description=wanted.description, secret_ciphertext=sealed.ciphertext, secret_key_id=sealed.key_id,
        now=now,
    )  # fmt: skip
    return endpoint, secret


def _check_endpoint_id(endpoint_id: str) -> None:
    if not ENDPOINT_ID.match(endpoint_id):
        raise NotFoundError("no such webhook endpoint", {"endpoint_id": endpoint_id})


async def get_endpoint(conn: Conn, service_id: str | None, endpoint_id: str) -> Endpoint:
    _check_endpoint_id(endpoint_id)
    found = await WebhookStore(conn).get_endpoint(endpoint_id=endpoint_id, service_id=service_id)
    if found is None:
        raise NotFoundError("no such webhook endpoint", {"endpoint_id": endpoint_id})
    return found


async def list_endpoints(conn: Conn, service_id: str | None) -> list[Endpoint]:
    return await WebhookStore(conn).list_endpoints(service_id=service_id, limit=LIST_LIMIT_MAX)


async def delete_endpoint(conn: Conn, service_id: str, endpoint_id: str, now: datetime) -> None:
    _check_endpoint_id(endpoint_id)
    if not await WebhookStore(conn).delete_endpoint(endpoint_id=endpoint_id, service_id=service_id, now=now):
        raise NotFoundError("no such webhook endpoint", {"endpoint_id": endpoint_id})


async def rotate_secret(
    conn: Conn, box: SecretBox, service_id: str, endpoint_id: str, now: datetime, grace_sec: int
) -> tuple[Endpoint, str]:
    """A new secret signs from now; the previous one also signs for `grace_sec` (both v1s are sent)."""
    _check_endpoint_id(endpoint_id)
    secret = _new_secret()
    sealed = box.seal(secret.encode(), endpoint_id.encode())
    endpoint = await WebhookStore(conn).rotate_secret(
        endpoint_id=endpoint_id, service_id=service_id, secret_ciphertext=sealed.ciphertext,
        secret_key_id=sealed.key_id, now=now, previous_expires_at=now + timedelta(seconds=grace_sec),
    )  # fmt: skip
    if endpoint is None:
        raise NotFoundError("no such webhook endpoint", {"endpoint_id": endpoint_id})
    return endpoint, secret


async def enable_endpoint(
    conn: Conn, guard: AddressGuard, service_id: str, endpoint_id: str, now: datetime
) -> Endpoint:
    """Re-enable a disabled endpoint (its dead deliveries can then be replayed)."""
    endpoint = await get_endpoint(conn, service_id, endpoint_id)
    await guard.check(endpoint.url)
    enabled = await WebhookStore(conn).enable_endpoint(
        endpoint_id=endpoint_id, service_id=service_id, now=now
    )
    assert enabled is not None
    return enabled


async def list_deliveries(
    conn: Conn, service_id: str | None, *, endpoint_id: str | None, status: str | None,
    before: tuple[datetime, str] | None, limit: int,
) -> list[Delivery]:  # fmt: skip
    return await WebhookStore(conn).list_deliveries(
        service_id=service_id, endpoint_id=endpoint_id, status=status, before=before,
        limit=max(1, min(limit, LIST_LIMIT_MAX)),
    )  # fmt: skip


async def get_delivery(conn: Conn, service_id: str | None, delivery_id: str) -> Delivery:
    found = None
    if DELIVERY_ID.match(delivery_id):
        found = await WebhookStore(conn).get_delivery(delivery_id=delivery_id, service_id=service_id)
    if found is None:
        raise NotFoundError("no such webhook delivery", {"delivery_id": delivery_id})
    return found


async def replay_delivery(conn: Conn, service_id: str | None, delivery_id: str, now: datetime) -> Delivery:
    """Send a finished delivery again (same event id and body) with a new job, in one transaction.

    A delivery still pending or retrying is refused (409): its job will try again by itself. The
    endpoint must be enabled (re-enable it first)."""
    async with conn.transaction():
        delivery = await get_delivery(conn, service_id, delivery_id)
        store = WebhookStore(conn)
        status = await store.lock_delivery(delivery_id=delivery_id)
        if status in ("pending", "retrying"):
            raise InvalidTransitionError(
                "the delivery is still being attempted", {"delivery_id": delivery_id, "status": status}
            )
        endpoint = await store.get_endpoint(endpoint_id=delivery.endpoint_id, service_id=None)
        if endpoint is None or endpoint.status != "enabled":
            raise InvalidTransitionError(
                "the delivery's endpoint is not enabled; enable it first",
                {"endpoint_id": delivery.endpoint_id, "status": endpoint.status if endpoint else "deleted"},
            )
        job = await enqueue(conn, DELIVER_KIND, {"delivery_id": delivery_id}, queue=WEBHOOK_QUEUE)
        await store.restart_delivery(delivery_id=delivery_id, job_id=job.id, now=now)
    return await get_delivery(conn, service_id, delivery_id)
