"""The session-cleanup: expiry of due sessions with their compensations enqueued in the expiry's own
transaction, a bounded batch, and the race of a confirm with the expiry (exactly one wins)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timedelta
from typing import Any

from paymanager.application.sessions.cleanup import CleanupResult, cleanup_expired_sessions
from paymanager.application.sessions.ports import leg_key
from tests.integration.sessions.conftest import Env


async def test_expiry_holding_a_captured_gift_and_a_held_card_compensates_both(env: Env) -> None:
    await env.giftcards.cards(("GC-A", 1_000), ("GC-B", 1_000))
    # GC-B's debit keeps failing: the session stays processing with GC-A captured and the card held.
    await env.giftcards.faults(fail_cards=["GC-B"])
    session = await env.create(
        [("gift_card", "GC-A", 300), ("gift_card", "GC-B", 200), ("card", "tok_held", 500)], ttl_sec=60
    )
    assert (await env.confirm(session["id"])).status_code == 200
    await env.wait_leg(session["id"], 0, "captured")
    await env.wait_leg(session["id"], 2, "authorized")
    await env.wait_job("DEBIT_GIFT", "retryable")

    env.past_expiry(session)
    result = await cleanup_expired_sessions(env.sessions, batch_size=50)
    # GC-A captured and GC-B attempted with an unknown outcome: both cancelled by key; the card released.
    assert result == CleanupResult(scanned=1, expired=1, enqueuedCancelGifts=2, enqueuedReleases=1)
    assert await env.events(session["id"]) == ["session.expired"]

    await env.wait_leg(session["id"], 0, "cancelled")
    await env.wait_leg(session["id"], 1, "cancelled")
    await env.wait_leg(session["id"], 2, "released")
    # The failing debit's retry finds the session ended and sends nothing.
    await env.giftcards.faults(fail_cards=[])
    await env.retry_now("DEBIT_GIFT")
    await env.wait_actions_done()
    assert await env.giftcards.balance("GC-A") == 1_000
    assert await env.giftcards.balance("GC-B") == 1_000
    counters = await env.giftcards.counters()
    assert counters["GC-A"]["cancels_applied"] == 1
    assert counters["GC-B"].get("debits_applied", 0) == 0
    card_leg = uuid.UUID(session["legs"][2]["id"])
    assert (await env.cards.counters())[leg_key(card_leg, "authorize")]["releases_applied"] == 1
    final = await env.get(session["id"])
    assert final["status"] == "expired"
    # A second tick finds nothing: the session expired once.
    assert await cleanup_expired_sessions(env.sessions, batch_size=50) == CleanupResult()


async def test_cleanup_expires_at_most_the_batch_per_tick(env: Env) -> None:
    created = [await env.create([("card", f"tok_{n}", 100)], ttl_sec=30) for n in range(5)]
    env.clock.now = datetime.now().astimezone() + timedelta(seconds=31)
    first = await cleanup_expired_sessions(env.sessions, batch_size=2)
    second = await cleanup_expired_sessions(env.sessions, batch_size=2)
    third = await cleanup_expired_sessions(env.sessions, batch_size=2)
    assert [first.expired, second.expired, third.expired] == [2, 2, 1]
    assert (first.enqueuedReleases, third.enqueuedCancelGifts) == (0, 0)
    for session in created:
        body = await env.get(session["id"])
        assert body["status"] == "expired"
        assert body["legs"][0]["status"] == "released"
    assert await env.cards.counters() == {}


async def test_a_session_not_yet_due_is_left_alone(env: Env) -> None:
    session = await env.create([("card", "tok_x", 100)], ttl_sec=600)
    assert await cleanup_expired_sessions(env.sessions, batch_size=50) == CleanupResult()
    assert (await env.get(session["id"]))["status"] == "open"


async def test_confirm_after_the_expiry_time_expires_the_session_and_starts_nothing(env: Env) -> None:
    session = await env.create([("card", "tok_late", 100)], ttl_sec=60)
    env.past_expiry(session)
    answer = await env.confirm(session["id"])
    assert answer.status_code == 409
    assert answer.json()["error"]["code"] == "session_expired"
    assert (await env.get(session["id"]))["status"] == "expired"
    assert await env.events(session["id"]) == ["session.expired"]
    assert await env.jobs("AUTHORIZE_PSP") == []
    assert await cleanup_expired_sessions(env.sessions, batch_size=50) == CleanupResult()


async def test_confirm_racing_the_expiry_has_one_winner_and_the_loser_is_compensated(env: Env) -> None:
    """Each session is confirmed (the api's clock before its expiry) while a cleanup (at a time past
    it) starts a little before or after. Whoever takes the row first decides; when the confirm won,
    the expiry then ends a processing session, and whatever its actions moved is undone by key, once."""
    cards = [(f"GC-R{n:02d}", 1_000) for n in range(12)]
    delays_s = [0.0, 0.002, 0.01, 0.03, 0.08, 0.2]
    await env.giftcards.cards(*cards)
    await env.giftcards.faults(latency_ms=5, latency_jitter_ms=20)
    # Expiries 10 s apart, so a cleanup at one's expiry finds only it (and earlier ones) due.
    sessions = [
        await env.create([("gift_card", number, 400), ("card", f"tok_r{n}", 100)], ttl_sec=60 + 10 * n)
        for n, (number, _) in enumerate(cards)
    ]

    async def race(n: int, session: dict[str, Any]) -> int:
        expiry = datetime.fromisoformat(session["expires_at"])
        env.clock.now = expiry - timedelta(seconds=1)

        async def expire() -> None:
            await asyncio.sleep(delays_s[n % len(delays_s)])
            await cleanup_expired_sessions(env.sessions, batch_size=50, now=expiry + timedelta(seconds=1))

        answer, _ = await asyncio.gather(env.confirm(session["id"]), expire())
        return answer.status_code

    statuses = [await race(n, session) for n, session in enumerate(sessions)]
    later = datetime.fromisoformat(sessions[-1]["expires_at"]) + timedelta(seconds=1)
    while (await cleanup_expired_sessions(env.sessions, batch_size=50, now=later)).expired:
        pass
    await env.giftcards.faults(latency_ms=0, latency_jitter_ms=0)
    await env.wait_actions_done()

    counters = await env.giftcards.counters()
    outcomes = set()
    for session, (number, balance), status in zip(sessions, cards, statuses, strict=True):
        body = await env.get(session["id"])
        events = await env.events(session["id"])
        card = counters.get(number, {})
        debited = card.get("debits_applied", 0) - card.get("cancels_applied", 0)
        assert status in {200, 409}
        if status == 409:  # the expiry won: nothing was ever sent for this session
            assert body["status"] == "expired"
            assert card == {}
        # A confirmed session may complete before the expiry reaches it; else it expired, once.
        assert (body["status"], events) in [
            ("expired", ["session.expired"]),
            ("completed", ["session.completed"]),
        ]
        assert card.get("debits_applied", 0) <= 1
        assert card.get("cancels_applied", 0) <= 1
        assert debited == (1 if body["status"] == "completed" else 0)
        assert await env.giftcards.balance(number) == balance - 400 * debited
        outcomes.add((status, body["status"], card.get("cancels_applied", 0)))
    # Each compensation was enqueued once per leg.
    for kind in ("CANCEL_GIFT", "RELEASE_HOLD"):
        jobs = await env.jobs(kind)
        assert len({job["unique_key"] for job in jobs}) == len(jobs)
    print("race outcomes (confirm status, session status, cancels applied):", sorted(outcomes))
