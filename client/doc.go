// Package client is the Go client for ferry's native API: uploads straight
// to S3 through presigned part URLs, resumable verified downloads, and
// idempotent exports. The ferry CLI and ferry's own end-to-end tests use it.
//
// # Uploads
//
// Upload first hashes the file (SHA-256, streamed, reported as the "hash"
// phase), then asks ferry for an upload. ferry answers one of four ways,
// and Upload handles each:
//
//   - a new upload: every part is sent;
//   - the caller's unfinished upload of the same content: only the parts
//     S3 does not already hold with the right bytes are sent, so a rerun
//     after a crash resumes with no local state at all;
//   - an instant upload: the caller already owns the content;
//   - a proof-of-possession challenge: someone else owns the content, and
//     Upload proves it has the bytes by hashing the ranges ferry chose.
//
// Parts go to S3 in parallel (Concurrency, default 4), each with its
// Content-MD5 signed into the URL, so S3 refuses a corrupted part. Failed
// PUTs retry with exponential backoff (1 s, 2 s, 4 s … capped at 10 s); an
// expired URL is re-signed. Then Upload completes and waits until ferry has
// merged and verified the file.
//
// # Downloads
//
// Download resumes a partial file with Range and If-Range on the strong
// ETag it saved, so a changed resource restarts cleanly (a 200 where a 206
// was asked for is never spliced onto old bytes), and checks the SHA-256
// at the end.
//
// # Exports
//
// Export keeps its Idempotency-Key beside the output file, so a retried
// command never creates a second export job, waits for the export, then
// downloads it.
//
// Errors from ferry are *Error values decoded from problem+json, with the
// stable Code; progress is reported through a callback with bytes, rate,
// ETA and phase.
package client
