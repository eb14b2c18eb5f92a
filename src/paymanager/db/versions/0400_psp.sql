-- PSP payouts: one psp_tx per payout intent, its sealed PSP credentials, inbound PSP webhooks, and
-- the balance monitor's latest check per PSP and currency.

CREATE TABLE psp_tx (
    id               uuid PRIMARY KEY,
    intent_id        uuid NOT NULL UNIQUE REFERENCES intent (id),
    psp              text NOT NULL CHECK (psp ~ '^[a-z][a-z0-9_]{0,31}$'),
    state            text NOT NULL DEFAULT 'NEW' CHECK (state IN (
                         'NEW', 'QUERY_PENDING', 'QUERIED', 'CONFIRM_PENDING', 'IN_PROGRESS',
                         'COMPLETED', 'FAILED', 'MANUAL_REVIEW')),
    amount           bigint NOT NULL CHECK (amount > 0),
    currency         text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    beneficiary      text NOT NULL CHECK (length(beneficiary) BETWEEN 1 AND 64),
    -- Sent on every try of a PSP whose dialect deduplicates (Wise's customerTransactionId, QP's
    -- merchant reference); IPPS identifies the transfer by it and is never sent it twice.
    idempotency_key  uuid NOT NULL UNIQUE,
    attempts         integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    query_ref        text,
    confirm_ref      text,
    last_error       text,
    version          integer NOT NULL DEFAULT 1,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz,
    -- The audit of a manual-review resolution: who, when, what.
    resolved_by      text,
    resolved_at      timestamptz,
    resolution       text,
    CHECK ((state IN ('COMPLETED', 'FAILED')) = (finished_at IS NOT NULL)),
    CHECK ((resolved_by IS NULL) = (resolved_at IS NULL) AND (resolved_by IS NULL) = (resolution IS NULL)),
    CHECK (state <> 'QUERIED' OR query_ref IS NOT NULL)
);
CREATE INDEX psp_tx_open_idx ON psp_tx (psp, created_at) WHERE state NOT IN ('COMPLETED', 'FAILED');

-- The schema refuses any state change the machine does not draw (domain/psp.py).
CREATE FUNCTION psp_tx_check_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = OLD.state THEN
        RETURN NEW;
    END IF;
    IF NOT (
        (OLD.state = 'NEW' AND NEW.state = 'QUERY_PENDING')
        OR (OLD.state = 'QUERY_PENDING' AND NEW.state IN ('QUERIED', 'FAILED', 'MANUAL_REVIEW'))
        OR (OLD.state = 'QUERIED' AND NEW.state = 'CONFIRM_PENDING')
        OR (OLD.state = 'CONFIRM_PENDING'
            AND NEW.state IN ('COMPLETED', 'FAILED', 'IN_PROGRESS', 'MANUAL_REVIEW'))
        OR (OLD.state = 'IN_PROGRESS' AND NEW.state IN ('COMPLETED', 'FAILED', 'MANUAL_REVIEW'))
        OR (OLD.state = 'MANUAL_REVIEW' AND NEW.state IN ('COMPLETED', 'FAILED'))
    ) THEN
        RAISE EXCEPTION 'psp_tx % cannot go from % to %', OLD.id, OLD.state, NEW.state
            USING ERRCODE = 'check_violation', CONSTRAINT = 'psp_tx_transition';
    END IF;
    IF NEW.version <> OLD.version + 1 THEN
        RAISE EXCEPTION 'psp_tx % state change must increase version by one', OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'psp_tx_version';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER psp_tx_transition BEFORE UPDATE OF state ON psp_tx
    FOR EACH ROW EXECUTE FUNCTION psp_tx_check_transition();

-- A PSP's credentials (JSON), sealed with AES-256-GCM under PSP_CONFIG_KEK bound to the PSP's name.
CREATE TABLE psp_config (
    psp         text PRIMARY KEY CHECK (psp ~ '^[a-z][a-z0-9_]{0,31}$'),
    key_id      text NOT NULL CHECK (length(key_id) BETWEEN 1 AND 64),
    ciphertext  bytea NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Inbound PSP webhooks, stored before they are answered and processed as jobs; the primary key is
-- the deduplication by the PSP's own event id.
CREATE TABLE psp_webhook_event (
    psp           text NOT NULL,
    event_id      text NOT NULL CHECK (length(event_id) BETWEEN 1 AND 200),
    body          jsonb NOT NULL,
    received_at   timestamptz NOT NULL DEFAULT now(),
    processed_at  timestamptz,
    outcome       text,
    PRIMARY KEY (psp, event_id)
);

-- The balance monitor's latest check per PSP and currency; an alert is raised when `state` changes.
CREATE TABLE psp_balance_check (
    psp              text NOT NULL,
    currency         text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    state            text NOT NULL CHECK (state IN (
                         'balance_ok', 'low_partner_balance', 'balance_drift', 'balance_check_failed')),
    ledger_balance   bigint,
    partner_balance  bigint,
    error            text,
    checked_at       timestamptz NOT NULL,
    changed_at       timestamptz NOT NULL,
    PRIMARY KEY (psp, currency)
);

-- Every change of a balance state, as alerted: one row per change, whatever the number of monitors.
CREATE TABLE psp_balance_alert (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    psp              text NOT NULL,
    currency         text NOT NULL,
    state            text NOT NULL,
    previous_state   text,
    ledger_balance   bigint,
    partner_balance  bigint,
    error            text,
    raised_at        timestamptz NOT NULL DEFAULT now()
);

-- When each PSP's next balance check is due. A monitor claims a tick by moving due_at forward with
-- one UPDATE, so however many psp-worker processes run the monitor, one check runs per tick.
CREATE TABLE psp_balance_tick (
    psp     text PRIMARY KEY,
    due_at  timestamptz NOT NULL
);
