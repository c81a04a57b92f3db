-- Uploads at the speed of S3. A native upload may declare a checksum
-- algorithm (CRC32C): each part URL then pins its part's CRC32C, and the
-- whole file's CRC32C (full_checksum, base64, sent with complete) is
-- checked by S3 itself at CompleteMultipartUpload. The file exists from
-- then on, before ferry has read it back: its SHA-256 is computed by a
-- background job, and until then the file's sha256 is the client's claim
-- (sha256_verified false) and its blob has no sha256, so it is not in the
-- dedup index.
ALTER TABLE uploads ADD COLUMN checksum_algorithm VARCHAR(16) NOT NULL DEFAULT '';
ALTER TABLE uploads ADD COLUMN full_checksum VARCHAR(64) NULL;
ALTER TABLE files ADD COLUMN sha256_verified BOOLEAN NOT NULL DEFAULT TRUE;

-- A blob's sha256 is NULL until ferry has hashed its object: an
-- unverified blob holds no place in the unique index a claim could squat.
{{if mysql}}
ALTER TABLE blobs MODIFY sha256 CHAR(64) NULL;
{{else}}
CREATE TABLE blobs_v10 (
    id         VARCHAR(40)  NOT NULL PRIMARY KEY,
    sha256     CHAR(64)     NULL,
    size       BIGINT       NOT NULL,
    s3_key     VARCHAR(255) NOT NULL,
    refs       INTEGER      NOT NULL,
    created_at {{ts}}       NOT NULL,
    updated_at {{ts}}       NOT NULL,
    s3_etag    VARCHAR(200) NOT NULL DEFAULT '',
    CONSTRAINT uq_blobs_sha256 UNIQUE (sha256)
);
INSERT INTO blobs_v10 (id, sha256, size, s3_key, refs, created_at, updated_at, s3_etag)
    SELECT id, sha256, size, s3_key, refs, created_at, updated_at, s3_etag FROM blobs;
DROP TABLE blobs;
ALTER TABLE blobs_v10 RENAME TO blobs;
CREATE INDEX ix_blobs_key ON blobs (s3_key);
{{end}}
