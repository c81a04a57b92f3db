// Package client is the Go client for ferry's native API: uploads straight
// to S3 through presigned part URLs, resumable verified downloads, and
// idempotent exports. The ferry CLI and ferry's own end-to-end tests use it.
//
// # Uploads
//
// Upload starts sending at once: one sequential read of the file yields
// each part's CRC32C (signed into its URL, so S3 refuses a corrupted
// part), the whole file's CRC32C (checked by S3 when ferry completes the
// upload) and the SHA-256, and feeds the part PUTs. It first asks ferry
// for an upload by size, part size and the first part's CRC32C, and ferry
// answers with a new upload or the caller's unfinished one, whose parts S3
// already holds with the same CRC32C are skipped: a rerun after a crash
// resumes with no local state at all.
//
// When the PUTs are slower than reading (the reader waits for a free part
// buffer no longer than hashing two parts takes), the read runs ahead and
// the SHA-256 is known early; with enough left to send, Upload declares
// it, and ferry answers with an instant file when the caller already owns
// the content, or a proof-of-possession challenge when someone else does,
// which Upload answers from the local bytes. Parts read ahead are read
// again when their turn comes, checked against their first CRC32C. A
// caller that knows the SHA-256 (UploadOptions.SHA256) asks first.
//
// With UploadOptions.Ticket, the upload authenticates with an upload
// ticket a host app's backend created (the file is the ticket's user's,
// within its limits) instead of the client's token; UploadOptions.Metadata
// becomes the file's client_metadata.
//
// Parts go to S3 in parallel (Concurrency, default 4). Failed PUTs retry
// with exponential backoff (1 s, 2 s, 4 s … capped at 10 s); an expired URL
// is re-signed. A PUT that moves no byte for the idle timeout, or then
// waits that long for S3's answer, has failed (WithIdleTimeout, default a
// minute): a connection that died without a reset, or a store that
// stopped reading, costs that and a retry on a new connection, not the
// upload. Then Upload completes with the whole file's checksums and
// follows the upload with a long poll until ferry has merged it. A store
// without checksums gets Content-MD5 per part instead.
//
// Retries are silent unless the options' OnRetry is set: it hears of each
// failed try that will be made again (a part, a download, an API call),
// which is how `ferry upload` says why its bar stands still. No error the
// client returns or reports names a URL with its query, where a presigned
// part URL and a download link carry their signatures.
//
// # Downloads
//
// Download resumes a partial file with Range and If-Range on the strong
// ETag it saved, so a changed resource restarts cleanly (a 200 where a 206
// was asked for is never spliced onto old bytes), and checks the whole
// file at the end: against the CRC32C ferry computed with the SHA-256
// (Repr-Digest) when it sends one, else against the strong ETag's
// SHA-256 (DownloadOptions.SHA256 always uses SHA-256). Given
// DownloadOptions.Refresh, it renews a link ferry calls expired and goes
// on; without it an expired link ends the download. A read that waits the
// idle timeout for a byte gives its connection up, and the download
// resumes on a new one.
//
// # Exports
//
// Export keeps its Idempotency-Key beside the output file, so a retried
// command never creates a second export job, waits for the export, then
// downloads it, renewing the link from the export whenever it runs out.
// An export that ended without an artifact (failed, revoked, expired) is
// an *ExportError: the saved key will always find that export, so only
// ExportOptions.NewIntent makes progress.
//
// Errors from ferry are *Error values decoded from problem+json, with the
// stable Code; progress is reported through a callback with bytes, rate,
// ETA and phase.
package client
