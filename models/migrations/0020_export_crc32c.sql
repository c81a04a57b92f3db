-- A done export records the CRC32C of its artifact (base64, as the API
-- spells CRC32Cs), computed in the same pass that writes the artifact and
-- its SHA-256. The download proxy sends it as Repr-Digest (RFC 9530), as
-- it does for verified uploads (0019), so `ferry export` checks what it
-- received at CRC32C's speed instead of SHA-256's. Exports finished
-- before this migration have none; their downloads are checked by
-- SHA-256 as before.
ALTER TABLE exports ADD COLUMN crc32c {{exact 12}} NULL;
