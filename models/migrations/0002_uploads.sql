-- Uploads: multipart sessions and the parts clients report, verified
-- content (blobs, the dedup index), the files users own, and
-- proof-of-possession challenges for instant upload.

-- One row per multipart session. resume_key is "user|sha256|size" while the
-- upload is unfinished (uploading, pending or merging) and NULL otherwise;
-- its unique index makes "one unfinished upload per user and content" hold
-- under racing inits. client_etags holds the ETags a client sent with complete, as JSON.
CREATE TABLE uploads (
    id            VARCHAR(40)   NOT NULL PRIMARY KEY,
    user_id       VARCHAR(40)   NOT NULL,
    file_name     VARCHAR(255)  NOT NULL,
    content_type  VARCHAR(255)  NOT NULL,
    size          BIGINT        NOT NULL,
    sha256        CHAR(64)      NULL,
    part_size     BIGINT        NOT NULL,
    part_count    INTEGER       NOT NULL,
    s3_key        VARCHAR(255)  NOT NULL,
    s3_upload_id  VARCHAR(1024) NOT NULL,
    state         VARCHAR(16)   NOT NULL,
    instant       BOOLEAN       NOT NULL DEFAULT FALSE,
    resume_key    VARCHAR(191)  NULL,
    client_etags  {{text}}      NULL,
    error         {{text}}      NULL,
    file_id       VARCHAR(40)   NULL,
    created_at    {{ts}}        NOT NULL,
    updated_at    {{ts}}        NOT NULL,
    expires_at    {{ts}}        NOT NULL,
    finished_at   {{ts}}        NULL,
    CONSTRAINT uq_uploads_resume UNIQUE (resume_key)
) {{opts}};
CREATE INDEX ix_uploads_user ON uploads (user_id, created_at);
CREATE INDEX ix_uploads_state_expires ON uploads (state, expires_at);

-- Parts the client reported finished. The unique index is what makes
-- reporting a part twice, even concurrently, leave one row.
CREATE TABLE upload_parts (
    id          {{pk}},
    upload_id   VARCHAR(40)  NOT NULL,
    part_number INTEGER      NOT NULL,
    etag        VARCHAR(128) NOT NULL,
    size        BIGINT       NOT NULL,
    created_at  {{ts}}       NOT NULL,
    updated_at  {{ts}}       NOT NULL,
    CONSTRAINT uq_upload_parts UNIQUE (upload_id, part_number)
) {{opts}};

-- Verified content, identified by the SHA-256 the merge worker computed
-- (never a client's claim). refs counts the files pointing at it; the row
-- and its object go when the last file does.
CREATE TABLE blobs (
    id         VARCHAR(40)  NOT NULL PRIMARY KEY,
    sha256     CHAR(64)     NOT NULL,
    size       BIGINT       NOT NULL,
    s3_key     VARCHAR(255) NOT NULL,
    refs       INTEGER      NOT NULL,
    created_at {{ts}}       NOT NULL,
    updated_at {{ts}}       NOT NULL,
    CONSTRAINT uq_blobs_sha256 UNIQUE (sha256)
) {{opts}};
CREATE INDEX ix_blobs_key ON blobs (s3_key);

-- A user's finished file. upload_id is the upload that produced it; the
-- unique index guarantees one upload yields at most one file.
CREATE TABLE files (
    id           VARCHAR(40)  NOT NULL PRIMARY KEY,
    user_id      VARCHAR(40)  NOT NULL,
    blob_id      VARCHAR(40)  NOT NULL,
    upload_id    VARCHAR(40)  NOT NULL,
    name         VARCHAR(255) NOT NULL,
    content_type VARCHAR(255) NOT NULL,
    size         BIGINT       NOT NULL,
    sha256       CHAR(64)     NOT NULL,
    created_at   {{ts}}       NOT NULL,
    CONSTRAINT uq_files_upload UNIQUE (upload_id)
) {{opts}};
CREATE INDEX ix_files_user ON files (user_id, created_at, id);
CREATE INDEX ix_files_user_sha ON files (user_id, sha256);
CREATE INDEX ix_files_blob ON files (blob_id);

-- Proof-of-possession challenges: byte ranges of a blob the caller must
-- hash to get a file of content someone else uploaded. Single use: the
-- answer deletes the row before checking it.
CREATE TABLE upload_challenges (
    id           VARCHAR(40)  NOT NULL PRIMARY KEY,
    user_id      VARCHAR(40)  NOT NULL,
    blob_id      VARCHAR(40)  NOT NULL,
    file_name    VARCHAR(255) NOT NULL,
    content_type VARCHAR(255) NOT NULL,
    ranges       {{text}}     NOT NULL,
    created_at   {{ts}}       NOT NULL,
    expires_at   {{ts}}       NOT NULL
) {{opts}};
CREATE INDEX ix_upload_challenges_expires ON upload_challenges (expires_at);
