-- ferry inside a host app: upload tickets, metadata on files, per-user
-- quotas and download grants.

-- An upload carries the metadata it was started with: metadata is the
-- trusted part (copied from the ticket a backend created), client_metadata
-- what the uploader sent; both are JSON objects and are copied onto the
-- file the upload makes. ticket_id names the ticket that made it.
ALTER TABLE uploads ADD COLUMN ticket_id {{exact 40}} NULL;
ALTER TABLE uploads ADD COLUMN metadata {{text}} NULL;
ALTER TABLE uploads ADD COLUMN client_metadata {{text}} NULL;
ALTER TABLE files ADD COLUMN ticket_id {{exact 40}} NULL;
ALTER TABLE files ADD COLUMN metadata {{text}} NULL;
ALTER TABLE files ADD COLUMN client_metadata {{text}} NULL;
-- A proof of possession makes a file too, with what the uploader sent.
ALTER TABLE upload_challenges ADD COLUMN client_metadata {{text}} NULL;

-- An upload ticket lets whoever holds its secret (stored as its SHA-256)
-- make one upload as user_id, within max_size (0: no limit of its own)
-- and content_types (a JSON array; NULL: any). upload_id is set, in the
-- same transaction as the upload's insert, by the first init that uses it;
-- its unique index and the conditional update make "one ticket, one
-- upload" hold under racing inits.
CREATE TABLE upload_tickets (
    id            {{exact 40}} NOT NULL PRIMARY KEY,
    hash          {{exact 64}} NOT NULL,
    user_id       {{exact 40}} NOT NULL,
    created_by    {{exact 40}} NOT NULL,
    metadata      {{text}}    NULL,
    max_size      BIGINT      NOT NULL DEFAULT 0,
    content_types {{text}}    NULL,
    upload_id     {{exact 40}} NULL,
    created_at    {{ts}}      NOT NULL,
    expires_at    {{ts}}      NOT NULL,
    used_at       {{ts}}      NULL,
    CONSTRAINT uq_upload_tickets_hash UNIQUE (hash),
    CONSTRAINT uq_upload_tickets_upload UNIQUE (upload_id)
) {{opts}};
CREATE INDEX ix_upload_tickets_expires ON upload_tickets (expires_at);

-- A download grant lets user_id download file_id through the proxy until
-- it expires (NULL: never) or is revoked. Revoked and expired grants stay,
-- so the proxy can answer 410 rather than 403 for them.
CREATE TABLE download_grants (
    id         {{exact 40}} NOT NULL PRIMARY KEY,
    file_id    {{exact 40}} NOT NULL,
    user_id    {{exact 40}} NOT NULL,
    created_by {{exact 40}} NOT NULL,
    created_at {{ts}}      NOT NULL,
    expires_at {{ts}}      NULL,
    revoked_at {{ts}}      NULL
) {{opts}};
CREATE INDEX ix_download_grants_file_user ON download_grants (file_id, user_id);

-- Per-user overrides of FERRY_QUOTA_BYTES and FERRY_QUOTA_EXPORTS_PER_DAY;
-- NULL takes the setting, 0 is unlimited.
CREATE TABLE user_quotas (
    user_id         {{exact 40}} NOT NULL PRIMARY KEY,
    bytes           BIGINT      NULL,
    exports_per_day INTEGER     NULL,
    updated_at      {{ts}}      NOT NULL
) {{opts}};
