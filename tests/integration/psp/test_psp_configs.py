"""PSP configurations: sealed under PSP_CONFIG_KEK, opened after a rotation through
PSP_CONFIG_KEK_PREVIOUS, resealed; and a psp-worker whose PSP has no configuration does not start."""

from __future__ import annotations

import asyncio
import base64
import json
import os
from pathlib import Path

import asyncpg
import pytest

from paymanager.adapters.secret_box import SecretBox, SecretBoxError
from paymanager.application.psp.config import open_config, reseal_all, set_config
from tests.support.processes import PaymanagerProcess, paymanager_env, run_cli


def _kek() -> str:
    return base64.b64encode(os.urandom(32)).decode()


async def test_a_rotated_kek_still_opens_and_reseal_moves_every_config(pool: asyncpg.Pool) -> None:
    old, new = _kek(), _kek()
    config = json.dumps({"base_url": "http://127.0.0.1:1", "api_key": "very-secret-key"}).encode()
    await set_config(pool, SecretBox.from_config(old), "ipps", config)
    stored = await pool.fetchval("SELECT ciphertext FROM psp_config WHERE psp = 'ipps'")
    assert b"very-secret-key" not in bytes(stored)

    rotated = SecretBox.from_config(new, old)
    opened = await open_config(pool, rotated, "ipps")
    assert opened is not None
    assert opened.api_key.reveal() == "very-secret-key"
    assert "very-secret-key" not in repr(opened)
    with pytest.raises(SecretBoxError, match="PSP_CONFIG_KEK_PREVIOUS"):
        await open_config(pool, SecretBox.from_config(new), "ipps")

    assert await reseal_all(pool, rotated) == ["ipps"]
    after = await open_config(pool, SecretBox.from_config(new), "ipps")
    assert after is not None
    assert after.api_key.reveal() == "very-secret-key"
    with pytest.raises(SecretBoxError):
        await open_config(pool, SecretBox.from_config(old), "ipps")


async def test_config_set_refuses_a_bad_file_and_an_unknown_psp(database_url: str, tmp_path: Path) -> None:
    env = paymanager_env(database_url)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"base_url": "ftp://x", "api_key": "k"}))
    refused = await asyncio.to_thread(run_cli, ["psp", "config", "set", "ipps", "--file", str(bad)], env)
    assert refused.returncode == 2
    assert "base_url" in refused.stderr
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"base_url": "http://127.0.0.1:1", "api_key": "k"}))
    unknown = await asyncio.to_thread(run_cli, ["psp", "config", "set", "paypal", "--file", str(good)], env)
    assert unknown.returncode == 2
    stored = await asyncio.to_thread(run_cli, ["psp", "config", "set", "ipps", "--file", str(good)], env)
    assert stored.returncode == 0, stored.stderr


async def test_a_psp_worker_without_a_psp_configuration_exits_1_naming_it(
    pool: asyncpg.Pool, database_url: str
) -> None:
    config = json.dumps({"base_url": "http://127.0.0.1:1", "api_key": "k"}).encode()
    await set_config(pool, SecretBox.from_config(None), "ipps", config)
    process = PaymanagerProcess(paymanager_env(database_url, WORKER_ROLES="psp-worker", PSP_NAMES="ipps,qp"))
    try:
        code = await asyncio.to_thread(process.proc.wait, 60)
        assert code == 1, process.output
        assert "register PSP drivers" in process.output
        assert "PSP_NAMES names qp but no configuration is stored for it" in process.output
        assert "psp-worker starting" not in process.output
    finally:
        process.close()
