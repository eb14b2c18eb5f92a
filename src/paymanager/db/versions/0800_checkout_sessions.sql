-- Checkout sessions (split tender): a merchant's amount paid by gift-card legs and one card leg.
-- The state machines of domain/sessions.py are enforced here too (STYLE: invariants twice).

CREATE TABLE checkout_session (
    id                   uuid PRIMARY KEY,
    service_id           text NOT NULL REFERENCES service (id),
    merchant_account_id  uuid NOT NULL REFERENCES account (id),
    status               text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'processing', 'completed',
                             'failed', 'cancelled', 'expired')),
    amount               bigint NOT NULL CHECK (amount > 0 AND amount <= 1000000000000000),
    fee                  bigint NOT NULL CHECK (fee >= 0 AND fee <= amount),
    currency             text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    version              integer NOT NULL DEFAULT 1 CHECK (version >= 1),
    failure_reason       text CHECK (failure_reason IS NULL OR length(failure_reason) <= 500),
    metadata             jsonb NOT NULL DEFAULT '{}' CHECK (length(metadata::text) <= 8192),
    created_at           timestamptz NOT NULL,
    updated_at           timestamptz NOT NULL,
    expires_at           timestamptz NOT NULL,
    confirmed_at         timestamptz,
    finished_at          timestamptz,
    CHECK (expires_at > created_at),
    CHECK ((status IN ('completed', 'failed', 'cancelled', 'expired')) = (finished_at IS NOT NULL)),
    CHECK (status NOT IN ('processing', 'completed', 'failed') OR confirmed_at IS NOT NULL)
);
CREATE INDEX checkout_session_service_idx ON checkout_session (service_id, id DESC);
-- What the cleanup scans: active sessions by expiry.
CREATE INDEX checkout_session_due_idx ON checkout_session (expires_at)
    WHERE status IN ('open', 'processing');

CREATE TABLE checkout_session_leg (
    id          uuid PRIMARY KEY,
    session_id  uuid NOT NULL REFERENCES checkout_session (id),
    position    smallint NOT NULL CHECK (position BETWEEN 0 AND 10),
    kind        text NOT NULL CHECK (kind IN ('gift_card', 'card')),
    status      text NOT NULL DEFAULT 'pending',
    amount      bigint NOT NULL CHECK (amount > 0 AND amount <= 1000000000000000),
    -- The gift card's number, or the card's token at the acquirer.
    instrument  text NOT NULL CHECK (length(instrument) BETWEEN 1 AND 64),
    -- Set (write-ahead) before the first call to the provider: a leg attempted but still pending has
    -- an unknown outcome, and is compensated by its idempotency key when the session ends.
    attempted_at  timestamptz,
    provider_ref  text CHECK (provider_ref IS NULL OR length(provider_ref) <= 200),
    failure_reason text CHECK (failure_reason IS NULL OR length(failure_reason) <= 500),
    updated_at  timestamptz NOT NULL,
    UNIQUE (session_id, position),
    CHECK ((kind = 'gift_card' AND status IN ('pending', 'captured', 'cancelled', 'failed'))
        OR (kind = 'card' AND status IN ('pending', 'authorized', 'captured', 'released', 'failed')))
);
CREATE INDEX checkout_session_leg_session_idx ON checkout_session_leg (session_id);
-- At most one card leg per session.
CREATE UNIQUE INDEX checkout_session_leg_one_card_idx ON checkout_session_leg (session_id) WHERE kind = 'card';

-- The merchant is told of each end of a session once: a row per (session, type), written in the
-- session change's own transaction (application/sessions/notify.py), for webhook delivery to take.
CREATE TABLE checkout_session_event (
    id          uuid PRIMARY KEY,
    session_id  uuid NOT NULL REFERENCES checkout_session (id),
    service_id  text NOT NULL REFERENCES service (id),
    type        text NOT NULL CHECK (type IN ('session.completed', 'session.failed', 'session.expired',
                    'session.cancelled')),
    payload     jsonb NOT NULL,
    created_at  timestamptz NOT NULL,
    UNIQUE (session_id, type)
);
CREATE INDEX checkout_session_event_service_idx ON checkout_session_event (service_id, created_at);

CREATE FUNCTION checkout_session_check_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = OLD.status THEN
        RETURN NEW;
    END IF;
    IF NOT (
        (OLD.status = 'open' AND NEW.status IN ('processing', 'cancelled', 'expired'))
        OR (OLD.status = 'processing' AND NEW.status IN ('completed', 'failed', 'cancelled', 'expired'))
    ) THEN
        RAISE EXCEPTION 'checkout session % cannot go from % to %', OLD.id, OLD.status, NEW.status
            USING ERRCODE = 'check_violation', CONSTRAINT = 'checkout_session_transition';
    END IF;
    IF NEW.version <> OLD.version + 1 THEN
        RAISE EXCEPTION 'checkout session % status change must increase version by one', OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'checkout_session_version';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER checkout_session_transition BEFORE UPDATE OF status ON checkout_session
    FOR EACH ROW EXECUTE FUNCTION checkout_session_check_transition();

CREATE FUNCTION checkout_session_leg_check_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = OLD.status THEN
        RETURN NEW;
    END IF;
    IF NOT (
        (OLD.kind = 'gift_card' AND (
            (OLD.status = 'pending' AND NEW.status IN ('captured', 'failed', 'cancelled'))
            OR (OLD.status = 'captured' AND NEW.status = 'cancelled')))
        OR (OLD.kind = 'card' AND (
            (OLD.status = 'pending' AND NEW.status IN ('authorized', 'failed', 'released'))
            OR (OLD.status = 'authorized' AND NEW.status IN ('captured', 'released'))))
    ) THEN
        RAISE EXCEPTION 'checkout session leg % (%) cannot go from % to %', OLD.id, OLD.kind, OLD.status,
            NEW.status USING ERRCODE = 'check_violation', CONSTRAINT = 'checkout_session_leg_transition';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER checkout_session_leg_transition BEFORE UPDATE OF status ON checkout_session_leg
    FOR EACH ROW EXECUTE FUNCTION checkout_session_leg_check_transition();
