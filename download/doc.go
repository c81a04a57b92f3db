// Package download is ferry's revocable download proxy: GET and HEAD of
// /download/{id}?u=&exp=&kid=&sig= for export artifacts and uploaded files.
//
// A presigned S3 URL is checked once, when it is issued, and cannot be
// revoked before it expires. ferry's links are checked on every request
// instead, including every resumed range request: the signature and expiry
// (package presign), that a signed-in caller is the link's user, that the
// user is still active, and (through a Resolver) that the resource still
// exists, still belongs to or is visible to the user, and is not revoked or
// expired. Revoking an export or deactivating a user therefore stops even a
// link issued a second before, at its next request.
//
// Bytes are streamed from S3 by http.ServeContent over a lazy
// s3store.ObjectReader whose size comes from ferry's database: a HEAD, a
// 304 or a 416 costs no S3 request, and each range one ranged GET. The
// strong ETag is the content's SHA-256, so a resumed download (Range with
// If-Range) never splices bytes of two different contents.
//
// Range and If-Range are evaluated by a pre-filter (ranges.go) that follows
// RFC 9110 where net/http deviates from it; the deviations are listed
// there, and each has a test.
//
// Every request writes one row to the download log (table download_log):
// resource, user, status, bytes sent, Range, remote address, user agent.
// Metrics: ferry_downloads_total{status}, ferry_download_bytes_total and
// ferry_download_forwarded_links_total, which counts links used from more
// distinct addresses than configured (a warning is logged as well).
//
// The package does not know exports or files: cmd/ferry gives it a Routes
// value mapping id prefixes ("exp_", "fil_") to the packages that do.
package download
