"""Every example the `paymanager` help texts give names a command and options that exist, and runs
successfully on a migrated database with the components' system accounts (placeholders in capitals
are filled with a real service and account)."""

from __future__ import annotations

import asyncio
import re

import asyncpg
import pytest

from paymanager.application.accounts.use_cases import OpenAccount, open_account
from paymanager.application.context import Payments
from paymanager.application.services.use_cases import create_service
from paymanager.domain.channels import AccountKind
from tests.support.cli_help import help_examples, leaf_commands
from tests.support.processes import paymanager_env, run_cli

pytestmark = pytest.mark.slow

# A placeholder is a whole argument in capitals (SERVICE_ID), not a part of one (system.funding.THB).
PLACEHOLDER = re.compile(r"[A-Z][A-Z_]{2,}")
# Values that are words of the CLI, not placeholders.
NOT_PLACEHOLDERS = {"MANUAL_REVIEW"}
EXAMPLES = help_examples()


def test_the_help_gives_examples() -> None:
    assert len(EXAMPLES) >= 5, EXAMPLES


@pytest.mark.parametrize("argv", EXAMPLES, ids=[" ".join(a) for a in EXAMPLES])
def test_each_example_names_a_command_and_options_that_exist(argv: list[str]) -> None:
    commands = leaf_commands()
    name = next(
        (n for n in sorted(commands, key=len, reverse=True) if argv[: len(n.split())] == n.split()), None
    )
    assert name is not None, f"no command {' '.join(argv)}"
    command = commands[name]
    options = {opt for param in command.params for opt in getattr(param, "opts", [])}
    given = [word for word in argv[len(name.split()) :] if word.startswith("--")]
    assert set(given) <= options, f"{name}: {sorted(set(given) - options)} not among {sorted(options)}"


@pytest.mark.parametrize("argv", EXAMPLES, ids=[" ".join(a) for a in EXAMPLES])
async def test_each_example_runs(
    argv: list[str], payments: Payments, pool: asyncpg.Pool, database_url: str
) -> None:
    async with pool.acquire() as conn:
        service, _ = await create_service(conn, payments.box, "example-shop", admin=False)
        account = await open_account(payments, conn, service, OpenAccount(AccountKind.USER, "THB"))
    values = {"SERVICE_ID": service.id, "ACCOUNT_ID": str(account.id)}
    filled = []
    for word in argv:
        if PLACEHOLDER.fullmatch(word) and word not in NOT_PLACEHOLDERS:
            assert word in values, f"an example's placeholder this test cannot fill: {word}"
            word = values[word]
        filled.append(word)
    result = await asyncio.to_thread(run_cli, filled, paymanager_env(database_url))
    assert result.returncode == 0, f"paymanager {' '.join(filled)}: {result.stdout}{result.stderr[-800:]}"
    assert "Traceback" not in result.stderr
