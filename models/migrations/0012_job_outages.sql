-- outage_waits counts the consecutive runs of a job that found a store it
-- needs (S3, the database) unreachable. Such runs do not use up the job's
-- attempts: they wait with a backoff of their own, so an outage of minutes
-- fails no merge, and only an outage longer than the job's outage budget
-- counts as an attempt.
ALTER TABLE jobs ADD COLUMN outage_waits INTEGER NOT NULL DEFAULT 0;
