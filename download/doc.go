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
// If-Range) never splices bytes of two different contents. A resource
// that carries its CRC32C (Resource.CRC32C: a verified upload, or an
// export done since ferry records it) sends it as Repr-Digest (RFC 9530),
// a cheaper check for the client than its own SHA-256. A GET that will
// send bytes makes its first ranged GET before any header goes out: an
// object missing from the bucket is a 500 problem (503 when S3 is
// unreachable), logged and counted as such, never a 200 whose body stops
// at byte 0. That GET is the one that streams the body, so it costs none.
//
// Range and If-Range are evaluated by a pre-filter (ranges.go) that follows
// RFC 9110 where net/http deviates from it; the deviations are listed
// there, and each has a test.
//
// Every request whose link ferry signed and that has not expired writes one
// row to the download log (table download_log): resource, user, status,
// bytes sent, Range, remote address, user agent. Requests with malformed,
// forged or expired links are counted only
// (ferry_download_refused_links_total{reason}), so strangers cannot grow
// the table. Rows older than Config.LogRetention are deleted by a periodic
// job (KindPruneLog, registered with Register; one run per window across
// replicas) and counted in ferry_rows_pruned_total{table="download_log"}. Other metrics:
// ferry_downloads_total{status}, ferry_download_bytes_total,
// ferry_download_spliced_bytes_total (see below) and
// ferry_download_forwarded_links_total, which counts links used from more
// distinct addresses than configured (a warning is logged as well).
//
// A 200 or single-range answer to a client on plain TCP is handed to the
// object (an *s3store.ObjectReader) with the connection's own writer, under
// gin's: where the store is reached over plain HTTP the reader moves the
// body from S3's socket to the client's with splice(2), and ferry copies
// no byte of it (docs/downloads.md, "Cost"). Serve returns the bytes sent,
// since gin's writer no longer sees them all.
//
// The package does not know exports or files: cmd/ferry gives it a Routes
// value mapping id prefixes ("exp_", "fil_") to the packages that do. A
// file's resolver admits its owner, the holders of a download grant
// (package upload; a revoked grant answers 410 download_revoked, an
// expired one 410 download_expired) and the members who can see a
// message attaching it.
package download
