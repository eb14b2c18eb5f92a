"""`paymanager ledger accounts|balance|transfers|verify` against a real database."""

from __future__ import annotations

import asyncio

import asyncpg
from typer.testing import CliRunner, Result

from paymanager.cli import app
from paymanager.ledger import Account, AccountFlags, PostgresLedger, Transfer, account_id_for


async def invoke(database_url: str, *args: str) -> Result:
    runner = CliRunner()
    env = {"DATABASE_URL": database_url, "WORKER_ROLES": "api"}
    # The CLI runs its own event loop, so it goes to a thread of its own.
    return await asyncio.to_thread(runner.invoke, app, ["ledger", *args], env=env)


async def seed(pool: asyncpg.Pool) -> tuple[int, int]:
    ledger = PostgresLedger(pool)
    fees = account_id_for("system.fees.THB")
    wallet = 77
    await ledger.create_accounts(
        [Account(fees, ledger=764, code=2), Account(wallet, ledger=764, code=1, flags=AccountFlags.HISTORY)]
    )
    await ledger.create_transfers(
        [
            Transfer(1, fees, wallet, 1500, ledger=764, code=1),
            Transfer(2, wallet, fees, 200, ledger=764, code=9),
        ]
    )
    return fees, wallet


async def test_ledger_commands_show_accounts_balances_and_transfers(
    database_url: str, pool: asyncpg.Pool
) -> None:
    fees, wallet = await seed(pool)
    listed = await invoke(database_url, "accounts", "--ledger", "764")
    assert listed.exit_code == 0, listed.output
    assert str(fees) in listed.output
    assert str(wallet) in listed.output
    by_name = await invoke(database_url, "balance", "system.fees.THB")
    assert by_name.exit_code == 0, by_name.output
    assert "posted     -1300" in by_name.output
    history = await invoke(database_url, "transfers", str(wallet), "--code", "9")
    assert history.exit_code == 0, history.output
    assert len(history.output.strip().splitlines()) == 2  # the header and transfer 2
    missing = await invoke(database_url, "balance", "12345")
    assert missing.exit_code == 1


async def test_ledger_verify_exits_1_when_a_balance_disagrees_with_its_transfers(
    database_url: str, pool: asyncpg.Pool
) -> None:
    _, wallet = await seed(pool)
    healthy = await invoke(database_url, "verify")
    assert healthy.exit_code == 0, healthy.output
    assert "debits_posted    1700" in healthy.output
    await pool.execute(
        "UPDATE ledger_account SET credits_posted = credits_posted + 1 WHERE id = $1",
        f"{wallet:032x}",
    )
    broken = await invoke(database_url, "verify")
    assert broken.exit_code == 1
    assert "sum of debits_posted 1700 != sum of credits_posted 1701" in broken.output
    assert f"account {wallet}" in broken.output
