// Package s3store is ferry's one adapter to object storage, built on
// aws-sdk-go-v2. It is tested against VersityGW (embedded, the default, and
// standalone) and SeaweedFS, and meant for any S3 API (docs/storage.md).
//
// A Store holds two clients built from one configuration: an internal one
// for ferry's own calls, and a presign client whose URLs are signed for the
// public endpoint (FERRY_S3_PUBLIC_ENDPOINT), because a SigV4 signature
// covers the host and browsers may reach S3 under another name than ferry
// does.
//
// What it offers:
//   - multipart uploads: create, presign parts one at a time or in batches
//     (each URL optionally pinning the part's size, Content-MD5 or CRC32C),
//     list parts and uploads (every page), complete, abort. A batch's first
//     URL comes from the SDK; the others are signed from it by a small
//     SigV4 query signer (sigv4.go), a tenth of the SDK's cost per URL,
//     whose output is checked against the SDK's byte for byte on every
//     batch (and the SDK used alone where they differ);
//   - browser form uploads: a SigV4 POST policy (PresignPost) pinning the
//     key, the fields and the size range, built here since the SDK has no
//     builder; and, for stores without POST policies, a presigned PUT
//     pinning the key, the content type and metadata (PresignPut);
//   - objects: head, streaming GET, ranged GET, a lazy io.ReadSeekCloser
//     that issues ranged GETs only when read (Open) and, on a plain-HTTP
//     endpoint, sends them on a connection of its own whose body SendTo
//     splices to a client's socket (splice.go), streaming writes of
//     unknown size with constant memory that become visible only when the
//     writer succeeds (WriteObject), put, delete, delete by prefix or
//     by a list of keys (a listing's page, or 1,000 keys, per
//     DeleteObjects call, one object per call on a store that refuses
//     DeleteObjects), server-side copy (Copy);
//   - the capability probe (Probe): checksums, POST policies, CORS (a
//     browser's preflight and PUT), lifecycle and CopyObject, each tried
//     the way ferry uses it, so ferry can fall back from what a store
//     lacks;
//   - bucket bootstrap: create the bucket if allowed, a CORS rule for
//     ferry's browser origins (PUT with content-md5, ETag exposed), and an
//     AbortIncompleteMultipartUpload lifecycle rule where supported.
//   - request metrics: given Config.Registerer, every request the Store
//     sends (the SDK's, each retry apart, and the direct GETs) is timed
//     until its answer's headers, by S3 operation and outcome, in
//     ferry_s3_request_duration_seconds (metrics.go), so an operator can
//     tell the store's share of any latency ferry reports.
//
// Each domain declares the small interface it needs (upload.Storage,
// export.Storage, download.Storage) in this package's value types and the
// standard library's interfaces, so a second adapter could meet them; the
// wiring in cmd/ferry checks at build time that Store does. Config.API
// lets a caller put its own S3 client (a wrapper that injects faults or
// counts calls) under the Store.
//
// S3 errors are translated at this boundary into the sentinels below
// (ErrNotFound, ErrNoSuchUpload, ErrInvalidParts, ...), so callers never
// inspect SDK types.
//
// IAM permissions ferry needs on its bucket:
//
//	s3:ListBucket, s3:ListBucketMultipartUploads,
//	s3:GetObject, s3:PutObject, s3:DeleteObject,
//	s3:AbortMultipartUpload, s3:ListMultipartUploadParts,
//	s3:PutBucketCORS, s3:PutLifecycleConfiguration (bootstrap only),
//	s3:GetLifecycleConfiguration (the start-up probe only),
//	s3:CreateBucket (only with FERRY_S3_CREATE_BUCKET=true).
package s3store
