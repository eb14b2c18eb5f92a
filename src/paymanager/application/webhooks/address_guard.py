"""The SSRF guard of webhook URLs: a merchant's URL must not make paymanager call inside its network.

A URL is refused when its host is, or resolves to, a loopback, private, link-local, multicast,
reserved, unspecified or cloud-metadata address, unless `WEBHOOK_ALLOWED_HOSTS` names the host (or
an address or network it resolves into). The check runs at registration and again at each delivery,
since DNS can change in between; a delivery then connects to the address it checked, not to a
second resolution, so a name cannot rebind between the check and the connection.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from paymanager.domain.errors import InvalidInputError

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# host, port -> the addresses it resolves to (an injectable port: tests resolve names their way).
Resolver = Callable[[str, int], Awaitable[list[str]]]

# Cloud metadata services, refused even where an allow-list names a private range around them.
METADATA_ADDRESSES = frozenset(
    {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254"),
     ipaddress.ip_address("100.100.100.200")}
)  # fmt: skip
URL_LENGTH_MAX = 2048
RESOLVE_TIMEOUT_S = 5.0


class WebhookUrlRefusedError(InvalidInputError):
    code = "webhook_url_refused"


async def system_resolver(host: str, port: int) -> list[str]:
    loop = asyncio.get_running_loop()
    infos = await asyncio.wait_for(
        loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout=RESOLVE_TIMEOUT_S
    )
    return sorted({str(info[4][0]) for info in infos})


@dataclass(frozen=True, slots=True)
class CheckedUrl:
    """A URL that passed the guard, and the address a delivery connects to."""

    url: str
    scheme: str
    host: str
    port: int
    address: str


@dataclass(frozen=True, slots=True)
class AllowList:
    hosts: frozenset[str]
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]

    @classmethod
    def parse(cls, items: Iterable[str]) -> AllowList:
        hosts: set[str] = set()
        networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for item in (i.strip().lower() for i in items):
            if not item:
                continue
            try:
                networks.append(ipaddress.ip_network(item.strip("[]"), strict=False))
            except ValueError:
                hosts.add(item)
        return cls(frozenset(hosts), tuple(networks))

    def allows(self, host: str, address: IpAddress) -> bool:
        return host.lower() in self.hosts or any(address in network for network in self.networks)


def _refused_kind(address: IpAddress) -> str | None:
    if address in METADATA_ADDRESSES:
        return "metadata"
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return _refused_kind(address.ipv4_mapped)
    for kind, hit in (
        ("loopback", address.is_loopback),
        ("unspecified", address.is_unspecified),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
    ):
        if hit:
            return kind
    return None


def split_url(url: str) -> SplitResult:
    if len(url) > URL_LENGTH_MAX:
        raise WebhookUrlRefusedError("the URL is too long", {"max_length": URL_LENGTH_MAX})
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise WebhookUrlRefusedError("the URL must be http(s)://host/...", {"url": url})
    if parts.username or parts.password:
        raise WebhookUrlRefusedError("the URL must not carry credentials", {})
    try:
        parts.port  # noqa: B018 - a bad port raises here
    except ValueError as exc:
        raise WebhookUrlRefusedError("the URL's port is not valid", {"url": url}) from exc
    return parts


class AddressGuard:
    def __init__(self, allowed: Iterable[str], resolver: Resolver = system_resolver) -> None:
        self.allow = AllowList.parse(allowed)
        self.resolver = resolver

    async def check(self, url: str) -> CheckedUrl:
        """The URL and the address to connect to, or `WebhookUrlRefusedError` naming the reason."""
        parts = split_url(url)
        host = parts.hostname
        assert host is not None
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            literal: IpAddress | None = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        if literal is not None:
            addresses = [str(literal)]
        else:
            try:
                addresses = await self.resolver(host, port)
            except (OSError, TimeoutError) as exc:
                raise WebhookUrlRefusedError("the URL's host does not resolve", {"host": host}) from exc
            if not addresses:
                raise WebhookUrlRefusedError("the URL's host does not resolve", {"host": host})
        # Every address must pass: a name that resolves to one public and one private address
        # would otherwise reach the private one on some connections.
        for text in addresses:
            address = ipaddress.ip_address(text.split("%")[0])
            kind = _refused_kind(address)
            if kind is not None and not (kind != "metadata" and self.allow.allows(host, address)):
                raise WebhookUrlRefusedError(
                    f"the URL's host resolves to a {kind} address",
                    {"host": host, "address": str(address), "kind": kind},
                )
        return CheckedUrl(url, parts.scheme, host, port, addresses[0].split("%")[0])
