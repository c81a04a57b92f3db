// Package upload is ferry's inbound side: resumable multipart uploads
// straight from clients to S3, with every part and the whole file checked
// by S3 against the client's CRC32C checksums, instant upload of content
// ferry already holds, an asynchronous merge after which the file exists,
// a background verification that computes its SHA-256, and the cleanup
// that leaves nothing behind.
//
// An upload comes in one of three ways, recorded as its kind: native
// (Init, in init.go and session.go), Companion (Uppy's multipart routes,
// companion.go) or POST (one form POST, post.go). The three share one core
// of rows, parts, merge and verification; where a rule differs it reads
// the kind.
//
// File bytes never pass through ferry. A client starts an upload (Init),
// asks for presigned part URLs (Presign, each pinning its part's size and
// CRC32C, or Content-MD5 where the store has no checksums) and PUTs the
// parts to S3 itself, optionally reporting each finished part
// (ReportPart) and declaring the file's SHA-256 once it knows it
// (DeclareSHA256), which a client does when Init said the content may be
// held (InstantCandidate). Complete checks with S3's ListParts that every part is
// there with the right size, records the whole file's CRC32C, moves the
// upload to pending and enqueues one merge job; a worker (Service.Register
// adds it to a jobs.Runner) completes the multipart upload, and in one
// transaction records the file (on a blob with no SHA-256 yet) and the
// upload's success, and enqueues the verify job. That job streams the
// object through SHA-256 and, in one transaction, records the hash, puts
// the content in the dedup index (or shares the blob that holds it) and
// writes upload.completed. WaitStatus lets a client hold a request open
// until its upload is merged.
//
// What the package promises (docs/uploads.md):
//
//   - U1: (upload_id, part_number) is unique in upload_parts; reporting a
//     part twice, even concurrently, leaves one row.
//
//   - U2: the parts a client is told it has come from S3's ListParts (every
//     page), never from the client's own reports, with their CRC32C.
//
//   - U3, U4: Complete answers at once; the merge and verify jobs are unique
//     per upload and fenced, so a crashed worker's job is finished by
//     another and a stale worker's result never lands. A worker that dies
//     after CompleteMultipartUpload is recognised by the next one
//     (NoSuchUpload plus an object of the right size).
//
//   - U5: a file is what the client read, and its hash is ferry's. With
//     checksums, S3 checks each part against the CRC32C signed into its URL
//     and the whole object against the client's CRC32C at completion; a
//     mismatch fails the upload and no file exists. The file exists from
//     the merge on, without a read-back; its SHA-256 is then computed from
//     the stored bytes, and a client's claim is corrected, never trusted.
//
//   - U6: only hashes the verify job computed enter the dedup index
//     (blobs with a SHA-256); until then a file reaches no one but its
//     owner (StoredFile.Readable) and upload.completed is not written. A
//     user who already owns the content gets an instant file; anyone else
//     must answer a single-use challenge first: for three server-chosen
//     byte ranges, SHA-256(nonce || range bytes) with a fresh server nonce
//     (ProofDigest), so that no answer can be computed from the content's
//     hash, even when a range is the whole file. The verify job records
//     with the hash the CRC32C of the content's first HeadLength bytes;
//     Init tells a client that sends its file's (HeadCRC32C) whether
//     verified content of that size and head exists (InstantCandidate),
//     so that clients hash a whole file only when an instant upload may
//     come of it. The hint is never an answer: the SHA-256 and a proof
//     decide. The whole object's CRC32C, which the download proxy sends as
//     Repr-Digest (StoredFile.CRC32C), is the one S3 checked at completion
//     (kept on the blob by the merge, tied to the object by its ETag), or,
//     for an upload without checksums, computed by the same read.
//
//   - U7: a periodic cleanup job expires idle uploads and aborts them in S3,
//     aborts multipart uploads under uploads/ that no live row owns, purges
//     expired challenges and fails merges whose job gave up.
//
//   - U8: upload.completed and upload.failed are written to the outbox in
//     the same transaction as the state change, once each.
//
//   - U9: a blob's object is never writable by a credential ferry handed
//     out and that is still alive. Multipart uploads (native and Companion)
//     live at "uploads/<upload id>" and are verified after
//     CompleteMultipartUpload, which ends every part URL of the upload; a
//     POST-policy upload lands at "posts/<upload id>", which its policy can
//     overwrite until it expires, so the merge copies it to "blobs/<upload
//     id>" and verifies the copy. The blob records the ETag of the object
//     it hashed; downloads (If-Match) and deduplication (HeadObject) check
//     it, so a changed object is neither served nor shared, and the next
//     upload of the same content repairs the blob.
//
// A blob points at the verified object of the first upload that produced
// its content; a later upload of the same content (a race the dedup check
// could not see) ends with its file on the existing blob and its own
// object deleted. Files count references to blobs; deleting the last file
// deletes the blob and its object. Cleanup deletes whatever a POST policy
// wrote to "posts/" after its upload ended.
//
// Every user may hold Config.MaxOpen uploads still uploading; another
// init is refused with TooManyRequests. With Config.Quotas, a user's files
// may store at most their byte quota (Usage: each blob they hold a file of
// counts once, plus what their unfinished uploads declared): init refuses
// a declared size over what is left with TooLarge quota_exceeded, checked
// again under the user's row lock in the transaction that records the
// upload, and an upload whose size is learnt at completion (Companion's)
// is checked then, before S3 makes the object.
//
// A host app's backend hands its users upload tickets (tickets.go): the
// right to make one upload as a given user, within a size and media
// types, carrying the backend's trusted metadata. The ticket is claimed by
// a conditional update in the transaction that inserts its upload, so
// racing inits make one upload; a ticket's upload never becomes an
// instant file or a proof (that would be a second upload), and the
// ticket works for its upload after its expiry, until the upload ends.
// Every file carries two metadata objects (metadata.go, ParseMetadata:
// 16 keys, 1 KiB values, UTF-8): the ticket's (Metadata) and the
// uploader's (ClientMetadata), in the file and in upload.completed.
//
// Download grants (grants.go) let a file's owner, or a service, allow
// another user to download a verified file through the proxy; Access
// answers, on every request, whether a grant holds, was revoked or
// expired. A file's grants are deleted with it.
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
// Stores differ (docs/storage.md). Config says what ferry found at
// start-up (s3store.Store.Probe) and how large the store lets an upload
// be: without checksums, parts pin Content-MD5 (Checksums); without POST
// policies, InitPost signs a PUT of the same key (PutInsteadOfPost);
// without CopyObject, the merge copies a posted object through ferry
// (CopyThroughFerry); MaxParts and MaxPartSize set the part-size rule and
// the largest file. Where a store lists every PUT of a part (SeaweedFS),
// the part is the one the client got the ETag for.
//
// The package consumes storage through the small Storage interface, which
// *s3store.Store implements.
package upload
