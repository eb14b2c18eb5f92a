"""PSP configurations, sealed with the SecretBox (AES-256-GCM under PSP_CONFIG_KEK, bound to the PSP's
name), and the start-up step that opens them into drivers.

Rotation: set the new key as PSP_CONFIG_KEK and the old one in PSP_CONFIG_KEK_PREVIOUS; every row
still opens, and `reseal_all` (run by `paymanager psp config reseal`) seals each again under the new
key, after which the old key may go.
"""

from __future__ import annotations

from paymanager.adapters.psp._http import PspCredentials
from paymanager.adapters.psp.drivers import DRIVERS, build_driver
from paymanager.adapters.psp.port import PspDriver
from paymanager.adapters.secret_box import Sealed, SecretBox
from paymanager.application.psp.store import PspStore
from paymanager.db.pool import Pool
from paymanager.logging import get_logger

log = get_logger("paymanager.psp.config")


class MissingPspConfigError(RuntimeError):
    """PSP_NAMES names a PSP with no stored configuration."""

    def __init__(self, missing: list[str]) -> None:
        self.missing = missing
        names = ", ".join(missing)
        super().__init__(
            f"PSP_NAMES names {names} but no configuration is stored for it; store one with "
            f"`paymanager psp config set {missing[0]} --file CONFIG.json`, or remove it from PSP_NAMES"
        )


async def set_config(pool: Pool, box: SecretBox, psp: str, raw: bytes) -> None:
    """Check and seal a PSP's configuration (its JSON); a ValueError names what is wrong."""
    if psp not in DRIVERS:
        raise ValueError(f"unknown PSP {psp!r}; known: {', '.join(DRIVERS)}")
    PspCredentials.from_json(raw)
    sealed = box.seal(raw, psp.encode())
    async with pool.acquire() as conn:
        await PspStore(conn).put_config(psp=psp, key_id=sealed.key_id, ciphertext=sealed.ciphertext)


async def open_config(pool: Pool, box: SecretBox, psp: str) -> PspCredentials | None:
    async with pool.acquire() as conn:
        stored = await PspStore(conn).get_config(psp=psp)
    if stored is None:
        return None
    return PspCredentials.from_json(box.open(Sealed(stored.key_id, stored.ciphertext), psp.encode()).reveal())


async def reseal_all(pool: Pool, box: SecretBox) -> list[str]:
    """Seal every configuration again under the current key; the PSPs done."""
    done = []
    async with pool.acquire() as conn, conn.transaction():
        store = PspStore(conn)
        for stored in await store.all_configs():
            raw = box.open(Sealed(stored.key_id, stored.ciphertext), stored.psp.encode()).reveal()
            sealed = box.seal(raw, stored.psp.encode())
            await store.put_config(psp=stored.psp, key_id=sealed.key_id, ciphertext=sealed.ciphertext)
            done.append(stored.psp)
    return done


async def load_drivers(
    pool: Pool, box: SecretBox, names: tuple[str, ...], *, max_connections: int
) -> dict[str, PspDriver]:
    """The start-up step "register PSP drivers": a driver per name, or MissingPspConfigError."""
    drivers: dict[str, PspDriver] = {}
    missing: list[str] = []
    for name in names:
        credentials = await open_config(pool, box, name)
        if credentials is None:
            missing.append(name)
            continue
        drivers[name] = build_driver(name, credentials, max_connections=max_connections)
    if missing:
        for driver in drivers.values():
            await driver.aclose()
        raise MissingPspConfigError(missing)
    log.info("PSP drivers registered", psps=list(drivers))
    return drivers
