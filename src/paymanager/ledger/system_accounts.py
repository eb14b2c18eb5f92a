"""System accounts: ids derived from names, created at start-up and verified on every start.

`system.nostro.ipps.THB`, `system.fees.THB`, ... are ordinary ledger accounts whose ids every
process derives from the name alone, so nothing has to be looked up or stored to find them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from paymanager.ledger.port import Ledger
from paymanager.ledger.types import U128_MAX, Account, AccountFlags, LedgerError

# Part of the id derivation: changing it changes every system account's id.
_ID_DOMAIN = b"paymanager.ledger.account:"
# Flags that describe a batch, not an account, and so do not take part in the comparison.
_BATCH_FLAGS = int(AccountFlags.LINKED)


class SystemAccountMismatchError(LedgerError):
    """An account exists with the id of a system account but with a different ledger, code or flags."""


def account_id_for(name: str) -> int:
    """A deterministic u128 id for `name`, never 0 and never 2^128 - 1 (TigerBeetle's reserved ids)."""
    if not name:
        raise ValueError("an account name must not be empty")
    digest = hashlib.blake2b(_ID_DOMAIN + name.encode(), digest_size=16).digest()
    value = int.from_bytes(digest, "big")
    # The two reserved values have a 2^-127 chance; map them to fixed valid ids rather than loop.
    if value == 0:
        return 1
    if value == U128_MAX:
        return U128_MAX - 1
    return value


async def ensure_accounts(ledger: Ledger, accounts: Sequence[Account]) -> list[Account]:
    """Create the accounts that are missing, and check that the others match; returns them all.

    Safe when several processes start at once: an account created by another process meanwhile
    answers `exists` and is then compared like any other.
    Raises `SystemAccountMismatchError` naming every account whose ledger, code or flags differ.
    """
    wanted = {a.id: a for a in accounts}
    if len(wanted) != len(accounts):
        raise ValueError("ensure_accounts was given the same account id twice")
    existing = {a.id: a for a in await ledger.lookup_accounts(list(wanted))}
    missing = [a for a in accounts if a.id not in existing]
    if missing:
        results = await ledger.create_accounts(missing)
        failed = [
            (a, r)
            for a, r in zip(missing, results, strict=True)
            if not r.ok and "exists" not in r.result.name
        ]
        if failed:
            detail = ", ".join(f"{a.id}: {r.result.name}" for a, r in failed)
            raise SystemAccountMismatchError(f"could not create system accounts: {detail}")
        existing = {a.id: a for a in await ledger.lookup_accounts(list(wanted))}
    problems = []
    for account in accounts:
        found = existing.get(account.id)
        if found is None:
            problems.append(f"{account.id}: missing after creation")
            continue
        for name in ("ledger", "code", "flags"):
            want, have = getattr(account, name), getattr(found, name)
            if name == "flags":
                want, have = want & ~_BATCH_FLAGS, have & ~_BATCH_FLAGS
            if want != have:
                problems.append(f"{account.id}: {name} is {have}, expected {want}")
    if problems:
        raise SystemAccountMismatchError("system accounts do not match: " + "; ".join(problems))
    return [existing[a.id] for a in accounts]
