"""A small reference model of the ledger's semantics, written for clarity rather than speed.

It is the oracle of the model-based tests: the ledgers (the in-memory batch engine and the
PostgreSQL ledger) must give the same results and balances for the same sequence of batches.
It shares no code with `paymanager.ledger` beyond the public types, and handles linked chains by
copying the whole state (rather than journalling changes as the engine does).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace

from paymanager.ledger import AMOUNT_MAX, Account, AccountFlags, Transfer, TransferFlags
from paymanager.ledger import CreateAccountResult as AR
from paymanager.ledger import CreateTransferResult as TR

LIMIT = (1 << 63) - 1
MAX_ID = (1 << 128) - 1
SECOND = 1_000_000_000
TRANSIENT = {
    TR.debit_account_not_found,
    TR.credit_account_not_found,
    TR.pending_transfer_not_found,
    TR.exceeds_credits,
    TR.exceeds_debits,
    TR.debit_account_already_closed,
    TR.credit_account_already_closed,
}
SUPPORTED_TRANSFER_FLAGS = 0b111111
SUPPORTED_ACCOUNT_FLAGS = 0b101111


@dataclass
class ModelState:
    accounts: dict[int, Account] = field(default_factory=dict)
    transfers: dict[int, Transfer] = field(default_factory=dict)
    status: dict[int, str] = field(
        default_factory=dict
    )  # pending transfer id -> pending/posted/voided/expired
    expires_at: dict[int, int] = field(default_factory=dict)  # pending transfer id -> ns (absent: none)


class Model:
    def __init__(self) -> None:
        self.state = ModelState()
        self.failed: dict[int, TR] = {}  # burned ids survive chain rollbacks

    # --- batches -------------------------------------------------------------------------------

    def create_accounts(self, batch: list[Account], now: int) -> list[AR]:
        return self._batch(
            batch,
            lambda a: self._account(a, now),
            AR.created,
            AR.linked_event_failed,
            AR.linked_event_chain_open,
        )

    def create_transfers(self, batch: list[Transfer], now: int) -> list[TR]:
        return self._batch(
            batch,
            lambda t: self._transfer(t, now),
            TR.created,
            TR.linked_event_failed,
            TR.linked_event_chain_open,
        )

    def _batch(self, batch, apply, created, linked_failed, chain_open):  # type: ignore[no-untyped-def]
        results = []
        i = 0
        while i < len(batch):
            # A chain runs from i through the first event without the linked flag (or the batch end).
            j = i
            while j < len(batch) - 1 and batch[j].flags & 1:
                j += 1
            chain = batch[i : j + 1]
            if len(chain) == 1 and not chain[0].flags & 1:
                results.append(apply(chain[0]))
                i = j + 1
                continue
            saved = copy.deepcopy(self.state)
            chain_results = [linked_failed] * len(chain)
            for k, event in enumerate(chain):
                last_of_batch = i + k == len(batch) - 1
                result = chain_open if (last_of_batch and event.flags & 1) else apply(event)
                if result != created:
                    self.state = saved
                    chain_results = [linked_failed] * len(chain)
                    chain_results[k] = result
                    break
                chain_results[k] = result
            if j == len(batch) - 1 and batch[j].flags & 1:
                chain_results[-1] = chain_open  # TigerBeetle: checked before the broken chain
            results.extend(chain_results)
            i = j + 1
        return results

    # --- accounts ------------------------------------------------------------------------------

    def _account(self, a: Account, now: int) -> AR:
        if a.timestamp:
            return AR.timestamp_must_be_zero
        if a.flags & ~SUPPORTED_ACCOUNT_FLAGS:
            return AR.reserved_flag
        if a.id == 0:
            return AR.id_must_not_be_zero
        if a.id == MAX_ID:
            return AR.id_must_not_be_int_max
        e = self.state.accounts.get(a.id)
        if e is not None:
            for name, result in [
                ("flags", AR.exists_with_different_flags),
                ("user_data_128", AR.exists_with_different_user_data_128),
                ("user_data_64", AR.exists_with_different_user_data_64),
                ("user_data_32", AR.exists_with_different_user_data_32),
                ("ledger", AR.exists_with_different_ledger),
                ("code", AR.exists_with_different_code),
            ]:
                if getattr(a, name) != getattr(e, name):
                    return result
            return AR.exists
        if a.flags & 2 and a.flags & 4:
            return AR.flags_are_mutually_exclusive
        for name, result in [
            ("debits_pending", AR.debits_pending_must_be_zero),
            ("debits_posted", AR.debits_posted_must_be_zero),
            ("credits_pending", AR.credits_pending_must_be_zero),
            ("credits_posted", AR.credits_posted_must_be_zero),
        ]:
            if getattr(a, name):
                return result
        if a.ledger == 0:
            return AR.ledger_must_not_be_zero
        if a.code == 0:
            return AR.code_must_not_be_zero
        self.state.accounts[a.id] = replace(a, timestamp=now)
        return AR.created

    # --- transfers -----------------------------------------------------------------------------

    def _transfer(self, t: Transfer, now: int) -> TR:
        result = self._transfer_result(t, now)
        if result in TRANSIENT:
            self.failed[t.id] = result
        return result

    def _transfer_result(self, t: Transfer, now: int) -> TR:
        f = TransferFlags
        if t.timestamp:
            return TR.timestamp_must_be_zero
        if t.flags & ~SUPPORTED_TRANSFER_FLAGS:
            return TR.reserved_flag
        if t.id == 0:
            return TR.id_must_not_be_zero
        if t.id == MAX_ID:
            return TR.id_must_not_be_int_max
        if t.id in self.state.transfers:
            return self._exists(t, self.state.transfers[t.id])
        if t.id in self.failed:
            return TR.id_already_failed
        post, void, pending = (
            t.flags & f.POST_PENDING_TRANSFER,
            t.flags & f.VOID_PENDING_TRANSFER,
            t.flags & f.PENDING,
        )
        balancing = t.flags & (f.BALANCING_DEBIT | f.BALANCING_CREDIT)
        if (pending and (post or void)) or (post and void) or ((post or void) and balancing):
            return TR.flags_are_mutually_exclusive
        if post or void:
            return self._post_or_void(t, now)
        return self._single(t, now)

    def _exists(self, t: Transfer, e: Transfer) -> TR:
        two_phase = bool(t.flags & 12)
        if t.flags != e.flags:
            return TR.exists_with_different_flags
        if t.pending_id != e.pending_id:
            return TR.exists_with_different_pending_id
        if t.timeout != e.timeout:
            return TR.exists_with_different_timeout

        def differs(name: str) -> bool:
            mine = getattr(t, name)
            return mine != getattr(e, name) and not (two_phase and mine == 0)

        if differs("debit_account_id"):
            return TR.exists_with_different_debit_account_id
        if differs("credit_account_id"):
            return TR.exists_with_different_credit_account_id
        if t.flags & 4:
            amount_differs = t.amount not in (AMOUNT_MAX, e.amount)
        elif t.flags & 8:
            amount_differs = t.amount not in (0, e.amount)
        elif t.flags & 48:
            amount_differs = t.amount < e.amount
        else:
            amount_differs = t.amount != e.amount
        if amount_differs:
            return TR.exists_with_different_amount
        for name, result in [
            ("user_data_128", TR.exists_with_different_user_data_128),
            ("user_data_64", TR.exists_with_different_user_data_64),
            ("user_data_32", TR.exists_with_different_user_data_32),
            ("ledger", TR.exists_with_different_ledger),
            ("code", TR.exists_with_different_code),
        ]:
            if differs(name):
                return result
        return TR.exists

    def _single(self, t: Transfer, now: int) -> TR:
        s = self.state
        checks = [
            (t.debit_account_id == 0, TR.debit_account_id_must_not_be_zero),
            (t.debit_account_id == MAX_ID, TR.debit_account_id_must_not_be_int_max),
            (t.credit_account_id == 0, TR.credit_account_id_must_not_be_zero),
            (t.credit_account_id == MAX_ID, TR.credit_account_id_must_not_be_int_max),
            (t.debit_account_id == t.credit_account_id, TR.accounts_must_be_different),
            (t.pending_id != 0, TR.pending_id_must_be_zero),
            (not t.flags & 2 and t.timeout != 0, TR.timeout_reserved_for_pending_transfer),
            (t.ledger == 0, TR.ledger_must_not_be_zero),
            (t.code == 0, TR.code_must_not_be_zero),
            (t.debit_account_id not in s.accounts, TR.debit_account_not_found),
            (t.credit_account_id not in s.accounts, TR.credit_account_not_found),
        ]
        for failed, result in checks:
            if failed:
                return result
        dr, cr = s.accounts[t.debit_account_id], s.accounts[t.credit_account_id]
        if dr.ledger != cr.ledger:
            return TR.accounts_must_have_the_same_ledger
        if t.ledger != dr.ledger:
            return TR.transfer_must_have_the_same_ledger_as_accounts
        if dr.flags & AccountFlags.CLOSED:
            return TR.debit_account_already_closed
        if cr.flags & AccountFlags.CLOSED:
            return TR.credit_account_already_closed
        amount = t.amount
        if t.flags & TransferFlags.BALANCING_DEBIT:
            amount = min(amount, max(0, dr.credits_posted - dr.debits_posted - dr.debits_pending))
        if t.flags & TransferFlags.BALANCING_CREDIT:
            amount = min(amount, max(0, cr.debits_posted - cr.credits_posted - cr.credits_pending))
        pending = bool(t.flags & 2)
        overflow = [
            (pending and dr.debits_pending + amount > LIMIT, TR.overflows_debits_pending),
            (pending and cr.credits_pending + amount > LIMIT, TR.overflows_credits_pending),
            (not pending and dr.debits_posted + amount > LIMIT, TR.overflows_debits_posted),
            (not pending and cr.credits_posted + amount > LIMIT, TR.overflows_credits_posted),
            (dr.debits_pending + dr.debits_posted + amount > LIMIT, TR.overflows_debits),
            (cr.credits_pending + cr.credits_posted + amount > LIMIT, TR.overflows_credits),
        ]
        for failed, result in overflow:
            if failed:
                return result
        if dr.flags & 2 and dr.debits_pending + dr.debits_posted + amount > dr.credits_posted:
            return TR.exceeds_credits
        if cr.flags & 4 and cr.credits_pending + cr.credits_posted + amount > cr.debits_posted:
            return TR.exceeds_debits
        if pending:
            s.accounts[dr.id] = replace(dr, debits_pending=dr.debits_pending + amount)
            cr = s.accounts[cr.id]
            s.accounts[cr.id] = replace(cr, credits_pending=cr.credits_pending + amount)
            s.status[t.id] = "pending"
            if t.timeout:
                s.expires_at[t.id] = now + t.timeout * SECOND
        else:
            s.accounts[dr.id] = replace(dr, debits_posted=dr.debits_posted + amount)
            cr = s.accounts[cr.id]
            s.accounts[cr.id] = replace(cr, credits_posted=cr.credits_posted + amount)
        s.transfers[t.id] = replace(t, amount=amount, timestamp=now)
        return TR.created

    def _post_or_void(self, t: Transfer, now: int) -> TR:
        s = self.state
        if t.pending_id == 0:
            return TR.pending_id_must_not_be_zero
        if t.pending_id == MAX_ID:
            return TR.pending_id_must_not_be_int_max
        if t.pending_id == t.id:
            return TR.pending_id_must_be_different
        if t.timeout:
            return TR.timeout_reserved_for_pending_transfer
        p = s.transfers.get(t.pending_id)
        if p is None:
            return TR.pending_transfer_not_found
        if not p.flags & 2:
            return TR.pending_transfer_not_pending
        if t.debit_account_id and t.debit_account_id != p.debit_account_id:
            return TR.pending_transfer_has_different_debit_account_id
        if t.credit_account_id and t.credit_account_id != p.credit_account_id:
            return TR.pending_transfer_has_different_credit_account_id
        if t.ledger and t.ledger != p.ledger:
            return TR.pending_transfer_has_different_ledger
        if t.code and t.code != p.code:
            return TR.pending_transfer_has_different_code
        void = bool(t.flags & 8)
        if void:
            amount = p.amount if t.amount == 0 else t.amount
        else:
            amount = p.amount if t.amount == AMOUNT_MAX else t.amount
        if amount > p.amount:
            return TR.exceeds_pending_transfer_amount
        if void and amount < p.amount:
            return TR.pending_transfer_has_different_amount
        status = s.status[p.id]
        if status == "posted":
            return TR.pending_transfer_already_posted
        if status == "voided":
            return TR.pending_transfer_already_voided
        if status == "expired" or (p.id in s.expires_at and s.expires_at[p.id] <= now):
            return TR.pending_transfer_expired
        dr, cr = s.accounts[p.debit_account_id], s.accounts[p.credit_account_id]
        if dr.flags & AccountFlags.CLOSED:
            return TR.debit_account_already_closed
        if cr.flags & AccountFlags.CLOSED:
            return TR.credit_account_already_closed
        posted = 0 if void else amount
        if dr.debits_posted + posted > LIMIT:
            return TR.overflows_debits_posted
        if cr.credits_posted + posted > LIMIT:
            return TR.overflows_credits_posted
        s.accounts[dr.id] = replace(
            dr, debits_pending=dr.debits_pending - p.amount, debits_posted=dr.debits_posted + posted
        )
        cr = s.accounts[cr.id]
        s.accounts[cr.id] = replace(
            cr, credits_pending=cr.credits_pending - p.amount, credits_posted=cr.credits_posted + posted
        )
        s.status[p.id] = "voided" if void else "posted"
        s.transfers[t.id] = replace(
            t,
            debit_account_id=p.debit_account_id,
            credit_account_id=p.credit_account_id,
            amount=amount,
            user_data_128=t.user_data_128 or p.user_data_128,
            user_data_64=t.user_data_64 or p.user_data_64,
            user_data_32=t.user_data_32 or p.user_data_32,
            ledger=p.ledger,
            code=p.code,
            timestamp=now,
        )
        return TR.created

    # --- expiry --------------------------------------------------------------------------------

    def expire(self, now: int) -> int:
        s = self.state
        expired = 0
        for pid, at in s.expires_at.items():
            if s.status[pid] == "pending" and at <= now:
                p = s.transfers[pid]
                dr = s.accounts[p.debit_account_id]
                s.accounts[dr.id] = replace(dr, debits_pending=dr.debits_pending - p.amount)
                cr = s.accounts[p.credit_account_id]
                s.accounts[cr.id] = replace(cr, credits_pending=cr.credits_pending - p.amount)
                s.status[pid] = "expired"
                expired += 1
        return expired

    def balances(self) -> dict[int, tuple[int, int, int, int]]:
        return {
            i: (a.debits_pending, a.debits_posted, a.credits_pending, a.credits_posted)
            for i, a in self.state.accounts.items()
        }
