-- Uploads made through the Companion-compatible routes (Uppy's
-- @uppy/aws-s3). Those clients name an upload by its S3 UploadId, which can
-- be up to 1,024 characters: too long to index on MySQL, so the lookup goes
-- through its SHA-256. The row also records who owns it, so another user's
-- UploadId is simply not found. upload_id points at the uploads row that
-- the native API and the merge worker use; that row holds the object key,
-- and the key a client sends back is never trusted.
CREATE TABLE companion_uploads (
    s3_upload_hash CHAR(64)    NOT NULL PRIMARY KEY,
    upload_id      VARCHAR(40) NOT NULL,
    user_id        VARCHAR(40) NOT NULL,
    created_at     {{ts}}      NOT NULL
) {{opts}};
CREATE INDEX ix_companion_uploads_upload ON companion_uploads (upload_id);
