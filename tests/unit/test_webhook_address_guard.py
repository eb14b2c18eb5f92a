"""The SSRF guard: addresses inside the network are refused unless allowed; metadata always is."""

from __future__ import annotations

import pytest

from paymanager.application.webhooks.address_guard import AddressGuard, WebhookUrlRefusedError


def resolver_of(names: dict[str, list[str]]):  # type: ignore[no-untyped-def]
    async def resolve(host: str, port: int) -> list[str]:
        del port
        if host not in names:
            raise OSError("no such name")
        return names[host]

    return resolve


NAMES = {
    "public.example": ["93.184.216.34"],
    "loopback.example": ["127.0.0.1"],
    "mixed.example": ["93.184.216.34", "10.1.2.3"],
    "metadata.example": ["169.254.169.254"],
    "v6.example": ["2606:2800:220:1:248:1893:25c8:1946"],
}


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("http://127.0.0.1/hook", "loopback"),
        ("http://10.0.0.1/hook", "private"),
        ("http://192.168.1.5:8080/hook", "private"),
        ("http://172.16.0.1/hook", "private"),
        ("http://169.254.169.254/latest/meta-data", "metadata"),
        ("http://169.254.10.10/hook", "link-local"),
        ("http://[::1]/hook", "loopback"),
        ("http://[fe80::1]/hook", "link-local"),
        ("http://[::ffff:127.0.0.1]/hook", "loopback"),
        ("http://0.0.0.0/hook", "unspecified"),
        ("http://loopback.example/hook", "loopback"),
        ("http://mixed.example/hook", "private"),
        ("http://metadata.example/hook", "metadata"),
    ],
)
async def test_addresses_inside_the_network_are_refused(url: str, kind: str) -> None:
    guard = AddressGuard([], resolver_of(NAMES))
    with pytest.raises(WebhookUrlRefusedError) as refused:
        await guard.check(url)
    assert refused.value.details["kind"] == kind


@pytest.mark.parametrize(
    "url", ["http://public.example/hook", "https://v6.example:8443/x", "https://93.184.216.34/"]
)
async def test_public_addresses_pass_and_name_the_address_to_connect_to(url: str) -> None:
    checked = await AddressGuard([], resolver_of(NAMES)).check(url)
    assert checked.address in ("93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946")


@pytest.mark.parametrize(
    "url",
    [
        "ftp://public.example/",
        "http:///nohost",
        "not a url",
        "http://user:pw@public.example/",
        "http://x:99999/",
    ],
)
async def test_malformed_urls_are_refused(url: str) -> None:
    with pytest.raises(WebhookUrlRefusedError):
        await AddressGuard([], resolver_of(NAMES)).check(url)


async def test_a_name_that_does_not_resolve_is_refused() -> None:
    with pytest.raises(WebhookUrlRefusedError) as refused:
        await AddressGuard([], resolver_of(NAMES)).check("http://nowhere.example/")
    assert "resolve" in refused.value.message


async def test_the_allow_list_names_hosts_addresses_and_networks() -> None:
    by_host = AddressGuard(["loopback.example"], resolver_of(NAMES))
    assert (await by_host.check("http://loopback.example/h")).address == "127.0.0.1"
    with pytest.raises(WebhookUrlRefusedError):
        await by_host.check("http://127.0.0.1/h")
    by_network = AddressGuard(["10.0.0.0/8", "127.0.0.1"], resolver_of(NAMES))
    assert (await by_network.check("http://10.9.9.9/h")).address == "10.9.9.9"
    assert (await by_network.check("http://loopback.example/h")).address == "127.0.0.1"


async def test_the_allow_list_never_opens_the_metadata_service() -> None:
    guard = AddressGuard(["169.254.0.0/16", "metadata.example"], resolver_of(NAMES))
    for url in ("http://169.254.169.254/", "http://metadata.example/"):
        with pytest.raises(WebhookUrlRefusedError):
            await guard.check(url)
