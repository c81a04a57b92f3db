-- Identity compares byte for byte on MySQL too.
--
-- The tables' collation, utf8mb4_bin, is a PAD SPACE collation: on MySQL and
-- MariaDB 'abc' = 'abc   ', in WHERE, JOIN and UNIQUE alike. So the
-- Idempotency-Key "abc " replayed the export made with "abc" (or got 422),
-- and a path id with a trailing space found the row without it
-- (POST /conversations/cnv_x%20/messages stored a message under "cnv_x ").
-- SQLite's BINARY collation has no such rule, so nothing changes there.
--
-- Every column that holds an id, a reference to one, a key, a hash or a name
-- and is compared in SQL becomes VARBINARY of the same length (the template
-- function "exact"): no NO PAD text collation exists on both MySQL 8 and
-- MariaDB. The values are ASCII, so their bytes are their characters and
-- they sort as before. Left as text: free text (titles, file names, errors,
-- user agents), values never compared in SQL (ETags, S3 upload ids, request
-- ids, secrets, nonces, checksums) and enumerations only ever compared with ferry's constants (state,
-- kind, type, scope, method, code). models.TestIdentityColumnsAreExact
-- holds new tables to the same rule.
{{if mysql}}
ALTER TABLE users
    MODIFY id   {{exact 40}} NOT NULL,
    MODIFY name {{exact 64}} NOT NULL;
ALTER TABLE tokens
    MODIFY id      {{exact 40}} NOT NULL,
    MODIFY user_id {{exact 40}} NOT NULL,
    MODIFY hash    {{exact 64}} NOT NULL;
ALTER TABLE sessions
    MODIFY hash    {{exact 64}} NOT NULL,
    MODIFY user_id {{exact 40}} NOT NULL;
ALTER TABLE jobs
    MODIFY business_key {{exact 191}} NOT NULL,
    MODIFY lease_owner  {{exact 128}} NULL;
ALTER TABLE outbox
    MODIFY id      {{exact 40}} NOT NULL,
    MODIFY subject {{exact 64}} NOT NULL,
    MODIFY user_id {{exact 40}} NOT NULL;
ALTER TABLE uploads
    MODIFY id         {{exact 40}}  NOT NULL,
    MODIFY user_id    {{exact 40}}  NOT NULL,
    MODIFY sha256     {{exact 64}}  NULL,
    MODIFY s3_key     {{exact 255}} NOT NULL,
    MODIFY resume_key {{exact 191}} NULL,
    MODIFY file_id    {{exact 40}}  NULL;
ALTER TABLE upload_parts
    MODIFY upload_id {{exact 40}} NOT NULL;
ALTER TABLE blobs
    MODIFY id     {{exact 40}}  NOT NULL,
    MODIFY sha256 {{exact 64}}  NULL,
    MODIFY s3_key {{exact 255}} NOT NULL;
ALTER TABLE files
    MODIFY id        {{exact 40}} NOT NULL,
    MODIFY user_id   {{exact 40}} NOT NULL,
    MODIFY blob_id   {{exact 40}} NOT NULL,
    MODIFY upload_id {{exact 40}} NOT NULL,
    MODIFY sha256    {{exact 64}} NOT NULL;
ALTER TABLE upload_challenges
    MODIFY id      {{exact 40}} NOT NULL,
    MODIFY user_id {{exact 40}} NOT NULL,
    MODIFY blob_id {{exact 40}} NOT NULL;
ALTER TABLE conversations
    MODIFY id         {{exact 40}} NOT NULL,
    MODIFY created_by {{exact 40}} NOT NULL;
ALTER TABLE memberships
    MODIFY conversation_id {{exact 40}} NOT NULL,
    MODIFY user_id         {{exact 40}} NOT NULL,
    MODIFY added_by        {{exact 40}} NOT NULL;
ALTER TABLE messages
    MODIFY conversation_id {{exact 40}} NOT NULL,
    MODIFY sender_id       {{exact 40}} NOT NULL;
ALTER TABLE message_attachments
    MODIFY conversation_id {{exact 40}} NOT NULL,
    MODIFY file_id         {{exact 40}} NOT NULL;
ALTER TABLE recalls
    MODIFY conversation_id {{exact 40}} NOT NULL,
    MODIFY recalled_by     {{exact 40}} NOT NULL;
ALTER TABLE exports
    MODIFY id              {{exact 40}}  NOT NULL,
    MODIFY user_id         {{exact 40}}  NOT NULL,
    MODIFY idempotency_key {{exact 255}} NOT NULL,
    MODIFY fingerprint     {{exact 64}}  NOT NULL,
    MODIFY artifact_key    {{exact 255}} NULL,
    MODIFY sha256          {{exact 64}}  NULL;
ALTER TABLE export_permissions
    MODIFY export_id       {{exact 40}} NOT NULL,
    MODIFY conversation_id {{exact 40}} NOT NULL;
ALTER TABLE export_shards
    MODIFY export_id       {{exact 40}} NOT NULL,
    MODIFY conversation_id {{exact 40}} NOT NULL,
    MODIFY sha256          {{exact 64}} NULL;
ALTER TABLE webhook_subscriptions
    MODIFY id {{exact 40}} NOT NULL;
ALTER TABLE webhook_deliveries
    MODIFY id              {{exact 40}} NOT NULL,
    MODIFY subscription_id {{exact 40}} NOT NULL,
    MODIFY event_id        {{exact 40}} NOT NULL;
ALTER TABLE webhook_attempts
    MODIFY delivery_id {{exact 40}} NOT NULL;
ALTER TABLE webhook_secrets
    MODIFY subscription_id {{exact 40}} NOT NULL;
ALTER TABLE download_log
    MODIFY resource_id {{exact 64}} NOT NULL,
    MODIFY user_id     {{exact 40}} NOT NULL,
    MODIFY remote_addr {{exact 64}} NOT NULL,
    MODIFY link_hash   {{exact 64}} NULL;
ALTER TABLE companion_uploads
    MODIFY s3_upload_hash {{exact 64}} NOT NULL,
    MODIFY upload_id      {{exact 40}} NOT NULL,
    MODIFY user_id        {{exact 40}} NOT NULL;
{{end}}
