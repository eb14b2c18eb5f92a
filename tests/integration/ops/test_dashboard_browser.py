"""The dashboard and the offline docs in a real browser (Debian's chromium through Playwright), served
by a real `paymanager run` process: login, the queue view (throughput from the database, live
updates), retrying, cancelling and replaying jobs from the page, intent search and an intent's
timeline, the PSP manual review resolved from the page, the balance checks; the refusals of every
action (no login, a bad CSRF token, a non-admin service) with nothing changed; and no request leaving
the machine (every non-local request is blocked and recorded). Screenshots go to the test's
directory; the main ones are kept in docs/screenshots/ (SAVE_SCREENSHOTS=1)."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx
import pytest
from playwright.async_api import Browser, Page, Route, async_playwright, expect

from paymanager.application.psp.balance import BalanceMonitor, nostro_accounts
from paymanager.db.pool import create_pool
from paymanager.jobs import admin as jobs_admin
from paymanager.jobs import enqueue
from tests.integration.psp.conftest import StartPayoutApi
from tests.support.browser import chromium_path, is_local
from tests.support.servers import Service, create_service, start_server

pytestmark = pytest.mark.slow

DOCS = Path(__file__).resolve().parents[3] / "docs" / "screenshots"


class Site:
    def __init__(self, url: str, admin: Service, plain: Service, database_url: str) -> None:
        self.url = url
        self.admin = admin
        self.plain = plain
        self.database_url = database_url
        self.external: list[str] = []


@pytest.fixture
async def site(database_url: str) -> AsyncIterator[Site]:
    process, url, env = start_server(database_url, "api")
    try:
        admin = create_service(env, "dash-admin", admin=True)
        plain = create_service(env, "dash-shop", admin=False)
        yield Site(url, admin, plain, database_url)
    finally:
        process.terminate()
        process.close()


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    executable = chromium_path()
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield launched
        await launched.close()


async def new_page(browser: Browser, site: Site) -> Page:
    context = await browser.new_context()

    async def guard(route: Route) -> None:
        if is_local(route.request.url):
            await route.continue_()
        else:
            site.external.append(route.request.url)
            await route.abort()

    await context.route("**/*", guard)
    return await context.new_page()


async def login(page: Page, site: Site, service: Service) -> None:
    await page.goto(f"{site.url}/dashboard")
    assert page.url.endswith("/dashboard/login")
    await page.fill("#service_id", service.id)
    await page.fill("#secret", service.secret)
    await page.click("button[type=submit]")


async def dead_job(site: Site) -> int:
    pool = await create_pool(site.database_url, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            job_id = (await enqueue(conn, "ops.browser", {"intent_id": str(uuid.uuid4())}, queue="outbox")).id
            await conn.execute(
                "UPDATE job SET state = 'dead', finalized_at = now(), last_error = $2 WHERE id = $1",
                job_id, {"error": "sandbox said no", "attempt": 3},
            )  # fmt: skip
    finally:
        await pool.close()
    return job_id


def shot(tmp_path: Path, name: str) -> Path:
    return tmp_path / f"{name}.png"


def keep(tmp_path: Path, *names: str) -> None:
    """Copy the named screenshots to docs/screenshots/ when SAVE_SCREENSHOTS is set."""
    if os.environ.get("SAVE_SCREENSHOTS"):
        DOCS.mkdir(exist_ok=True)
        for name in names:
            (DOCS / f"{name}.png").write_bytes(shot(tmp_path, name).read_bytes())


async def fetch(database_url: str, query: str, *args: object) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(database_url)
    try:
        return await conn.fetch(query, *args)
    finally:
        await conn.close()


async def refused_without_login_and_with_a_bad_token(
    browser: Browser, site: Site, path: str, form: dict[str, str]
) -> None:
    """POST `path` without a session (401 login_required) and with a forged CSRF token (403)."""
    async with httpx.AsyncClient(base_url=site.url) as http:
        anonymous = await http.post(path, data={"csrf": "x", **form})
    assert anonymous.status_code == 401, anonymous.text
    assert anonymous.json()["error"]["code"] == "login_required"
    page = await new_page(browser, site)
    await login(page, site, site.admin)
    await page.wait_for_selector("table.queues")
    forged = await page.request.post(f"{site.url}{path}", form={**form, "csrf": "forged"})
    assert forged.status == 403
    assert (await forged.json())["error"]["code"] == "csrf_failed"
    await page.context.close()


async def test_login_queue_view_and_retrying_a_dead_job(site: Site, browser: Browser, tmp_path: Path) -> None:
    job_id = await dead_job(site)
    page = await new_page(browser, site)
    await login(page, site, site.admin)
    await page.wait_for_selector("table.queues tr[data-queue=outbox]")
    row = page.locator("tr[data-queue=outbox]")
    assert "1" in (await row.locator("td").nth(5).inner_text())
    await page.screenshot(path=shot(tmp_path, "queues"), full_page=True)
    cookies = await page.context.cookies()
    session = next(c for c in cookies if c["name"] == "pm_dashboard")
    assert session["httpOnly"] is True
    assert session["sameSite"] == "Strict"

    await page.click("a:has-text('Dead letters')")
    await page.wait_for_selector(f"tr[data-job='{job_id}']")
    assert "sandbox said no" in await page.locator(f"tr[data-job='{job_id}'] td.error").inner_text()
    await page.screenshot(path=shot(tmp_path, "dead-letters"), full_page=True)
    await page.click(f"tr[data-job='{job_id}'] button:has-text('Retry')")
    await page.wait_for_selector(".flash")
    assert f"job {job_id} is available" in await page.locator(".flash").inner_text()

    conn = await asyncpg.connect(site.database_url)
    try:
        assert await conn.fetchval("SELECT state FROM job WHERE id = $1", job_id) == "available"
        audit = await conn.fetchrow(
            "SELECT actor, via, action FROM admin_audit WHERE target = $1", f"job:{job_id}"
        )
    finally:
        await conn.close()
    assert dict(audit) == {"actor": site.admin.id, "via": "dashboard", "action": "job.retry"}

    await page.goto(f"{site.url}/dashboard/jobs/{job_id}")
    await page.screenshot(path=shot(tmp_path, "job"), full_page=True)
    await page.goto(f"{site.url}/dashboard/audit")
    assert "job.retry" in await page.locator("table.audit").inner_text()
    await page.screenshot(path=shot(tmp_path, "audit"), full_page=True)
    await page.goto(f"{site.url}/dashboard")
    await page.click("tr[data-queue=outbox] button:has-text('Pause')")
    await page.wait_for_selector("tr[data-queue=outbox] .badge:has-text('paused')")
    keep(tmp_path, "queues", "dead-letters", "job", "audit")
    assert site.external == []


async def test_actions_are_refused_without_login_a_csrf_token_or_the_admin_scope(
    site: Site, browser: Browser
) -> None:
    job_id = await dead_job(site)
    async with httpx.AsyncClient(base_url=site.url) as http:
        anonymous = await http.post(f"/dashboard/jobs/{job_id}/retry", data={"csrf": "x"})
        assert anonymous.status_code == 401
        assert anonymous.json()["error"]["code"] == "login_required"
        page_redirect = await http.get("/dashboard/jobs")
        assert page_redirect.status_code == 303
        assert page_redirect.headers["location"] == "/dashboard/login"

    page = await new_page(browser, site)
    await login(page, site, site.admin)
    await page.wait_for_selector("table.queues")
    forged = await page.request.post(f"{site.url}/dashboard/jobs/{job_id}/retry", form={"csrf": "forged"})
    assert forged.status == 403
    assert (await forged.json())["error"]["code"] == "csrf_failed"

    other = await new_page(browser, site)
    await login(other, site, site.plain)
    assert other.url.endswith("/dashboard/login")
    assert "no admin scope" in await other.locator(".error").inner_text()
    conn = await asyncpg.connect(site.database_url)
    try:
        assert await conn.fetchval("SELECT state FROM job WHERE id = $1", job_id) == "dead"
        assert await conn.fetchval("SELECT count(*) FROM admin_audit WHERE target = $1", f"job:{job_id}") == 0
    finally:
        await conn.close()


async def test_docs_and_redoc_render_with_the_network_blocked(
    site: Site, browser: Browser, tmp_path: Path
) -> None:
    page = await new_page(browser, site)
    await page.goto(f"{site.url}/docs")
    await page.wait_for_selector(".swagger-ui .info .title")
    assert "paymanager" in await page.locator(".swagger-ui .info .title").inner_text()
    await page.screenshot(path=shot(tmp_path, "docs"))
    await page.goto(f"{site.url}/redoc")
    await page.wait_for_selector("h1:has-text('paymanager')", state="attached", timeout=60_000)
    await page.screenshot(path=shot(tmp_path, "redoc"))
    assert site.external == []


async def test_throughput_comes_from_the_database_and_the_table_updates_itself(
    site: Site, browser: Browser
) -> None:
    # Completions written by no process of this server (as another worker's would be): 10 within the
    # last five minutes (2 a minute), 5 older that do not count.
    queue = "tp" + uuid.uuid4().hex[:6]
    conn = await asyncpg.connect(site.database_url)
    try:
        for minutes, count in ((1, 10), (10, 5)):
            await conn.execute(
                "INSERT INTO job (queue, kind, state, payload, attempt, attempted_at, finalized_at)"
                " SELECT $1, 'ops.tp', 'completed', '{}', 1, now() - make_interval(mins => $2),"
                " now() - make_interval(mins => $2) FROM generate_series(1, $3)",
                queue, minutes, count,
            )  # fmt: skip
    finally:
        await conn.close()
    page = await new_page(browser, site)
    await login(page, site, site.admin)
    row = page.locator(f"tr[data-queue={queue}]")
    await row.wait_for()
    assert await row.locator("td.throughput").inner_text() == "2.0"
    # The table refreshes itself: a dead job written now shows without a reload.
    assert (await row.locator("td").nth(5).inner_text()).strip() == "0"
    pool = await create_pool(site.database_url, min_size=1, max_size=1)
    try:
        async with pool.acquire() as db:
            job_id = (await enqueue(db, "ops.tp", {}, queue=queue)).id
            await db.execute("UPDATE job SET state = 'dead', finalized_at = now() WHERE id = $1", job_id)
    finally:
        await pool.close()
    await expect(row.locator("td").nth(5)).to_have_text("1", timeout=30_000)
    assert site.external == []


async def test_a_queues_limits_and_waiting_events_show_in_its_row(site: Site, browser: Browser) -> None:
    pool = await create_pool(site.database_url, min_size=1, max_size=1)
    try:
        async with pool.acquire() as db:
            await jobs_admin.set_rate_limit(db, "psp.ipps", max_jobs=100, window_ms=1000)
            await jobs_admin.set_global_concurrency(db, "psp.ipps", 5)
            await jobs_admin.set_waiting_events(db, "psp.ipps", True)
            await jobs_admin.set_max_depth(db, "plain", 10)
    finally:
        await pool.close()
    page = await new_page(browser, site)
    await login(page, site, site.admin)
    limited = page.locator("tr[data-queue='psp.ipps'] td").nth(9)
    await limited.wait_for()
    assert " ".join((await limited.inner_text()).split()) == "rate 100/1s concurrency 5 waiting events"
    plain = page.locator("tr[data-queue=plain] td").nth(9)
    assert " ".join((await plain.inner_text()).split()) == "max 10"
    await page.context.close()
    assert site.external == []


async def test_pause_and_resume_from_the_page_and_refused_without_login_or_token(
    site: Site, browser: Browser
) -> None:
    for action in ("pause", "resume"):
        await refused_without_login_and_with_a_bad_token(
            browser, site, f"/dashboard/queues/outbox/{action}", {}
        )
    paused = "SELECT coalesce(bool_or(paused), false) AS paused FROM job_queue WHERE name = 'outbox'"
    assert (await fetch(site.database_url, paused))[0]["paused"] is False
    assert await fetch(site.database_url, "SELECT 1 FROM admin_audit WHERE action LIKE 'queue.%'") == []

    page = await new_page(browser, site)
    await login(page, site, site.admin)
    await page.click("tr[data-queue=outbox] button:has-text('Pause')")
    await page.wait_for_selector("tr[data-queue=outbox] .badge:has-text('paused')")
    assert (await fetch(site.database_url, paused))[0]["paused"] is True
    await page.click("tr[data-queue=outbox] button:has-text('Resume')")
    await page.wait_for_selector("tr[data-queue=outbox] button:has-text('Pause')")
    assert (await fetch(site.database_url, paused))[0]["paused"] is False
    audit = await fetch(
        site.database_url, "SELECT via, action FROM admin_audit WHERE action LIKE 'queue.%' ORDER BY id"
    )
    assert [(r["via"], r["action"]) for r in audit] == [
        ("dashboard", "queue.pause"),
        ("dashboard", "queue.resume"),
    ]
    await page.context.close()
    assert site.external == []


async def test_cancel_and_replay_from_the_page(site: Site, browser: Browser, tmp_path: Path) -> None:
    pool = await create_pool(site.database_url, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            waiting = (await enqueue(conn, "ops.browser", {}, queue="outbox")).id
    finally:
        await pool.close()
    dead = await dead_job(site)
    await refused_without_login_and_with_a_bad_token(browser, site, f"/dashboard/jobs/{waiting}/cancel", {})
    await refused_without_login_and_with_a_bad_token(
        browser, site, "/dashboard/jobs/replay", {"queue": "outbox", "kind": ""}
    )
    rows = await fetch(
        site.database_url, "SELECT id, state::text FROM job WHERE id = ANY($1)", [waiting, dead]
    )
    assert {r["id"]: r["state"] for r in rows} == {waiting: "available", dead: "dead"}
    assert await fetch(site.database_url, "SELECT 1 FROM admin_audit WHERE action LIKE 'job.%'") == []

    page = await new_page(browser, site)
    await login(page, site, site.admin)
    await page.goto(f"{site.url}/dashboard/jobs?queue=outbox&state=available")
    await page.click(f"tr[data-job='{waiting}'] button:has-text('Cancel')")
    await page.wait_for_selector(".flash")
    assert f"job {waiting}: cancelled" in await page.locator(".flash").inner_text()

    await page.goto(f"{site.url}/dashboard/jobs?queue=outbox&state=dead")
    await page.wait_for_selector(f"tr[data-job='{dead}']")
    await page.screenshot(path=shot(tmp_path, "replay"), full_page=True)
    await page.click("button:has-text('Replay these dead jobs')")
    await page.wait_for_selector(".flash")
    assert "replayed 1 dead job(s)" in await page.locator(".flash").inner_text()

    rows = await fetch(
        site.database_url, "SELECT id, state::text FROM job WHERE id = ANY($1)", [waiting, dead]
    )
    assert {r["id"]: r["state"] for r in rows} == {waiting: "cancelled", dead: "available"}
    audit = await fetch(
        site.database_url,
        "SELECT actor, via, action, target FROM admin_audit WHERE action LIKE 'job.%' ORDER BY id",
    )
    assert [dict(r) for r in audit] == [
        {"actor": site.admin.id, "via": "dashboard", "action": "job.cancel", "target": f"job:{waiting}"},
        {"actor": site.admin.id, "via": "dashboard", "action": "job.replay", "target": "jobs:dead"},
    ]
    assert site.external == []


async def test_intents_timeline_psp_review_and_balances_from_the_page(
    start_payout_api: StartPayoutApi, site: Site, browser: Browser, tmp_path: Path
) -> None:
    # The PSP step runs in this test's process against the sandbox; the browser talks to the server.
    payouts = await start_payout_api()
    payer = await payouts.funded_account(100_000)
    paid = await payouts.payout(payer, 1_000)
    await payouts.wait_status(paid, {"settled"})
    payouts.sandbox.faults(manual_review_rate=1)
    held = await payouts.payout(payer, 2_000)
    await payouts.wait_psp_state(held, {"MANUAL_REVIEW"})
    tx_id = str((await payouts.tx(held))["id"])
    payouts.sandbox.faults(manual_review_rate=0, partner_balance={"THB": 500})
    monitor = BalanceMonitor(payouts.payments, payouts.components.psp_drivers)
    await monitor.check("ipps", "THB", nostro_accounts(payouts.payments, "ipps")["THB"])

    page = await new_page(browser, site)
    await login(page, site, site.admin)
    await page.wait_for_selector("table.queues")

    # Intent search, then the settled payout's timeline: status changes, ledger, jobs, PSP.
    await page.click("a:has-text('Intents')")
    await page.fill("input[name=intent_id]", paid)
    await page.click("button:has-text('Search')")
    await page.click(f"a:has-text('{paid}')")
    await page.wait_for_selector("ol.timeline")
    timeline = await page.locator("ol.timeline").inner_text()
    for expected in (
        "created", "confirmed", "settled", "ledger hold (amount)", "ledger post (amount)",
        "psp.payout enqueued", "psp.payout completed", "PSP ipps COMPLETED",
    ):  # fmt: skip
        assert expected in timeline, (expected, timeline)
    assert timeline.index("ledger hold (amount)") < timeline.index("ledger post (amount)")
    await page.screenshot(path=shot(tmp_path, "intent-timeline"), full_page=True)

    # The manual review: refused without login, with a bad token, with no outcome; then resolved.
    path = f"/dashboard/psp/{tx_id}/resolve"
    await refused_without_login_and_with_a_bad_token(
        browser, site, path, {"outcome": "completed", "text": "BANK-9"}
    )
    for bad in ("state=NOPE", "psp=Not%20a%20PSP"):
        refused = await page.request.get(f"{site.url}/dashboard/psp?{bad}")
        assert refused.status == 422, bad
        assert "no transactions" in await refused.text()
    await page.click("a:has-text('PSP review')")
    await page.wait_for_selector(f"tr[data-tx='{tx_id}']")
    await page.screenshot(path=shot(tmp_path, "psp-review"), full_page=True)
    await page.click(f"a:has-text('{tx_id}')")
    await page.fill("#resolve-text", "BANK-9")
    await page.click("button:has-text('Resolve')")
    await page.wait_for_selector(".flash")
    assert "choose whether" in await page.locator(".flash").inner_text()
    rows = await fetch(site.database_url, "SELECT state FROM psp_tx WHERE id = $1", uuid.UUID(tx_id))
    assert rows[0]["state"] == "MANUAL_REVIEW"
    assert await fetch(site.database_url, "SELECT 1 FROM admin_audit WHERE action = 'psp.resolve'") == []
    await page.screenshot(path=shot(tmp_path, "psp-resolve"), full_page=True)

    await page.check("input[value=completed]")
    await page.fill("#resolve-text", "BANK-9")
    await page.click("button:has-text('Resolve')")
    await page.wait_for_selector(".flash:has-text('resolved')")
    assert "COMPLETED" in await page.locator("#psp-state").inner_text()
    tx = (await fetch(site.database_url, "SELECT * FROM psp_tx WHERE id = $1", uuid.UUID(tx_id)))[0]
    assert (tx["state"], tx["confirm_ref"], tx["resolved_by"]) == (
        "COMPLETED", "BANK-9", f"dashboard:{site.admin.id}",
    )  # fmt: skip
    await payouts.wait_status(held, {"settled"})
    audit = await fetch(
        site.database_url,
        "SELECT actor, via, target, before, after FROM admin_audit WHERE action = 'psp.resolve'",
    )
    assert len(audit) == 1
    assert (audit[0]["actor"], audit[0]["via"], audit[0]["target"]) == (
        site.admin.id, "dashboard", f"psp_tx:{tx_id}",
    )  # fmt: skip
    # A second resolve of the same transaction is refused and changes nothing.
    await page.goto(f"{site.url}/dashboard/psp/{tx_id}")
    assert await page.locator("button:has-text('Resolve')").count() == 0
    form = {"csrf": await csrf_of(page), "outcome": "failed", "text": "no"}
    again = await page.request.post(f"{site.url}{path}", form=form)
    assert "only a transaction in MANUAL_REVIEW" in await again.text()
    assert len(await fetch(site.database_url, "SELECT 1 FROM admin_audit WHERE action = 'psp.resolve'")) == 1

    await page.click("a:has-text('Balances')")
    row = page.locator("tr[data-check='ipps-THB']")
    await row.wait_for()
    assert await row.locator("td.state").inner_text() == "low_partner_balance"
    assert "none → low_partner_balance" in await page.locator("ul.alerts").inner_text()
    await page.screenshot(path=shot(tmp_path, "balances"), full_page=True)
    keep(tmp_path, "intent-timeline", "psp-review", "psp-resolve", "balances")
    assert site.external == []


async def csrf_of(page: Page) -> str:
    token = await page.locator("input[name=csrf]").first.get_attribute("value")
    assert token is not None
    return token
