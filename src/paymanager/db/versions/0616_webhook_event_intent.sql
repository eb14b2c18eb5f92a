-- The operator's timeline of an intent lists the webhook deliveries of its events (intent.* and
-- refund.* bodies carry `data.intent_id`): this index finds them without reading every event. Only
-- events that name an intent are indexed; the cost is one JSON parse per event written.
CREATE INDEX webhook_event_intent_idx ON webhook_event ((((body::jsonb) -> 'data' ->> 'intent_id')::uuid))
    WHERE body LIKE '%"intent_id"%';
