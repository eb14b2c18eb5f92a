-- A service's own limit of API requests per second (per api process); NULL: API_REQUESTS_PER_SEC_PER_SERVICE.
ALTER TABLE service
    ADD COLUMN requests_per_sec_max integer CHECK (requests_per_sec_max BETWEEN 1 AND 1000000);
