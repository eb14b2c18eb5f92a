-- intent_service_idx in ascending id order. Intent ids are UUIDv7 (time-ordered), so in descending
-- order every new intent of a service was inserted at the left edge of its service's entries, where
-- a B-tree splits a full page in half: the index stayed about half full, some 80 bytes per intent
-- for an entry of 32 (bench/footprint.py; docs/BENCHMARKS.md, "Storage"). In ascending order the
-- inserts land at the right edge, whose splits leave the left page full. intent_list still reads
-- newest first: PostgreSQL scans the index backward for `ORDER BY id DESC`.
-- Built on every partition, as 0305: writes to `intent` wait for the build (stop-and-migrate).
DROP INDEX intent_service_idx;
CREATE INDEX intent_service_idx ON intent (hashtext(service_id), id);
