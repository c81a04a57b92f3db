// Package embedded runs an S3-compatible server inside the ferry process:
// VersityGW (github.com/versity/versitygw, Apache-2.0) with its POSIX
// backend, storing objects as files under ferry's data directory.
//
// It is what makes `ferry serve` work with no configuration. It is a real
// S3 implementation, not a fake: it checks SigV4 signatures and presign
// expiry, verifies Content-MD5, enforces part sizes and serves bucket CORS,
// so ferry uses it exactly as it would use AWS S3 or MinIO.
//
// Root credentials are generated on first start and kept in the data
// directory (mode 0600), so presigned URLs and the data survive restarts.
//
// Two properties of VersityGW shape how it is used:
//   - only one gateway may run per process (it keeps package-level state);
//   - its POSIX backend changes the process working directory to the
//     storage root. ferry therefore resolves every path to an absolute one
//     before starting it (config.Load already does).
//
// Its merge (CompleteMultipartUpload) appends the parts to a new file with
// copy_file_range(2): free on a filesystem with reflinks, a copy of every
// byte elsewhere. MergesShareBlocks tells which, for `ferry doctor`.
package embedded
