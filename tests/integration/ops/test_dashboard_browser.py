"""The dashboard and the offline docs in a real browser (Debian's chromium through Playwright), served
by a real `paymanager run` process: login, the queue view, retrying and cancelling a job from the
page, the refusals (no login, a bad CSRF token, a non-admin service), and no request leaving the
machine (every non-local request is blocked and recorded). Screenshots go to the test's directory;
the main ones are kept in docs/screenshots/."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx
import pytest
from playwright.async_api import Browser, Page, Route, async_playwright

from paymanager.db.pool import create_pool
from paymanager.jobs import enqueue
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
    if os.environ.get("SAVE_SCREENSHOTS"):
        DOCS.mkdir(exist_ok=True)
        for name in ("queues", "dead-letters", "job", "audit"):
            (DOCS / f"{name}.png").write_bytes(shot(tmp_path, name).read_bytes())
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
