// Package upload is ferry's inbound side: resumable multipart uploads
// straight from clients to S3, instant upload of content ferry already
// holds, an asynchronous merge that verifies every byte before a file
// exists, and the cleanup that leaves nothing behind.
//
// File bytes never pass through ferry. A client starts an upload (Init),
// asks for presigned part URLs (Presign) and PUTs the parts to S3 itself,
// optionally reporting each finished part (ReportPart). Complete checks with
// S3's ListParts that every part is there with the right size, moves the
// upload to pending and enqueues one merge job; a worker (Service.Register
// adds it to a jobs.Runner) completes the multipart upload, streams the
// object back through SHA-256, and only then, in one transaction, creates
// the blob, the file and the upload.completed outbox event.
//
// What the package promises (design.md §3):
//   - U1: (upload_id, part_number) is unique in upload_parts; reporting a
//     part twice, even concurrently, leaves one row.
//   - U2: the parts a client is told it has come from S3's ListParts (every
//     page), never from the client's own reports.
//   - U3, U4: Complete answers at once; the merge job is unique per upload
//     and fenced, so a crashed worker's job is finished by another and a
//     stale worker's result never lands. A worker that dies after
//     CompleteMultipartUpload is recognised by the next one (NoSuchUpload
//     plus an object of the right size) and verification simply reruns.
//   - U5: nothing unverified becomes a file. Size and SHA-256 are checked by
//     reading the object back with constant memory; a mismatch fails the
//     upload, deletes the object and emits upload.failed.
//   - U6: only hashes the merge computed enter the dedup index (blobs). A
//     user who already owns the content gets an instant file; anyone else
//     must hash three server-chosen byte ranges (a single-use challenge)
//     first.
//   - U7: a periodic cleanup job expires idle uploads and aborts them in S3,
//     aborts multipart uploads under uploads/ that no live row owns, purges
//     expired challenges and fails merges whose job gave up.
//   - U8: upload.completed and upload.failed are written to the outbox in
//     the same transaction as the state change, once each.
//
// Objects live under "uploads/<upload id>". A blob points at the object of
// the first upload that produced its content; a later upload of the same
// content (a race the dedup check could not see) ends with its file on the
// existing blob and its own object deleted. Files count references to
// blobs; deleting the last file deletes the blob and its object.
//
// Browsers using Uppy reach the same service through S3-shaped calls
// (companion.go): InitMultipart starts an upload whose size is unknown
// until CompleteMultipart, which runs S3's CompleteMultipartUpload in the
// request with the client's ETags and then hands the upload to the merge
// job; InitPost starts one sent as a browser form POST under a signed
// policy, adopted by a job once the policy has expired (or when its owner
// asks for it). companion_uploads maps S3 UploadIds to uploads and their
// owners, so the client's object key is never trusted.
//
// The package consumes storage through the small Storage interface, which
// *s3store.Store implements.
package upload
