-- Merchant webhooks: endpoints per service, one event row per change, one delivery (and one job of
-- the `webhooks` queue) per subscribed endpoint, written by triggers in the change's own transaction.

CREATE TABLE webhook_endpoint (
    id                          text PRIMARY KEY CHECK (id ~ '^we_[0-9a-f]{32}$'),
    service_id                  text NOT NULL REFERENCES service (id),
    url                         text NOT NULL CHECK (length(url) BETWEEN 8 AND 2048),
    -- The event types it receives ('intent.settled', ...); '*' means every type.
    event_types                 text[] NOT NULL CHECK (cardinality(event_types) BETWEEN 1 AND 50),
    description                 text CHECK (description IS NULL OR length(description) <= 500),
    -- The signing secret, sealed with AES-256-GCM under PSP_CONFIG_KEK (key id for KEK rotation).
    secret_ciphertext           bytea NOT NULL,
    secret_key_id               text NOT NULL,
    -- After a rotation the previous secret still signs (a second v1) until this instant.
    previous_secret_ciphertext  bytea,
    previous_secret_key_id      text,
    previous_secret_expires_at  timestamptz,
    status                      text NOT NULL DEFAULT 'enabled'
                                    CHECK (status IN ('enabled', 'disabled', 'deleted')),
    disabled_reason             text CHECK (disabled_reason IS NULL OR length(disabled_reason) <= 500),
    -- Since when every delivery has failed (NULL after a success); past WEBHOOK_DISABLE_AFTER_FAILING_SEC
    -- the endpoint is disabled.
    failing_since               timestamptz,
    created_at                  timestamptz NOT NULL,
    updated_at                  timestamptz NOT NULL,
    CHECK ((previous_secret_ciphertext IS NULL) = (previous_secret_expires_at IS NULL)),
    CHECK ((previous_secret_ciphertext IS NULL) = (previous_secret_key_id IS NULL)),
    CHECK ((status = 'disabled') = (disabled_reason IS NOT NULL))
);
CREATE INDEX webhook_endpoint_service_idx ON webhook_endpoint (service_id) WHERE status = 'enabled';

-- One row per change announced: its id is the stable event id of every delivery and retry of it, and
-- its body the exact bytes signed each time.
CREATE TABLE webhook_event (
    id          text PRIMARY KEY CHECK (id ~ '^evt_[0-9a-f]{32}$'),
    service_id  text NOT NULL REFERENCES service (id),
    type        text NOT NULL CHECK (length(type) BETWEEN 1 AND 100),
    body        text NOT NULL CHECK (length(body) <= 65536),
    created_at  timestamptz NOT NULL
);

CREATE TABLE webhook_delivery (
    id               text PRIMARY KEY CHECK (id ~ '^whd_[0-9a-f]{32}$'),
    event_id         text NOT NULL REFERENCES webhook_event (id),
    endpoint_id      text NOT NULL REFERENCES webhook_endpoint (id),
    service_id       text NOT NULL REFERENCES service (id),
    -- The job that carries it (replaced by a replay); no foreign key, jobs are pruned.
    job_id           bigint,
    status           text NOT NULL DEFAULT 'pending'
                         CHECK (status IN ('pending', 'retrying', 'succeeded', 'dead', 'cancelled')),
    attempts         integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_status_code integer CHECK (last_status_code BETWEEN 100 AND 599),
    last_error       text CHECK (last_error IS NULL OR length(last_error) <= 1000),
    last_latency_ms  integer CHECK (last_latency_ms >= 0),
    last_attempt_at  timestamptz,
    next_attempt_at  timestamptz,
    created_at       timestamptz NOT NULL,
    finished_at      timestamptz,
    UNIQUE (event_id, endpoint_id),
    CHECK ((status IN ('succeeded', 'dead', 'cancelled')) = (finished_at IS NOT NULL))
);
CREATE INDEX webhook_delivery_service_idx ON webhook_delivery (service_id, created_at DESC, id DESC);
CREATE INDEX webhook_delivery_endpoint_idx ON webhook_delivery (endpoint_id, created_at DESC);

-- Writes the event and, per enabled endpoint of the service subscribed to the type, a delivery and
-- its job. The job row is written here rather than through the engine's enqueue so that every writer
-- of a status (batched settlements, sweeps, the PSP step) announces it without knowing: the insert
-- takes the engine's defaults (state available, run_at now; attempts, backoff and timeout NULL, which
-- the worker resolves from the registered kind), and wakes the queue as `job_insert` does. Webhook
-- jobs are never refused by a queue's max_depth: a status change must not fail for its announcement.
CREATE FUNCTION webhook_enqueue(p_service_id text, p_type text, p_data jsonb, p_at timestamptz)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_event text;
    v_delivery text;
    v_job bigint;
    v_endpoint record;
BEGIN
    FOR v_endpoint IN
        SELECT id FROM webhook_endpoint
         WHERE service_id = p_service_id AND status = 'enabled'
           AND (p_type = ANY (event_types) OR '*' = ANY (event_types))
         ORDER BY id
    LOOP
        IF v_event IS NULL THEN
            v_event := 'evt_' || replace(gen_random_uuid()::text, '-', '');
            INSERT INTO webhook_event (id, service_id, type, body, created_at)
            VALUES (v_event, p_service_id, p_type,
                    jsonb_build_object('id', v_event, 'type', p_type,
                                       'created', floor(extract(epoch FROM p_at))::bigint,
                                       'data', p_data)::text,
                    p_at);
        END IF;
        v_delivery := 'whd_' || replace(gen_random_uuid()::text, '-', '');
        INSERT INTO job (queue, kind, state, payload)
        VALUES ('webhooks', 'webhook.deliver', 'available', jsonb_build_object('delivery_id', v_delivery))
        RETURNING id INTO v_job;
        INSERT INTO webhook_delivery (id, event_id, endpoint_id, service_id, job_id, created_at)
        VALUES (v_delivery, v_event, v_endpoint.id, p_service_id, v_job, p_at);
    END LOOP;
    IF v_event IS NOT NULL THEN
        PERFORM pg_notify('pm_job_available', 'webhooks');
    END IF;
END
$$;

CREATE FUNCTION intent_announce() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.status = OLD.status THEN
        RETURN NULL;
    END IF;
    PERFORM webhook_enqueue(
        NEW.service_id, 'intent.' || NEW.status,
        jsonb_build_object(
            'object', 'intent', 'intent_id', NEW.id, 'status', NEW.status, 'version', NEW.version,
            'amount', NEW.amount, 'fee', NEW.fee, 'currency', NEW.currency, 'channel', NEW.channel,
            'failure_reason', NEW.failure_reason, 'at', NEW.updated_at),
        NEW.updated_at);
    RETURN NULL;
END
$$;
CREATE TRIGGER intent_announce AFTER INSERT OR UPDATE OF status ON intent
    FOR EACH ROW EXECUTE FUNCTION intent_announce();

-- Refunds of settled intents: pending -> succeeded | failed. The sum of an intent's refunds that are
-- not failed never exceeds its settled amount (checked under the intent's row lock in code).
CREATE TABLE refund (
    id              uuid PRIMARY KEY,
    intent_id       uuid NOT NULL REFERENCES intent (id),
    service_id      text NOT NULL REFERENCES service (id),
    amount          bigint NOT NULL CHECK (amount > 0 AND amount <= 1000000000000000),
    -- The part of the intent's fee given back to the payer (the channel's fee rule, docs).
    fee_refunded    bigint NOT NULL DEFAULT 0 CHECK (fee_refunded >= 0),
    currency        text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'succeeded', 'failed')),
    reason          text CHECK (reason IS NULL OR length(reason) <= 500),
    failure_reason  text CHECK (failure_reason IS NULL OR length(failure_reason) <= 500),
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    finished_at     timestamptz,
    CHECK ((status = 'pending') = (finished_at IS NULL)),
    CHECK ((status = 'failed') = (failure_reason IS NOT NULL))
);
CREATE INDEX refund_intent_idx ON refund (intent_id, created_at);

CREATE FUNCTION refund_check_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status <> OLD.status AND OLD.status <> 'pending' THEN
        RAISE EXCEPTION 'refund % cannot go from % to %', OLD.id, OLD.status, NEW.status
            USING ERRCODE = 'check_violation', CONSTRAINT = 'refund_transition';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER refund_transition BEFORE UPDATE OF status ON refund
    FOR EACH ROW EXECUTE FUNCTION refund_check_transition();

CREATE FUNCTION refund_announce() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.status = OLD.status THEN
        RETURN NULL;
    END IF;
    PERFORM webhook_enqueue(
        NEW.service_id, 'refund.' || NEW.status,
        jsonb_build_object(
            'object', 'refund', 'refund_id', NEW.id, 'intent_id', NEW.intent_id, 'status', NEW.status,
            'amount', NEW.amount, 'fee_refunded', NEW.fee_refunded, 'currency', NEW.currency,
            'failure_reason', NEW.failure_reason, 'at', NEW.updated_at),
        NEW.updated_at);
    RETURN NULL;
END
$$;
CREATE TRIGGER refund_announce AFTER INSERT OR UPDATE OF status ON refund
    FOR EACH ROW EXECUTE FUNCTION refund_announce();
