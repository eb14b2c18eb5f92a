"""Services: the callers of the API, each with a sealed HMAC secret and scopes such as `admin`."""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime

from paymanager.adapters.secret_box import Sealed, Secret, SecretBox
from paymanager.application.errors import ServiceNameTakenError
from paymanager.application.services.store import ServiceListing, ServiceStore
from paymanager.db.pool import Conn
from paymanager.domain.channels import ADMIN_SCOPE

SECRET_BYTES = 32
LIST_LIMIT = 1_000


@dataclass(frozen=True, slots=True)
class ServiceIdentity:
    """An authenticated caller. The HMAC key is the UTF-8 bytes of the secret string it was given."""

    id: str
    name: str
    scopes: frozenset[str]
    secret: Secret[bytes]
    disabled: bool = False
    # The service's own API rate limit; None: the process default (API_REQUESTS_PER_SEC_PER_SERVICE).
    requests_per_sec_max: int | None = None

    @property
    def is_admin(self) -> bool:
        return ADMIN_SCOPE in self.scopes


async def create_service(
    conn: Conn, box: SecretBox, name: str, *, admin: bool
) -> tuple[ServiceIdentity, str]:
    """Register a service; returns it and its secret, which is shown once and never again."""
    service_id = "svc_" + uuid.uuid4().hex
    secret = "sk_" + secrets.token_hex(SECRET_BYTES)
    sealed = box.seal(secret.encode(), service_id.encode())
    scopes = [ADMIN_SCOPE] if admin else []
    inserted = await ServiceStore(conn).insert(
        service_id=service_id, name=name, secret_ciphertext=sealed.ciphertext, secret_key_id=sealed.key_id,
        scopes=scopes,
    )  # fmt: skip
    if not inserted:
        raise ServiceNameTakenError(f"a service named {name!r} exists", {"name": name})
    identity = ServiceIdentity(service_id, name, frozenset(scopes), Secret(secret.encode()))
    return identity, secret


async def load_service(conn: Conn, box: SecretBox, service_id: str) -> ServiceIdentity | None:
    stored = await ServiceStore(conn).get(service_id=service_id)
    if stored is None:
        return None
    secret = box.open(Sealed(stored.secret_key_id, stored.secret_ciphertext), service_id.encode())
    return ServiceIdentity(
        stored.id, stored.name, frozenset(stored.scopes), secret, stored.disabled_at is not None,
        stored.requests_per_sec_max,
    )  # fmt: skip


REQUESTS_PER_SEC_MAX = 1_000_000


async def set_rate_limit(conn: Conn, service_id: str, requests_per_sec: int | None) -> bool:
    """Give a service its own limit of API requests per second (None: the default); False when there
    is no such service. Each api process applies it within SERVICE_CACHE_TTL_MS."""
    if requests_per_sec is not None and not 1 <= requests_per_sec <= REQUESTS_PER_SEC_MAX:
        raise ValueError(f"requests per second must be within [1, {REQUESTS_PER_SEC_MAX}]")
    return await ServiceStore(conn).set_rate_limit(service_id=service_id, requests_per_sec=requests_per_sec)


async def list_services(conn: Conn) -> list[ServiceListing]:
    return await ServiceStore(conn).page(limit=LIST_LIMIT)


async def remember_signature(conn: Conn, signature: bytes, service_id: str, expires_at: datetime) -> bool:
    """True the first time a signature is presented; False for a replay."""
    return await ServiceStore(conn).remember_signature(
        signature=signature, service_id=service_id, expires_at=expires_at
    )


async def prune_signatures(conn: Conn, now: datetime, limit: int) -> int:
    return await ServiceStore(conn).prune_signatures(now=now, limit=limit)
