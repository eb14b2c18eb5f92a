-- A manually captured intent is announced with what was captured: `amount` and `fee` stay what was
-- authorised (as GET /intents shows them), `amount_captured` and `fee_captured` what moved (null for
-- an automatic capture, which moves the whole amount). The capture sets them in the status's own
-- UPDATE (0350's intent_captured_check), so this AFTER trigger sees them.
CREATE OR REPLACE FUNCTION intent_announce() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.status = OLD.status THEN
        RETURN NULL;
    END IF;
    PERFORM webhook_enqueue(
        NEW.service_id, 'intent.' || NEW.status,
        jsonb_build_object(
            'object', 'intent', 'intent_id', NEW.id, 'status', NEW.status, 'version', NEW.version,
            'amount', NEW.amount, 'fee', NEW.fee, 'currency', NEW.currency, 'channel', NEW.channel,
            'capture_method', NEW.capture_method, 'amount_captured', NEW.amount_captured,
            'fee_captured', NEW.fee_captured, 'failure_reason', NEW.failure_reason, 'at', NEW.updated_at),
        NEW.updated_at);
    RETURN NULL;
END
$$;
