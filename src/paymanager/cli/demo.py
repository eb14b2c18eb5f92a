"""The demo that `make run` shows: real money movements through the real API, with a progress display.

It registers two services, opens accounts, funds them with admin transfers, then sends peer-to-peer
intents (quote, create, confirm) and follows each until the outbox worker has settled it; with the
psp-worker role it then sends payouts through each PSP of PSP_NAMES (ipps-, qp- and wise-transfer, in
turn) to the sandbox PSPs `run --demo` serves.
It ends with the balances and the ledger's own verification (sum of debits = sum of credits).
Everything goes over HTTP with signed requests, exactly as a client of paymanager would do it.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import httpx
import orjson
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from paymanager.api.signing import signed_headers

if TYPE_CHECKING:
    from paymanager.bootstrap import Components
    from paymanager.db.pool import Conn

CURRENCY = "THB"
FUNDING_SATANG = 5_000_000
SETTLE_TIMEOUT_S = 60.0
# Payouts the demo sends through the sandbox PSPs (spread over the PSPs of PSP_NAMES) when this
# process runs the psp-worker role.
DEMO_PAYOUTS = 21


class DemoClient:
    """Signs every request (DESIGN §7). A signature is accepted once and two identical requests in the
    same second would sign alike, so every request carries a unique `nonce` query parameter."""

    def __init__(self, http: httpx.AsyncClient, service_id: str, secret: str) -> None:
        self.http = http
        self.service_id = service_id
        self.secret = secret.encode()
        self._nonce = 0

    async def call(self, method: str, path: str, payload: Any = None) -> Any:
        body = b"" if payload is None else orjson.dumps(payload)
        self._nonce += 1
        target = path + ("&" if "?" in path else "?") + f"nonce={uuid.uuid4().hex[:8]}{self._nonce}"
        headers = signed_headers(self.service_id, self.secret, method, target, int(time.time()), body)
        if body:
            headers["Content-Type"] = "application/json"
        if method == "POST":
            headers["Idempotency-Key"] = str(uuid.uuid4())
        response = await self.http.request(method, target, content=body, headers=headers)
        if response.status_code >= 400:
            raise RuntimeError(f"{method} {path} answered {response.status_code}: {response.text}")
        return response.json()

    async def settle(self, intent: dict[str, Any]) -> dict[str, Any]:
        """Confirm an intent, then follow it until it leaves `confirmed`."""
        current: dict[str, Any] = await self.call("POST", f"/intents/{intent['id']}/confirm")
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        delay = 0.01
        while current["status"] == "confirmed" and time.monotonic() < deadline:
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.25)
            current = await self.call("GET", f"/intents/{intent['id']}")
        return current


@dataclass
class DemoResult:
    settled: int
    failed: int
    seconds: float
    balances: list[tuple[str, dict[str, Any]]]
    ledger_ok: bool | None
    ledger_detail: str
    payouts_settled: int = 0
    payouts_other: int = 0
    payout_psps: tuple[str, ...] = ()


def payout_channels_of(psp_names: Sequence[str]) -> tuple[str, ...]:
    """The payout channels of the PSPs served (PSP_NAMES), in its order."""
    from paymanager.domain.channels import PAYOUT_CHANNEL_PSPS

    by_psp = {psp: channel for channel, psp in PAYOUT_CHANNEL_PSPS.items()}
    return tuple(by_psp[name] for name in psp_names if name in by_psp)


async def register_services(conn: Conn, kek: str | None) -> tuple[tuple[str, str], tuple[str, str]]:
    """An admin service (funds accounts) and a plain one (moves money), both named for this run."""
    from paymanager.adapters.secret_box import SecretBox
    from paymanager.application.services.use_cases import create_service

    box = SecretBox.from_config(kek, warn=False)
    suffix = uuid.uuid4().hex[:6]
    admin, admin_secret = await create_service(conn, box, f"demo-admin-{suffix}", admin=True)
    shop, shop_secret = await create_service(conn, box, f"demo-wallet-{suffix}", admin=False)
    return (admin.id, admin_secret), (shop.id, shop_secret)


async def run_demo(
    base_url: str,
    admin: tuple[str, str],
    wallet: tuple[str, str],
    *,
    accounts: int,
    intents: int,
    concurrency: int,
    console: Console,
    payouts: int = 0,
    payout_channels: Sequence[str] = ("ipps-transfer",),
) -> DemoResult:
    limits = httpx.Limits(max_connections=concurrency + 2)
    async with httpx.AsyncClient(base_url=base_url, timeout=30, limits=limits) as http:
        boss = DemoClient(http, *admin)
        client = DemoClient(http, *wallet)
        progress = Progress(
            TextColumn("{task.description:<28}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        )
        with progress:
            opening = progress.add_task("opening accounts", total=accounts)
            ids: list[str] = []
            for _ in range(accounts):
                ids.append(
                    (await client.call("POST", "/accounts", {"kind": "user", "currency": CURRENCY}))["id"]
                )
                progress.advance(opening)
            funding = progress.add_task("funding (admin-transfer)", total=accounts)

            async def fund(account_id: str) -> None:
                payload = {
                    "channel": "admin-transfer",
                    "amount": FUNDING_SATANG,
                    "currency": CURRENCY,
                    "payee_account_id": account_id,
                }
                await boss.settle(await boss.call("POST", "/intents", payload))
                progress.advance(funding)

            await asyncio.gather(*(fund(account_id) for account_id in ids))
            moving = progress.add_task("p2p intents settled", total=intents)
            outcomes: list[str] = []
            gate = asyncio.Semaphore(concurrency)
            started = time.perf_counter()

            async def move(_: int) -> None:
                payer, payee = random.sample(ids, 2)
                amount = random.randint(100, 50_000)
                async with gate:
                    await client.call(
                        "POST",
                        "/intents/quote",
                        {"channel": "internal-p2p", "amount": amount, "currency": CURRENCY},
                    )
                    intent = await client.call(
                        "POST",
                        "/intents",
                        {
                            "channel": "internal-p2p",
                            "amount": amount,
                            "currency": CURRENCY,
                            "payer_account_id": payer,
                            "payee_account_id": payee,
                            "description": "demo transfer",
                        },
                    )
                    outcomes.append((await client.settle(intent))["status"])
                progress.advance(moving)

            await asyncio.gather(*(move(n) for n in range(intents)))
            seconds = time.perf_counter() - started
            payout_outcomes: list[str] = []
            if payouts and payout_channels:
                paying = progress.add_task("payouts through the PSPs", total=payouts)

                async def pay_out(n: int) -> None:
                    payload = {
                        "channel": payout_channels[n % len(payout_channels)],
                        "amount": random.randint(1_000, 20_000),
                        "currency": CURRENCY,
                        "payer_account_id": random.choice(ids),
                        "metadata": {"beneficiary_account": f"{random.randint(0, 10**10 - 1):010d}"},
                        "description": "demo payout",
                    }
                    async with gate:
                        intent = await client.call("POST", "/intents", payload)
                        payout_outcomes.append((await client.settle(intent))["status"])
                    progress.advance(paying)

                await asyncio.gather(*(pay_out(n) for n in range(payouts)))
        balances = [
            (account_id, await client.call("GET", f"/accounts/{account_id}/balance")) for account_id in ids
        ]
    return DemoResult(
        outcomes.count("settled"), len(outcomes) - outcomes.count("settled"), seconds, balances, None, "",
        payout_outcomes.count("settled"), len(payout_outcomes) - payout_outcomes.count("settled"),
        tuple(channel.removesuffix("-transfer") for channel in payout_channels) if payouts else (),
    )  # fmt: skip


def print_summary(console: Console, result: DemoResult) -> None:
    table = Table(title=f"Balances ({CURRENCY}, minor units)")
    for column in ("account", "posted", "pending", "available"):
        table.add_column(column, justify="right" if column != "account" else "left")
    total = 0
    for account_id, balance in result.balances:
        total += int(balance["posted"])
        table.add_row(
            account_id, f"{balance['posted']:,}", f"{balance['pending']:,}", f"{balance['available']:,}"
        )
    table.add_row("total", f"{total:,}", "", "", style="bold")
    console.print(table)
    rate = (result.settled + result.failed) / result.seconds if result.seconds else 0.0
    console.print(
        f"[bold]{result.settled}[/] intents settled, {result.failed} not settled, in {result.seconds:.1f} s "
        f"({rate:.0f}/s through the signed API and the outbox worker)."
    )
    if result.payouts_settled or result.payouts_other:
        console.print(
            f"[bold]{result.payouts_settled}[/] payouts settled through the sandbox PSPs, "
            f"{result.payouts_other} not settled (psp-worker, {', '.join(result.payout_psps)} over HTTP)."
        )
    if result.ledger_ok is not None:
        verdict = "[green]holds[/]" if result.ledger_ok else "[red]VIOLATED[/]"
        console.print(f"Ledger invariant (sum of debits = sum of credits): {verdict} {result.ledger_detail}")


async def demo_in_runtime(components: Components, *, accounts: int, intents: int, concurrency: int) -> None:
    """Run the demo against this process's own API once it listens (`paymanager run --demo`)."""
    console = Console(stderr=True)
    settings = components.settings
    kek = settings.psp_config_kek.get_secret_value() if settings.psp_config_kek else None
    async with components.database.pool.acquire() as conn:
        admin, wallet = await register_services(conn, kek)
    base_url = f"http://127.0.0.1:{settings.port}"
    console.rule("[bold]paymanager demo")
    from paymanager.roles import Role

    payouts = DEMO_PAYOUTS if Role.PSP_WORKER in settings.worker_roles else 0
    result = await run_demo(
        base_url, admin, wallet, accounts=accounts, intents=intents, concurrency=concurrency, console=console,
        payouts=payouts, payout_channels=payout_channels_of(settings.psp_names),
    )  # fmt: skip
    from paymanager.ledger import PostgresLedger

    # TigerBeetle keeps the invariants `verify` checks (debits equal credits) by construction.
    if isinstance(components.ledger, PostgresLedger):
        outcome = await components.ledger.verify()
        result.ledger_ok = outcome.ok
        result.ledger_detail = (
            f"({outcome.transfers:,} transfers, {outcome.debits_posted:,} posted)"
            if outcome.ok
            else "; ".join(outcome.violations)
        )
    print_summary(console, result)
    console.print(
        f"\npaymanager keeps running: API docs at {base_url}/docs, metrics at {base_url}/metrics. "
        f"The demo's services: admin [bold]{admin[0]}[/] and wallet [bold]{wallet[0]}[/] "
        "(secrets are not shown; create your own with `paymanager services create NAME`). Ctrl-C stops."
    )


def demo_command(
    url: Annotated[str, typer.Option(help="Base URL of a running paymanager api.")] = "http://127.0.0.1:8080",
    accounts: Annotated[int, typer.Option(min=2, max=1_000, help="User accounts to open.")] = 10,
    intents: Annotated[int, typer.Option(min=1, max=100_000, help="p2p intents to send.")] = 300,
    concurrency: Annotated[int, typer.Option(min=1, max=256, help="Intents in flight at once.")] = 16,
    payouts: Annotated[
        int, typer.Option(min=0, max=10_000, help="Payouts to send, in turn through each PSP of PSP_NAMES.")
    ] = 0,
) -> None:
    """Move money through a running paymanager (its api and outbox-worker roles; psp-worker for
    `--payouts`) and show the result."""
    from paymanager.cli._command import load_settings, run_async
    from paymanager.db.database import opened

    settings = load_settings()
    kek = settings.psp_config_kek.get_secret_value() if settings.psp_config_kek else None
    console = Console()

    async def go() -> DemoResult:
        async with (
            opened(settings, application_name="paymanager:demo", max_size=1) as database,
            database.pool.acquire() as conn,
        ):
            admin, wallet = await register_services(conn, kek)
        return await run_demo(
            url, admin, wallet, accounts=accounts, intents=intents, concurrency=concurrency, console=console,
            payouts=payouts, payout_channels=payout_channels_of(settings.psp_names),
        )  # fmt: skip

    result = run_async(go())
    print_summary(console, result)
    raise typer.Exit(0 if result.failed == 0 and result.payouts_other == 0 else 1)


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_command)
