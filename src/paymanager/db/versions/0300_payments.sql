-- Payments: services (HMAC callers), replay and idempotency memory, accounts, policies, intents and
-- settlements. Invariants live here as well as in the code (STYLE: invariants twice).

CREATE TABLE service (
    id                 text PRIMARY KEY CHECK (id ~ '^svc_[0-9a-f]{32}$'),
    name               text NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 100),
    -- The HMAC secret, encrypted with AES-256-GCM under PSP_CONFIG_KEK; key_id names that key so a
    -- rotated KEK can still open older rows.
    secret_ciphertext  bytea NOT NULL,
    secret_key_id      text NOT NULL CHECK (length(secret_key_id) BETWEEN 1 AND 64),
    scopes             text[] NOT NULL DEFAULT '{}' CHECK (scopes <@ ARRAY['admin']::text[]),
    created_at         timestamptz NOT NULL DEFAULT now(),
    disabled_at        timestamptz
);

-- Every accepted signature, kept until its timestamp leaves the window, so a captured request
-- cannot be replayed through any api replica.
CREATE TABLE request_signature (
    signature   bytea PRIMARY KEY CHECK (length(signature) = 32),
    service_id  text NOT NULL,
    expires_at  timestamptz NOT NULL
);
CREATE INDEX request_signature_expires_idx ON request_signature (expires_at);

-- The first response to each Idempotency-Key of a service. The row is inserted in the transaction
-- that does the request's work, so a concurrent request with the same key waits on the primary key
-- and then replays the committed response: one effect, one answer.
CREATE TABLE idempotency_key (
    service_id     text NOT NULL REFERENCES service (id),
    key            text NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    method         text NOT NULL,
    path           text NOT NULL,
    request_hash   bytea NOT NULL CHECK (length(request_hash) = 32),
    status_code    integer CHECK (status_code BETWEEN 200 AND 599),
    response_body  jsonb,
    created_at     timestamptz NOT NULL,
    expires_at     timestamptz NOT NULL,
    PRIMARY KEY (service_id, key),
    CHECK ((status_code IS NULL) = (response_body IS NULL)),
    CHECK (expires_at >= created_at + interval '24 hours')
);
CREATE INDEX idempotency_key_expires_idx ON idempotency_key (expires_at);

CREATE TABLE account (
    id                uuid PRIMARY KEY,
    kind              text NOT NULL CHECK (kind IN ('user', 'merchant', 'system')),
    currency          text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    -- System accounts have a name (system.fees.THB) and no owner; others have an owner service.
    name              text UNIQUE CHECK (name IS NULL OR length(name) BETWEEN 1 AND 200),
    owner_service_id  text REFERENCES service (id),
    reference         text CHECK (reference IS NULL OR length(reference) BETWEEN 1 AND 200),
    created_at        timestamptz NOT NULL DEFAULT now(),
    CHECK ((kind = 'system') = (name IS NOT NULL)),
    CHECK ((kind = 'system') = (owner_service_id IS NULL))
);
CREATE UNIQUE INDEX account_reference_idx ON account (owner_service_id, reference) WHERE reference IS NOT NULL;

CREATE TABLE policy (
    id                        uuid PRIMARY KEY,
    channel                   text NOT NULL CHECK (channel IN ('internal-p2p', 'ipps-transfer',
                                  'service-transfer', 'admin-transfer', 'merchant-invoice')),
    service_id                text REFERENCES service (id),
    min_amount                bigint CHECK (min_amount > 0),
    max_amount                bigint CHECK (max_amount > 0),
    daily_volume_per_account  bigint CHECK (daily_volume_per_account > 0),
    currencies                text[] CHECK (cardinality(currencies) BETWEEN 1 AND 50),
    created_at                timestamptz NOT NULL DEFAULT now(),
    updated_at                timestamptz NOT NULL DEFAULT now(),
    CHECK (min_amount IS NULL OR max_amount IS NULL OR min_amount <= max_amount),
    UNIQUE NULLS NOT DISTINCT (channel, service_id)
);

CREATE TABLE intent (
    id                  uuid PRIMARY KEY,
    service_id          text NOT NULL REFERENCES service (id),
    channel             text NOT NULL CHECK (channel IN ('internal-p2p', 'ipps-transfer',
                            'service-transfer', 'admin-transfer', 'merchant-invoice')),
    status              text NOT NULL DEFAULT 'created' CHECK (status IN ('created', 'confirmed',
                            'settled', 'failed', 'cancelled', 'expired')),
    amount              bigint NOT NULL CHECK (amount > 0 AND amount <= 1000000000000000),
    fee                 bigint NOT NULL CHECK (fee >= 0 AND fee <= 1000000000000000),
    currency            text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    payer_account_id    uuid NOT NULL REFERENCES account (id),
    payee_account_id    uuid NOT NULL REFERENCES account (id),
    fee_account_id      uuid REFERENCES account (id),
    description         text CHECK (description IS NULL OR length(description) <= 500),
    metadata            jsonb NOT NULL DEFAULT '{}' CHECK (length(metadata::text) <= 8192),
    version             integer NOT NULL DEFAULT 1 CHECK (version >= 1),
    failure_reason      text CHECK (failure_reason IS NULL OR length(failure_reason) <= 500),
    -- The ledger id (as a UUID) of the pending transfer that holds the funds, chosen at confirm.
    hold_id             uuid UNIQUE,
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    expires_at          timestamptz,
    confirmed_at        timestamptz,
    settle_deadline_at  timestamptz,
    finished_at         timestamptz,
    CHECK (payer_account_id <> payee_account_id),
    CHECK ((fee > 0) = (fee_account_id IS NOT NULL)),
    CHECK ((status IN ('settled', 'failed', 'cancelled', 'expired')) = (finished_at IS NOT NULL)),
    CHECK (status <> 'expired' OR channel = 'merchant-invoice'),
    CHECK ((channel = 'merchant-invoice') = (expires_at IS NOT NULL)),
    CHECK (status NOT IN ('confirmed', 'settled', 'failed')
           OR (confirmed_at IS NOT NULL AND settle_deadline_at IS NOT NULL AND hold_id IS NOT NULL))
);
CREATE INDEX intent_service_idx ON intent (service_id, id DESC);
CREATE INDEX intent_payer_idx ON intent (payer_account_id, created_at);
CREATE INDEX intent_payee_idx ON intent (payee_account_id, created_at);
CREATE INDEX intent_confirmed_idx ON intent (settle_deadline_at) WHERE status = 'confirmed';
CREATE INDEX intent_invoice_due_idx ON intent (expires_at) WHERE status = 'created' AND expires_at IS NOT NULL;

-- The schema refuses any status change the state machine does not draw (domain/intents.py).
CREATE FUNCTION intent_check_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = OLD.status THEN
        RETURN NEW;
    END IF;
    IF NOT (
        (OLD.status = 'created' AND NEW.status IN ('confirmed', 'cancelled', 'expired'))
        OR (OLD.status = 'confirmed' AND NEW.status IN ('settled', 'failed', 'cancelled'))
    ) THEN
        RAISE EXCEPTION 'intent % cannot go from % to %', OLD.id, OLD.status, NEW.status
            USING ERRCODE = 'check_violation', CONSTRAINT = 'intent_transition';
    END IF;
    IF NEW.version <> OLD.version + 1 THEN
        RAISE EXCEPTION 'intent % status change must increase version by one', OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'intent_version';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER intent_transition BEFORE UPDATE OF status ON intent
    FOR EACH ROW EXECUTE FUNCTION intent_check_transition();

-- One settlement per intent, written by whoever ends the saga (the settle job, a cancel, the
-- reconciler) in the transaction that posts or voids the holds: the primary key makes it once.
CREATE TABLE settlement (
    intent_id   uuid PRIMARY KEY REFERENCES intent (id),
    outcome     text NOT NULL CHECK (outcome IN ('posted', 'voided')),
    status      text NOT NULL CHECK (status IN ('settled', 'failed', 'cancelled')),
    amount      bigint NOT NULL CHECK (amount > 0),
    fee         bigint NOT NULL CHECK (fee >= 0),
    currency    text NOT NULL,
    settled_by  text NOT NULL,
    created_at  timestamptz NOT NULL,
    CHECK ((outcome = 'posted') = (status = 'settled'))
);
