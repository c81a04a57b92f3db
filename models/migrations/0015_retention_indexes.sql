-- Retention: periodic jobs delete finished rows past a retention, by these
-- indexes, so pruning never scans a table.
CREATE INDEX ix_jobs_finished ON jobs (state, finished_at);
CREATE INDEX ix_webhook_deliveries_finished ON webhook_deliveries (state, updated_at);
CREATE INDEX ix_uploads_finished ON uploads (state, finished_at);
