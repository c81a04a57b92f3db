-- An upload records how it came in, instead of being told apart by zero
-- values: native (POST /uploads, size known), companion (Uppy's multipart
-- routes, size learnt at complete) or post (a single form POST, adopted
-- after it lands). Rows from before this migration are classified the
-- way the code told them apart until now: no multipart upload id is a
-- POST, size still 0 is a Companion upload; a finished Companion upload
-- already has its size, and reads as native, which changes nothing done
-- with it since.
ALTER TABLE uploads ADD COLUMN kind {{exact 16}} NOT NULL DEFAULT 'native';
UPDATE uploads SET kind = 'post' WHERE s3_upload_id = '' AND instant = 0;
UPDATE uploads SET kind = 'companion' WHERE kind = 'native' AND size = 0 AND instant = 0;
