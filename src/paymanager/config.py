"""Every setting of paymanager: its environment variable, type, unit, bound and default.

This is the ONE place a default is written (the source systems wrote theirs twice and let them drift).
`paymanager config` prints the effective values with secrets masked; `docs/CONFIGURATION.md` and the
README table are generated from this class by `paymanager config --markdown`, so they cannot drift.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from paymanager.rate_text import parse_rate_limit
from paymanager.roles import Role, parse_roles

LogFormat = Literal["auto", "json", "console"]
LedgerBackend = Literal["postgres", "tigerbeetle"]


# The job worker pins claim_pipeline (2) + 1 connections and needs one more for its other statements.
JOB_WORKER_POOL_MIN = 4


class Settings(BaseSettings):
    """paymanager's configuration, read from the environment (and `.env` when present)."""

    model_config = SettingsConfigDict(
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        case_sensitive=False,
        validate_default=True,
    )

    # --- process and roles -------------------------------------------------------------------
    worker_roles: Annotated[frozenset[Role], NoDecode] = Field(
        default=frozenset({Role.API, Role.OUTBOX_WORKER}),
        description="Comma-separated roles of this process: api, outbox-worker, psp-worker, "
        "invoice-expiry, session-cleanup, or all.",
    )
    port: int = Field(default=8080, ge=1, le=65535, description="HTTP port of the api role.")
    host: str = Field(default="0.0.0.0", description="Interface the api role listens on.")
    metrics_port: int = Field(
        default=9100,
        ge=0,
        le=65535,
        description="Port of /metrics and /livez on a process without the api role (the api serves them "
        "on PORT); 0: none.",
    )
    metrics_query_interval_ms: int = Field(
        default=15_000,
        ge=0,
        le=3_600_000,
        description="The query gauges (jobs by state, intents by status) are computed at most once per "
        "this interval for the whole cluster; scrapes in between read the stored values.",
    )
    dashboard_session_key: SecretStr | None = Field(
        default=None,
        description="Key that signs dashboard session cookies (any long random string, the same on every "
        "api process). Unset: derived from PSP_CONFIG_KEK.",
    )
    dashboard_session_ttl_sec: int = Field(
        default=8 * 3600, ge=60, le=7 * 86_400, description="How long a dashboard login lasts."
    )
    shutdown_timeout_ms: int = Field(
        default=25_000,
        ge=100,
        le=600_000,
        description="How long running jobs may finish after SIGTERM before their leases are released.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(default="info", description="Log level.")
    log_format: LogFormat = Field(
        default="auto", description="json, console, or auto (console on a terminal, else json)."
    )
    tracing_enabled: bool = Field(
        default=False,
        description="OpenTelemetry spans (HTTP request, job, ledger call) and the trace id in log lines; "
        "needs the `tracing` extra. Off: nothing of OpenTelemetry is loaded.",
    )
    otel_exporter_otlp_endpoint: str | None = Field(
        default=None,
        description="OTLP/HTTP collector the spans go to (e.g. http://otel-collector:4318). Unset: "
        "OpenTelemetry's own default (http://localhost:4318).",
    )
    otel_service_name: str = Field(
        default="paymanager", min_length=1, max_length=100, description="service.name of the spans."
    )
    tracing_sample_ratio: float = Field(
        default=1.0,
        ge=0.0,
        le=1.0,
        description="Share of new traces recorded (a request carrying a sampled traceparent is always).",
    )
    process_heartbeat_interval_ms: int = Field(
        default=5_000, ge=100, le=60_000, description="How often a process refreshes its heartbeat row."
    )
    process_heartbeat_stale_ms: int = Field(
        default=30_000,
        ge=500,
        le=600_000,
        description="A process whose heartbeat is older than this is reported dead by `paymanager health`.",
    )

    # --- PostgreSQL ------------------------------------------------------------------------------
    database_url: SecretStr | None = Field(
        default=None,
        description="PostgreSQL DSN. Unset: an embedded PostgreSQL is started with data in EMBEDDED_PG_DIR.",
    )
    embedded_pg_dir: str = Field(
        default=".paymanager/pg", description="Data directory of the embedded PostgreSQL."
    )
    db_pool_min_size: int = Field(default=2, ge=0, le=100, description="Connections kept open per process.")
    db_pool_max_size: int = Field(
        default=10, ge=1, le=200, description="Most connections per process (at least 4 with a job role)."
    )
    db_decision_pool_size: int = Field(
        default=4,
        ge=1,
        le=100,
        description="Connections per process, apart from the pool, for TigerBeetle's ledger decisions.",
    )
    db_statement_timeout_ms: int = Field(
        default=30_000, ge=0, le=3_600_000, description="statement_timeout of every pooled connection."
    )

    # --- Redis -------------------------------------------------------------------------------------
    redis_url: SecretStr | None = Field(
        default=None, description="Redis for event fan-out (pub/sub). Unset: PostgreSQL NOTIFY only."
    )

    # --- ledger --------------------------------------------------------------------------------
    ledger_backend: LedgerBackend = Field(
        default="postgres",
        description="postgres (the ledger in the database) or tigerbeetle (the cluster at TB_ADDRESS).",
    )
    tb_address: str = Field(
        default="3000",
        description="Every TigerBeetle replica's address, comma-separated (host:port, or a local port).",
    )
    tb_cluster_id: int = Field(default=0, ge=0, description="TigerBeetle cluster id.")
    ledger_connect_attempts: int = Field(
        default=5, ge=1, le=50, description="Tries to connect the ledger at start-up."
    )
    ledger_connect_backoff_ms: int = Field(
        default=2_000, ge=0, le=60_000, description="Delay before try n is n x this (linear, as the source)."
    )

    # --- outbox (settlement, webhooks, checkout actions) ---------------------------------------------
    outbox_interval_ms: int = Field(
        default=1_000,
        ge=10,
        le=600_000,
        description="Polling fallback of the outbox worker; LISTEN/NOTIFY wakes it sooner.",
    )
    # These defaults work together: a claim brings up to outbox_concurrency / 2 settle jobs (the
    # engine keeps two claims in flight), and the jobs of one claim settle in one transaction.
    outbox_batch_size: int = Field(default=100, ge=1, le=1_000, description="Most jobs claimed per fetch.")
    outbox_claim_cooldown_ms: int = Field(
        default=25,
        ge=0,
        le=10_000,
        description="Least time between two claims of a job worker: jobs arriving meanwhile share one "
        "claim and one settlement transaction (0: claim on every notification).",
    )
    outbox_concurrency: int = Field(
        default=50, ge=1, le=1_000, description="Most outbox jobs running at once per process."
    )
    outbox_settle_batches_in_flight: int = Field(
        default=2,
        ge=1,
        le=64,
        description="Most shared settlement transactions running at once per process and kind (each "
        "ends up to outbox_batch_size intents, payouts, session actions or webhook deliveries).",
    )
    outbox_max_depth: int = Field(
        default=100_000,
        ge=0,
        le=100_000_000,
        description="Unfinished settlement jobs at which a confirm answers 503 queue_full (back-pressure "
        "when workers stop); set on the queue at start-up unless an operator set one; 0: no limit.",
    )
    outbox_max_attempts: int = Field(
        default=10, ge=1, le=100, description="Attempts of an outbox action before it is dead-lettered."
    )

    # --- merchant webhooks ------------------------------------------------------------------------
    webhook_allowed_hosts: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="Comma-separated hosts, addresses or networks (CIDR) a webhook URL may reach although "
        "they are loopback, private or link-local (never a cloud metadata address).",
    )
    webhook_concurrency: int = Field(
        default=64, ge=1, le=1_000, description="Most webhook deliveries in flight at once per process."
    )
    webhook_endpoint_concurrency: int = Field(
        default=8,
        ge=1,
        le=1_000,
        description="Most deliveries in flight to one endpoint per process: a slow endpoint holds no more.",
    )
    webhook_busy_snooze_ms: int = Field(
        default=1_000,
        ge=10,
        le=600_000,
        description="How long a delivery waits when its endpoint's slots are all taken (no attempt spent).",
    )
    webhook_timeout_ms: int = Field(
        default=10_000, ge=100, le=60_000, description="Time a receiver has to answer one delivery."
    )
    webhook_max_attempts: int = Field(
        default=7,
        ge=1,
        le=100,
        description="Attempts of a delivery (the first, then the schedule's retries) before its dead letter.",
    )
    webhook_retry_schedule_ms: Annotated[tuple[int, ...], NoDecode] = Field(
        default=(60_000, 300_000, 1_800_000, 7_200_000, 43_200_000, 86_400_000),
        description="Comma-separated delays before each retry (the last repeats): 1 min, 5 min, 30 min, "
        "2 h, 12 h, 24 h.",
    )
    webhook_disable_after_failing_sec: int = Field(
        default=259_200,
        ge=60,
        le=2_592_000,
        description="An endpoint whose deliveries have all failed for this long is disabled (3 days).",
    )
    webhook_secret_grace_sec: int = Field(
        default=86_400,
        ge=0,
        le=604_800,
        description="After a secret rotation, how long the previous secret also signs deliveries.",
    )

    # --- job engine ------------------------------------------------------------------------------
    job_lease_ms: int = Field(
        default=30_000, ge=1_000, le=3_600_000, description="Lease of a running job; heartbeats renew it."
    )
    job_heartbeat_interval_ms: int = Field(
        default=10_000, ge=100, le=600_000, description="How often running jobs' leases are renewed."
    )
    job_rescue_interval_ms: int = Field(
        default=5_000, ge=100, le=600_000, description="How often expired leases are looked for."
    )
    job_max_stalled: int = Field(
        default=2, ge=0, le=100, description="Rescues of a job before it is dead-lettered as stalled."
    )
    job_quick_claim_commit: bool = Field(
        default=True,
        description="A claim that completes nothing commits without waiting for its WAL flush "
        "(completions always wait); see docs/ARCHITECTURE.md.",
    )
    job_retention_completed_age_ms: int = Field(
        default=24 * 3_600_000, ge=0, description="Completed jobs older than this are pruned."
    )
    job_retention_completed_count: int = Field(
        default=5_000, ge=0, description="Completed jobs kept per queue at most."
    )
    job_retention_dead_age_ms: int = Field(
        default=7 * 24 * 3_600_000, ge=0, description="Dead jobs older than this are pruned."
    )
    job_prune_interval_ms: int = Field(
        default=60_000, ge=1_000, le=86_400_000, description="How often retention runs."
    )

    # --- PSP transfers ------------------------------------------------------------------------------
    psp_names: Annotated[tuple[str, ...], NoDecode] = Field(
        default=("ipps",),
        description="Comma-separated PSPs served (ipps, qp, wise): a psp-worker's queues, and the payout "
        "channels (ipps-, qp-, wise-transfer) the API accepts.",
    )
    psp_poll_interval_ms: int = Field(
        default=500, ge=10, le=600_000, description="Polling fallback of the PSP worker."
    )
    psp_lease_sec: int = Field(default=10, ge=1, le=3_600, description="Lease of a PSP step without retries.")
    psp_retry_lease_sec: int = Field(
        default=30, ge=1, le=3_600, description="Lease of a PSP step that has retries left."
    )
    psp_max_retries: int = Field(
        default=5, ge=0, le=100, description="Retries of a PSP step before MANUAL_REVIEW."
    )
    psp_concurrency: int = Field(
        default=64,
        ge=1,
        le=1_000,
        description="PSP payouts one psp-worker process runs at once per PSP, waiting on PSPs concurrently.",
    )
    psp_rate_limit: str = Field(
        default="off",
        description="Calls started per window per PSP over every process (`100/1s`, `600/m`) or `off`; "
        "over it, payouts wait in their queue.",
    )
    psp_global_concurrency: int | None = Field(
        default=None, ge=1, le=10_000, description="PSP payouts running at once per PSP over every process."
    )
    psp_config_kek: SecretStr | None = Field(
        default=None,
        description="Base64 32-byte key that encrypts PSP credentials and service secrets (AES-256-GCM). "
        "Unset: a development key is derived and a warning logged.",
    )
    psp_config_kek_previous: SecretStr | None = Field(
        default=None,
        description="Comma-separated earlier PSP_CONFIG_KEKs that still open rows sealed before a rotation.",
    )

    # --- balance monitor ------------------------------------------------------------------------
    balance_monitor_enabled: bool = Field(
        default=False, description="Run the partner balance monitor in the psp-worker role."
    )
    balance_tick_ms: int = Field(default=60_000, ge=1_000, le=86_400_000, description="Balance check period.")
    ipps_low_balance_threshold_satang: int = Field(
        default=100_000, ge=0, description="Alert low_partner_balance below this partner balance."
    )
    ipps_drift_threshold_satang: int = Field(
        default=10_000, ge=0, description="Alert balance_drift when ledger and partner differ by more."
    )

    # --- invoices and checkout sessions -----------------------------------------------------------------
    invoice_expiry_sweep_interval_ms: int = Field(
        default=30_000, ge=1_000, le=86_400_000, description="Period of the invoice expiry sweep."
    )
    invoice_expiry_batch_size: int = Field(
        default=100, ge=1, le=10_000, description="Invoices expired per sweep statement."
    )
    cleanup_interval_ms: int = Field(
        default=60_000, ge=1_000, le=86_400_000, description="Period of the checkout-session cleanup."
    )
    cleanup_batch_size: int = Field(default=50, ge=1, le=10_000, description="Sessions expired per tick.")
    sessions_enabled: bool = Field(
        default=False,
        description="Serve checkout sessions (the api's /checkout-sessions, the outbox worker's session "
        "actions); needs GIFTCARD_BASE_URL and CARD_BASE_URL.",
    )
    session_default_ttl_sec: int = Field(
        default=900, ge=1, le=7 * 86_400, description="Expiry of a checkout session that names none."
    )
    session_max_ttl_sec: int = Field(
        default=86_400, ge=1, le=7 * 86_400, description="Longest expiry a checkout session may ask for."
    )
    session_action_concurrency: int = Field(
        default=32,
        ge=1,
        le=1_000,
        description="Session actions (provider calls) one outbox-worker process runs at once.",
    )
    giftcard_base_url: str | None = Field(
        default=None,
        description="Base URL of the Titreo gift-card provider (`paymanager sandbox giftcard` serves one).",
    )
    giftcard_api_key: SecretStr | None = Field(default=None, description="API key of the gift-card provider.")
    card_base_url: str | None = Field(
        default=None,
        description="Base URL of the card acquirer of session card legs "
        "(`paymanager sandbox card` serves one).",
    )
    card_api_key: SecretStr | None = Field(default=None, description="API key of the card acquirer.")
    provider_timeout_ms: int = Field(
        default=5_000,
        ge=50,
        le=120_000,
        description="How long a gift-card or card call may take before its outcome counts as unknown.",
    )

    # --- API ------------------------------------------------------------------------------------
    api_requests_per_sec_per_service: int = Field(
        default=1_000,
        ge=0,
        le=1_000_000,
        description="Signed requests per second each service may make to one api process (a token bucket "
        "with one second of burst; 429 rate_limited beyond); `paymanager services rate-limit` sets a "
        "service's own; 0: no limit.",
    )
    hmac_clock_skew_sec: int = Field(
        default=300, ge=1, le=3_600, description="Accepted distance of X-Timestamp from now."
    )
    idempotency_key_ttl_sec: int = Field(
        default=86_400, ge=86_400, le=30 * 86_400, description="How long Idempotency-Key outcomes are kept."
    )
    api_max_body_bytes: int = Field(
        default=1024 * 1024, ge=1_024, le=64 * 1024 * 1024, description="Largest request body accepted."
    )
    service_cache_ttl_ms: int = Field(
        default=5_000,
        ge=0,
        le=600_000,
        description="How long an api process reuses a service's secret and scopes before reading them again.",
    )
    api_sweep_interval_ms: int = Field(
        default=60_000,
        ge=1_000,
        le=3_600_000,
        description="How often the api role forgets expired signatures and Idempotency-Keys.",
    )
    api_sweep_batch_size: int = Field(
        default=1_000, ge=1, le=100_000, description="Signatures each api sweep deletes per statement."
    )
    api_sweep_key_pages: int = Field(
        default=20_000,
        ge=1,
        le=10_000_000,
        description="Pages of idempotency_key (8 KiB each) each api sweep reads for expired keys; the "
        "walk goes on from there at the next sweep and starts over past the last page.",
    )
    history_partition_months_ahead: int = Field(
        default=2,
        ge=1,
        le=24,
        description="Months of history partitions (transfers, intents, settlements) kept created ahead.",
    )
    storage_upkeep_interval_ms: int = Field(
        default=3_600_000,
        ge=1_000,
        le=86_400_000,
        description="How often one process of the cluster creates the history partitions ahead.",
    )
    churn_vacuum_interval_ms: int = Field(
        default=60_000,
        ge=1_000,
        le=3_600_000,
        description="How often one process VACUUMs signatures, Idempotency-Keys, jobs if autovacuum is off.",
    )
    sse_max_duration_sec: int = Field(
        default=3_600, ge=1, le=86_400, description="Longest an intent event stream stays open."
    )

    # --- payments ---------------------------------------------------------------------------------
    intent_settle_deadline_sec: int = Field(
        default=86_400,
        ge=60,
        le=30 * 86_400,
        description="A confirmed intent not settled within this is failed and its hold voided.",
    )
    capture_window_sec: int = Field(
        default=7 * 86_400,
        ge=60,
        le=30 * 86_400,
        description="How long a manual-capture intent's hold waits for its capture before it is voided "
        "and the intent expires.",
    )
    invoice_default_ttl_sec: int = Field(
        default=900, ge=1, le=30 * 86_400, description="Expiry of a merchant invoice that names none."
    )
    invoice_max_ttl_sec: int = Field(
        default=7 * 86_400, ge=1, le=30 * 86_400, description="Longest expiry a merchant invoice may ask for."
    )
    ledger_expire_interval_ms: int = Field(
        default=60_000,
        ge=1_000,
        le=86_400_000,
        description="How often (once cluster-wide) the ledger releases pending holds whose timeout passed.",
    )
    reconcile_batch_size: int = Field(
        default=500, ge=1, le=10_000, description="Confirmed intents the start-up reconciler reads at once."
    )
    reconcile_max_intents: int = Field(
        default=100_000,
        ge=1,
        le=10_000_000,
        description="Most confirmed intents the start-up reconciler examines in one start.",
    )

    @field_validator("worker_roles", mode="before")
    @classmethod
    def _parse_roles(cls, value: Any) -> frozenset[Role]:
        if isinstance(value, str):
            return parse_roles(value)
        return frozenset(value)

    @field_validator("psp_rate_limit")
    @classmethod
    def _check_psp_rate_limit(cls, value: str) -> str:
        parse_rate_limit(value)  # a ValueError names the expected form
        return value

    @field_validator("webhook_allowed_hosts", mode="before")
    @classmethod
    def _parse_allowed_hosts(cls, value: Any) -> tuple[str, ...]:
        items = value.split(",") if isinstance(value, str) else list(value)
        return tuple(dict.fromkeys(str(item).strip().lower() for item in items if str(item).strip()))

    @field_validator("webhook_retry_schedule_ms", mode="before")
    @classmethod
    def _parse_retry_schedule(cls, value: Any) -> tuple[int, ...]:
        items = value.split(",") if isinstance(value, str) else list(value)
        delays = tuple(int(str(item).strip()) for item in items if str(item).strip())
        if not delays or any(not 0 <= d <= 604_800_000 for d in delays):
            raise ValueError("WEBHOOK_RETRY_SCHEDULE_MS needs 1 to 50 delays within [0, 604800000] ms")
        if len(delays) > 50:
            raise ValueError("WEBHOOK_RETRY_SCHEDULE_MS needs 1 to 50 delays within [0, 604800000] ms")
        return delays

    @field_validator("psp_names", mode="before")
    @classmethod
    def _parse_psp_names(cls, value: Any) -> tuple[str, ...]:
        items = value.split(",") if isinstance(value, str) else list(value)
        names = tuple(dict.fromkeys(str(item).strip().lower() for item in items if str(item).strip()))
        unknown = [name for name in names if name not in KNOWN_PSPS]
        if unknown:
            raise ValueError(f"unknown PSP {unknown}; known PSPs are {', '.join(KNOWN_PSPS)}")
        return names

    @model_validator(mode="after")
    def _check_relations(self) -> Settings:
        problems: list[str] = []
        if self.job_heartbeat_interval_ms * 2 > self.job_lease_ms:
            problems.append(
                f"JOB_HEARTBEAT_INTERVAL_MS ({self.job_heartbeat_interval_ms}) must be at most half of "
                f"JOB_LEASE_MS ({self.job_lease_ms}), or one late heartbeat loses the lease; "
                "lower the interval or raise the lease"
            )
        if self.db_pool_min_size > self.db_pool_max_size:
            problems.append(
                f"DB_POOL_MIN_SIZE ({self.db_pool_min_size}) is larger than DB_POOL_MAX_SIZE "
                f"({self.db_pool_max_size})"
            )
        if self.psp_retry_lease_sec < self.psp_lease_sec:
            problems.append(
                f"PSP_RETRY_LEASE_SEC ({self.psp_retry_lease_sec}) is shorter than PSP_LEASE_SEC "
                f"({self.psp_lease_sec}); a step with retries needs at least the plain lease"
            )
        if self.process_heartbeat_stale_ms < 2 * self.process_heartbeat_interval_ms:
            problems.append(
                f"PROCESS_HEARTBEAT_STALE_MS ({self.process_heartbeat_stale_ms}) must be at least twice "
                f"PROCESS_HEARTBEAT_INTERVAL_MS ({self.process_heartbeat_interval_ms})"
            )
        if self.invoice_default_ttl_sec > self.invoice_max_ttl_sec:
            problems.append(
                f"INVOICE_DEFAULT_TTL_SEC ({self.invoice_default_ttl_sec}) is longer than "
                f"INVOICE_MAX_TTL_SEC ({self.invoice_max_ttl_sec})"
            )
        job_roles = {Role.OUTBOX_WORKER, Role.INVOICE_EXPIRY, Role.SESSION_CLEANUP}
        if self.worker_roles & job_roles and self.db_pool_max_size < JOB_WORKER_POOL_MIN:
            problems.append(
                f"DB_POOL_MAX_SIZE ({self.db_pool_max_size}) must be at least {JOB_WORKER_POOL_MIN} for the "
                "job roles (outbox-worker, invoice-expiry, session-cleanup): the worker pins 3 connections"
            )
        problems += self._session_problems()
        kek = self.psp_config_kek.get_secret_value() if self.psp_config_kek else None
        previous = self.psp_config_kek_previous.get_secret_value() if self.psp_config_kek_previous else None
        if kek is not None or previous:
            from paymanager.adapters.secret_box import parse_keks  # cryptography: only when keys are set

            try:
                parse_keks(kek, previous)  # as the seed step will, so a bad key stops start-up here
            except ValueError as exc:
                problems.append(str(exc))
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _session_problems(self) -> list[str]:
        """Sessions enabled without their providers: never a silent stand-in (the source fell back
        to a mock gift-card adapter when Titreo was not configured)."""
        problems: list[str] = []
        if self.sessions_enabled and not self.giftcard_base_url:
            problems.append(
                "SESSIONS_ENABLED=true needs GIFTCARD_BASE_URL, the Titreo gift-card provider "
                "(for development, `paymanager sandbox giftcard --port 8091` serves one)"
            )
        if self.sessions_enabled and not self.card_base_url:
            problems.append(
                "SESSIONS_ENABLED=true needs CARD_BASE_URL, the card acquirer of card legs "
                "(for development, `paymanager sandbox card --port 8092` serves one)"
            )
        if self.session_default_ttl_sec > self.session_max_ttl_sec:
            problems.append(
                f"SESSION_DEFAULT_TTL_SEC ({self.session_default_ttl_sec}) is longer than "
                f"SESSION_MAX_TTL_SEC ({self.session_max_ttl_sec})"
            )
        return problems

    def public_view(self) -> dict[str, Any]:
        """The effective configuration with every secret masked, for `paymanager config` and logs."""
        view: dict[str, Any] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, SecretStr):
                value = "********" if value.get_secret_value() else ""
            elif isinstance(value, frozenset):
                value = ",".join(sorted(str(item) for item in value))
            elif isinstance(value, tuple):
                value = ",".join(str(item) for item in value)
            view[name.upper()] = value
        return view


KNOWN_PSPS = ("ipps", "qp", "wise")


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once."""
    return Settings()


def settings_markdown_table() -> str:
    """A Markdown table of every variable, its default and meaning, generated from `Settings`."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        default = field.default
        if isinstance(default, frozenset):
            default = ",".join(sorted(str(item) for item in default))
        elif isinstance(default, tuple):
            default = ",".join(str(item) for item in default)
        elif default is None:
            default = "(unset)"
        rows.append(f"| `{name.upper()}` | `{default}` | {field.description or ''} |")
    return "\n".join(rows)
