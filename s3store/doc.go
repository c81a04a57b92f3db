// Package s3store is ferry's one adapter to object storage, built on
// aws-sdk-go-v2. It works against AWS S3, MinIO and VersityGW (the embedded
// default).
//
// A Store holds two clients built from one configuration: an internal one
// for ferry's own calls, and a presign client whose URLs are signed for the
// public endpoint (FERRY_S3_PUBLIC_ENDPOINT), because a SigV4 signature
// covers the host and browsers may reach S3 under another name than ferry
// does.
//
// What it offers:
//   - multipart uploads: create, presign parts one at a time or in batches
//     (with an optional pinned Content-MD5), list parts and uploads (every
//     page), complete, abort;
//   - browser form uploads: a SigV4 POST policy (PresignPost) pinning the
//     key, the fields and the size range, built here since the SDK has no
//     builder;
//   - objects: head, streaming GET, ranged GET, a lazy io.ReadSeeker that
//     issues ranged GETs only when read, streaming multipart writes with
//     constant memory, put and delete;
//   - bucket bootstrap: create the bucket if allowed, a CORS rule for
//     ferry's browser origins (PUT with content-md5, ETag exposed), and an
//     AbortIncompleteMultipartUpload lifecycle rule where supported.
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
//	s3:CreateBucket (only with FERRY_S3_CREATE_BUCKET=true).
package s3store
