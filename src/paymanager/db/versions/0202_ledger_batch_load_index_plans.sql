-- Ledger: every lookup of ledger_batch_load is "these ids, by primary key", so pin its plans to
-- index nested loops. PL/pgSQL keeps a generic plan per statement for the life of a connection;
-- one chosen while a table was still small (a new database, before autovacuum's first ANALYZE)
-- hash-joined a sequential scan of ledger_transfer, and that plan stayed while the table grew:
-- at 20,000 transfers the lookup of a batch's own ids took 7.6 ms instead of 0.1 ms (found by
-- profiling bench/ledger.py; EXPLAIN figures in docs/BENCHMARKS.md).
ALTER FUNCTION ledger_batch_load(uuid[], uuid[], uuid[])
    SET enable_seqscan = off
    SET enable_hashjoin = off
    SET enable_mergejoin = off;
