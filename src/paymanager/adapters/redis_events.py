"""Redis pub/sub publisher of intent events (topic `intent.{id}`), used when REDIS_URL is set."""

from __future__ import annotations

from typing import Any

import orjson
import redis.asyncio as aioredis


class RedisPublisher:
    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client

    async def publish(self, topic: str, payload: dict[str, Any]) -> None:
        await self._client.publish(topic, orjson.dumps(payload))

    async def publish_many(self, messages: list[tuple[str, dict[str, Any]]]) -> None:
        """One round trip for a settled group's events (a pipeline, not a MULTI transaction)."""
        if not messages:
            return
        async with self._client.pipeline(transaction=False) as pipe:
            for topic, payload in messages:
                pipe.publish(topic, orjson.dumps(payload))
            await pipe.execute()
