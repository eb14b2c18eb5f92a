-- Checkout sessions tell the merchant through the same webhook deliveries as intents and refunds:
-- each `checkout_session_event` row (written once per session and type, in the session change's own
-- transaction) is announced to the service's subscribed endpoints by `webhook_enqueue`.
CREATE FUNCTION checkout_session_announce() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM webhook_enqueue(NEW.service_id, NEW.type, NEW.payload -> 'data', NEW.created_at);
    RETURN NULL;
END
$$;
CREATE TRIGGER checkout_session_announce AFTER INSERT ON checkout_session_event
    FOR EACH ROW EXECUTE FUNCTION checkout_session_announce();
