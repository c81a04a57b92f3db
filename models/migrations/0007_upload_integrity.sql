-- Proofs of possession are bound to a fresh server nonce: each answer is
-- SHA-256(nonce || range bytes), so knowing a file's SHA-256 (which is the
-- answer to a whole-file range without a nonce) proves nothing.
ALTER TABLE upload_challenges ADD COLUMN nonce CHAR(64) NOT NULL DEFAULT '';

-- s3_etag is the ETag S3 gave the blob's object when ferry verified it.
-- Downloads and deduplication check it (If-Match, HeadObject), so an
-- object changed behind ferry's back is caught instead of served.
ALTER TABLE blobs ADD COLUMN s3_etag VARCHAR(200) NOT NULL DEFAULT '';

-- The per-user limit on open uploads counts a user's uploads by state.
CREATE INDEX ix_uploads_user_state ON uploads (user_id, state);
