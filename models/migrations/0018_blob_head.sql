-- Instant upload without hashing every file first. A verified blob records
-- the CRC32C of its first min(size, 8 MiB) bytes (base64, as the API spells
-- CRC32Cs), computed by the verify job as it reads the object. A client
-- sends the same CRC32C of its file at init, and ferry answers whether it
-- holds verified content of that size and head: only then does the client
-- hash the whole file for an instant upload. Blobs verified before this
-- migration have none until a later upload of their content is verified.
ALTER TABLE blobs ADD COLUMN head_crc32c {{exact 12}} NULL;
CREATE INDEX ix_blobs_size_head ON blobs (size, head_crc32c);
