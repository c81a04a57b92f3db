-- A cheap end-to-end check for downloads. A verified blob records the
-- CRC32C of its whole object (base64, as the API spells CRC32Cs), computed
-- by the verify job in the same read as its SHA-256. The download proxy
-- sends it as Repr-Digest (RFC 9530), so a client can check the bytes it
-- received at CRC32C's speed instead of SHA-256's. Blobs verified before
-- this migration have none until a later upload of their content is
-- verified; their downloads are checked by SHA-256 as before.
ALTER TABLE blobs ADD COLUMN crc32c {{exact 12}} NULL;
