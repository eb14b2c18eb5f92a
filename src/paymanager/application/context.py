"""What the use cases need from the process, gathered once by `bootstrap` and passed explicitly."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from paymanager.adapters.secret_box import SecretBox
from paymanager.application.intents.events import EventPublisher
from paymanager.config import Settings
from paymanager.db.notices import Notices
from paymanager.db.pool import Pool
from paymanager.domain.channels import ChannelRegistry, SystemAccount, system_account_name
from paymanager.ledger import Ledger

Clock = Callable[[], datetime]


async def _no_checkpoint(point: str) -> None:
    del point


def system_clock() -> datetime:
    return datetime.now(UTC)


@dataclass
class Payments:
    """The payment component of one process: its pool, ledger, channels, keys and publisher."""

    pool: Pool
    # The PostgreSQL ledger (joins the intent's transaction) or TigerBeetle (decide-then-apply:
    # application/holds/resolve.py).
    ledger: Ledger
    channels: ChannelRegistry
    box: SecretBox
    settings: Settings
    publisher: EventPublisher
    process_id: str
    clock: Clock = system_clock
    # `system.<role>.<CCY>` -> our account id, seeded at start-up.
    system_accounts: dict[str, uuid.UUID] = field(default_factory=dict)
    # Called at each crash point of the ledger protocol (holds/resolve.py); tests inject failures there.
    checkpoint: Callable[[str], Awaitable[None]] = _no_checkpoint
    # TigerBeetle: the pool of the decisions and hold ids, committed on connections of their own while
    # the caller's transaction holds a connection of `pool`. Apart from `pool`, so that callers each
    # holding one of its connections never all wait for a second one (None: `pool`).
    side_pool: Pool | None = None
    _notices: Notices | None = field(default=None, init=False, repr=False)

    @property
    def notices(self) -> Notices:
        """The NOTIFYs the api sends after its commits (db/notices.py), on `pool`."""
        if self._notices is None:
            self._notices = Notices(self.pool)
        return self._notices

    @property
    def side(self) -> Pool:
        """Where a statement committed apart from the caller's transaction takes its connection."""
        return self.side_pool if self.side_pool is not None else self.pool

    def system_account(self, role: SystemAccount, currency: str, shard: int | None = None) -> uuid.UUID:
        name = system_account_name(role, currency, shard)
        found = self.system_accounts.get(name)
        assert found is not None, f"system account {name} was not seeded at start-up"
        return found
