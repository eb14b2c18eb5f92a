"""The driver of each known PSP, built from its (opened) credentials."""

from __future__ import annotations

from paymanager.adapters.psp._http import PspCredentials
from paymanager.adapters.psp.ipps import IppsDriver
from paymanager.adapters.psp.port import PspDriver
from paymanager.adapters.psp.qp import QpDriver
from paymanager.adapters.psp.wise import WiseDriver

DRIVERS: dict[str, type[IppsDriver] | type[QpDriver] | type[WiseDriver]] = {
    "ipps": IppsDriver,
    "qp": QpDriver,
    "wise": WiseDriver,
}


def build_driver(name: str, credentials: PspCredentials, *, max_connections: int = 200) -> PspDriver:
    try:
        driver = DRIVERS[name]
    except KeyError:
        raise ValueError(f"no driver for PSP {name!r}; known: {', '.join(DRIVERS)}") from None
    return driver(credentials, max_connections=max_connections)
