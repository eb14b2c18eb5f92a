-- The queue and kind names of a job move from CHECK constraints to domains.
--
-- PostgreSQL evaluates every CHECK constraint of a row on every UPDATE of it, whatever the UPDATE
-- sets: each claim and each completion ran both regular expressions again, about 11% of the
-- database's CPU in a profile of the worker's loop (docs/BENCHMARKS.md, "Job engine"). A domain's
-- constraint is checked where a value is assigned to the column (an INSERT, or an UPDATE that sets
-- it), which is where a name can become invalid. The rule itself is unchanged.
--
-- The column type changes first to unconstrained domains (binary compatible: no rewrite, the
-- indexes are kept), then the domains get their constraints (checked against the rows present),
-- then the old CHECK constraints go.
CREATE DOMAIN job_queue_name AS text;
CREATE DOMAIN job_kind_name AS text;

ALTER TABLE job
    ALTER COLUMN queue TYPE job_queue_name,
    ALTER COLUMN kind TYPE job_kind_name;

ALTER DOMAIN job_queue_name ADD CONSTRAINT job_queue_name_check CHECK (VALUE ~ '^[A-Za-z0-9_.:-]{1,64}$');
ALTER DOMAIN job_kind_name ADD CONSTRAINT job_kind_name_check CHECK (VALUE ~ '^[A-Za-z0-9_.:-]{1,128}$');

ALTER TABLE job DROP CONSTRAINT job_queue_check, DROP CONSTRAINT job_kind_check;
