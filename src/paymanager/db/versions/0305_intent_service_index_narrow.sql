-- intent_service_idx keyed by a 4-byte hash of the service id instead of its 37-byte text: an entry
-- of 32 bytes instead of 64, and each intent has up to three of them while its versions (created,
-- confirmed, ended) wait for VACUUM (bench/footprint.py; docs/BENCHMARKS.md, "Storage").
-- Query: intent_list of one service, newest first (application/intents/intents.sql), which asks for
-- `hashtext(service_id) = hashtext($1) AND service_id = $1`: the index finds the service's intents in
-- id order and the second condition drops those of another service that shares the hash.
-- Built on every partition; an operation on an intent table's index, not a rewrite of the table.
DROP INDEX intent_service_idx;
CREATE INDEX intent_service_idx ON intent (hashtext(service_id), id DESC);
