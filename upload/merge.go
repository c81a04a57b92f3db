package upload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/notify"
	"github.com/ferry-io/ferry/s3store"
)

// merge is the merge job's handler. It makes the file's object (it
// completes the multipart upload with the parts S3 lists and, for an
// upload with checksums, the client's CRC32C of the whole file, which S3
// checks; or it copies a posted object to a key of ferry's own) and then,
// without reading the object back, records the file and its blob, the
// upload's success and the verify job that will hash it, in one fenced
// transaction with the job's completion. Every step is idempotent, so a
// rerun after a crash anywhere ends the same way.
func (s *Service) merge(ctx context.Context, j *jobs.Job) error {
	start := time.Now()
	var u models.Upload
	err := s.db.WithContext(ctx).Where("id = ?", j.Key).Take(&u).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		s.log.ErrorContext(ctx, "merge job for a missing upload", "upload_id", j.Key)
		return nil
	}
	if err != nil {
		return err
	}
	if u.State != StatePending && u.State != StateMerging {
		return nil // an earlier run recorded the outcome
	}
	if u.State == StatePending {
		err := s.db.WithContext(ctx).Model(&models.Upload{}).Where("id = ? AND state = ?", u.ID, StatePending).
			Updates(map[string]any{"state": StateMerging, "updated_at": s.nowUTC()}).Error
		if err != nil {
			return err
		}
		s.metrics.transition(StateMerging)
	}
	log := s.log.With("upload_id", u.ID, "job_id", j.ID, "attempt", j.Attempt)
	// Clients waiting on this replica for the outcome are woken when the
	// merge ends, so they stop polling the database meanwhile.
	defer s.changes.merge(u.ID)()

	reason, obj, err := s.assemble(ctx, &u)
	if errors.Is(err, errLost) {
		return s.restart(ctx, j, &u)
	}
	if err != nil {
		// An outage is the runner's to wait out (it does not use up the
		// merge's attempts); anything else fails the upload on the last.
		if ctx.Err() != nil || j.Attempt < j.MaxAttempts || errors.Is(err, errkind.Unavailable) {
			log.WarnContext(ctx, "merge attempt failed; will retry", "err", err)
			return err
		}
		reason = fmt.Sprintf("merge gave up after %d attempts: %s", j.Attempt, describeStorageError(err))
	}
	if reason != "" {
		err = s.fail(ctx, j, &u, reason)
		s.metrics.mergeDuration.WithLabelValues(StateFailed).Observe(time.Since(start).Seconds())
		log.WarnContext(ctx, "upload failed", "reason", reason, "err", err)
		return err
	}
	if err := s.succeed(ctx, j, &u, obj); err != nil {
		return err
	}
	s.metrics.mergeDuration.WithLabelValues(StateSuccess).Observe(time.Since(start).Seconds())
	log.InfoContext(ctx, "upload completed", "size", u.Size, "key", obj.key, "checksum", u.ChecksumAlgorithm, "elapsed", time.Since(start))
	return nil
}

// errGoneDuringMerge reports an upload whose row was deleted (its user
// erased) while the merge made its object.
var errGoneDuringMerge = errors.New("upload: the upload was erased during its merge")

// object is the merged object a file is made of: its key, the ETag S3
// gave it, and its CRC32C (base64) when S3 checked the whole object
// against one as it completed it.
type object struct {
	key, etag string
	crc32c    string
}

// blobKey is where the merge copies a POST-policy upload's object to.
func blobKey(uploadID string) string { return blobPrefix + uploadID }

// assemble completes the multipart upload (or, for a POST-policy upload,
// copies the posted object to a key of ferry's own) and checks the
// result's size. A non-empty reason is a permanent failure; an error is
// worth retrying.
func (s *Service) assemble(ctx context.Context, u *models.Upload) (reason string, obj object, err error) {
	if posted(u) {
		reason, obj, err = s.copyPosted(ctx, u)
	} else {
		reason, obj, err = s.completeMultipart(ctx, u)
	}
	if reason != "" || err != nil {
		return reason, obj, err
	}
	if h := s.hooks.AfterComplete; h != nil {
		h(u.ID)
	}
	return "", obj, nil
}

// completeMultipart completes u's multipart upload with the parts S3
// lists. An upload an earlier attempt completed (it died before recording
// it), or one the Companion routes completed in the request, is recognised
// by its object.
func (s *Service) completeMultipart(ctx context.Context, u *models.Upload) (string, object, error) {
	want, err := s.clientETags(ctx, u)
	if err != nil {
		return "", object{}, err
	}
	listed, err := s.store.ListPartsPreferring(ctx, u.S3Key, u.S3UploadID, preferring(u, want))
	switch {
	case errors.Is(err, s3store.ErrNoSuchUpload):
		// Completed already, or gone; the object tells which.
	case err != nil:
		return "", object{}, err
	default:
		parts, reason, err := partsToComplete(u, listed, want)
		if reason != "" || err != nil {
			return reason, object{}, err
		}
		full := ""
		if u.FullChecksum != nil {
			full = *u.FullChecksum
		}
		etag, err := s.store.CompleteMultipart(ctx, u.S3Key, u.S3UploadID, parts, full)
		switch {
		case err == nil:
			// The layout (checkLayout) fixed the size; S3 checked the
			// bytes against the full-object checksum when there is one,
			// so that is the object's CRC32C and the verify job need not
			// compute it again. (A store is trusted with checksums only
			// once the probe has seen it refuse a wrong one here.) The
			// ETag ties that CRC32C to this version of the object.
			obj := object{key: u.S3Key, etag: etag}
			if etag != "" {
				obj.crc32c = full
			}
			return "", obj, nil
		case errors.Is(err, s3store.ErrNoSuchUpload):
		case errors.Is(err, s3store.ErrBadDigest):
			return fmt.Sprintf("the file's CRC32C %s does not match the parts S3 holds: the bytes S3 received are not the file the client read", full), object{}, nil
		case errors.Is(err, s3store.ErrInvalidParts):
			return "S3 refused the parts: " + describeStorageError(err), object{}, nil
		default:
			return "", object{}, err
		}
	}
	info, err := s.store.Head(ctx, u.S3Key)
	if errors.Is(err, s3store.ErrNotFound) {
		companion, err := s.viaCompanion(ctx, u.ID)
		if err != nil {
			return "", object{}, err
		}
		if !companion {
			return "", object{}, errLost
		}
		// A Companion client names its upload by the S3 UploadId, which a
		// restart would change under it.
		return "the store lost the multipart upload before it was merged; upload the file again", object{}, nil
	}
	if err != nil {
		return "", object{}, err
	}
	if info.Size != u.Size {
		return fmt.Sprintf("size mismatch: the object has %d bytes, the upload declared %d", info.Size, u.Size), object{}, nil
	}
	return "", object{key: u.S3Key, etag: info.ETag}, nil
}

// errLost says the store has neither the multipart upload nor an object for
// it: it lost the upload (a crash inside CompleteMultipartUpload, an
// operator, a lifecycle rule), whatever ferry was told.
var errLost = errors.New("upload: the store lost the multipart upload")

// viaCompanion reports whether upload id was started through the
// Companion routes.
func (s *Service) viaCompanion(ctx context.Context, id string) (bool, error) {
	var n int64
	err := s.db.WithContext(ctx).Model(&models.CompanionUpload{}).Where("upload_id = ?", id).Count(&n).Error
	return n > 0, err
}

// restart puts an upload whose multipart upload the store lost back to
// uploading on a new multipart upload under the same key, so the client's
// next resume (GET /uploads/{id} lists no parts) sends every part again and
// completes again; nothing the client was promised is lost, and no upload
// fails for a store's crash. Part reports and the client's ETags and
// checksum belonged to the lost upload and go.
func (s *Service) restart(ctx context.Context, j *jobs.Job, u *models.Upload) error {
	s3id, err := s.store.CreateMultipart(ctx, u.S3Key, s3store.MultipartOptions{ContentType: u.ContentType, Checksum: u.ChecksumAlgorithm})
	if err != nil {
		return storageError("create multipart upload", err)
	}
	now := s.nowUTC()
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Model(&models.Upload{}).Where("id = ? AND state = ? AND s3_upload_id = ?", u.ID, StateMerging, u.S3UploadID).
			Updates(map[string]any{"state": StateUploading, "s3_upload_id": s3id, "client_etags": nil, "full_checksum": nil,
				"updated_at": now, "expires_at": now.Add(s.cfg.TTL)})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			return fmt.Errorf("upload: %s left merging before it could restart", u.ID)
		}
		if err := tx.Where("upload_id = ?", u.ID).Delete(&models.UploadPart{}).Error; err != nil {
			return err
		}
		return j.Finish(ctx, tx)
	})
	if err != nil {
		s.abortQuietly(ctx, u.S3Key, s3id)
		return err
	}
	s.changes.done(u.ID)
	s.metrics.restarts.Inc()
	s.metrics.transition(StateUploading)
	s.log.WarnContext(ctx, "the store lost a multipart upload before it was merged; the upload is back to uploading on a new one",
		"upload_id", u.ID, "old_s3_upload_id", u.S3UploadID)
	return nil
}

// copyThrough copies src to dst by streaming it through ferry (a GET and
// a multipart upload of at most two 8 MiB buffers at a time), for stores
// without CopyObject. It is bounded like a server-side copy.
func (s *Service) copyThrough(ctx context.Context, src, dst string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	body, info, err := s.store.GetVersion(ctx, src)
	if err != nil {
		return err
	}
	defer body.Close()
	_, err = s.store.WriteObject(ctx, dst, info.ContentType, 8<<20, func(w io.Writer) error {
		_, err := io.Copy(w, body)
		return err
	})
	if err != nil {
		return fmt.Errorf("upload: copy %s to %s through ferry: %w", src, dst, err)
	}
	return nil
}

// copyPosted copies a POST-policy upload's object, which its policy may
// still overwrite, to blobKey, which nothing but ferry writes: what becomes
// the blob, and what is hashed, is the copy. A rerun copies again; a source
// already gone (an earlier attempt finished and the source was purged)
// leaves the earlier copy.
func (s *Service) copyPosted(ctx context.Context, u *models.Upload) (string, object, error) {
	dst := blobKey(u.ID)
	var err error
	if s.cfg.CopyThroughFerry {
		err = s.copyThrough(ctx, u.S3Key, dst)
	} else {
		_, err = s.store.Copy(ctx, u.S3Key, dst)
	}
	if err != nil && !errors.Is(err, s3store.ErrNotFound) {
		return "", object{}, err
	}
	info, herr := s.store.Head(ctx, dst)
	switch {
	case errors.Is(herr, s3store.ErrNotFound):
		return "the posted object vanished before it was merged", object{}, nil
	case herr != nil:
		return "", object{}, herr
	case info.Size != u.Size:
		// The policy wrote other bytes between adoption and the copy.
		return fmt.Sprintf("size mismatch: the posted object has %d bytes, %d when it was adopted", info.Size, u.Size), object{}, nil
	}
	return "", object{key: dst, etag: info.ETag}, nil
}

// clientETags are the ETags the client named for u's parts, by reporting
// them or at complete (which wins).
func (s *Service) clientETags(ctx context.Context, u *models.Upload) (map[int]string, error) {
	want := map[int]string{}
	rows, err := s.partRows(ctx, u.ID)
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		want[r.Number] = normalizeETag(r.ETag)
	}
	if u.ClientETags != nil {
		var sent map[int]string
		if err := json.Unmarshal([]byte(*u.ClientETags), &sent); err != nil {
			return nil, fmt.Errorf("upload: client etags of %s: %w", u.ID, err)
		}
		for n, e := range sent {
			want[n] = e
		}
	}
	return want, nil
}

// preferring says which part ferry wants where a store lists several PUTs
// under one number (s3store.Store.ListPartsPreferring): the one the client
// got etags[n] for, else one of the size the layout gives it, for a sized
// upload u.
func preferring(u *models.Upload, etags map[int]string) map[int32]s3store.PartPreference {
	out := make(map[int32]s3store.PartPreference, len(etags)+u.PartCount)
	for n := 1; n <= u.PartCount && !unsized(u); n++ {
		out[int32(n)] = s3store.PartPreference{Size: expectedPartSize(u, n)}
	}
	for n, e := range etags {
		p := out[int32(n)]
		p.ETag = e
		out[int32(n)] = p
	}
	return out
}

// partsToComplete picks the parts for CompleteMultipartUpload: exactly
// 1..PartCount with the ETags S3 reports, so strays never reach the file.
// Parts must still have the right sizes, and where the client named an
// ETag (want: at complete, or by reporting the part) it must be S3's: a
// part replaced after the client vouched for it fails the merge.
func partsToComplete(u *models.Upload, listed []s3store.Part, want map[int]string) ([]s3store.CompletedPart, string, error) {
	if err := checkLayout(u, listed); err != nil {
		var ke *errkind.Error
		if errors.As(err, &ke) {
			return nil, fmt.Sprintf("parts changed after complete: missing %v, wrong size %v", ke.Fields["missing_parts"], ke.Fields["bad_parts"]), nil
		}
		return nil, "", err
	}
	parts := make([]s3store.CompletedPart, 0, u.PartCount)
	for _, p := range s3Parts(listed, u.PartCount) {
		if e, ok := want[p.Number]; ok && e != normalizeETag(p.ETag) {
			return nil, fmt.Sprintf("part %d changed: the client reported ETag %s, S3 holds %s", p.Number, e, normalizeETag(p.ETag)), nil
		}
		parts = append(parts, s3store.CompletedPart{Number: int32(p.Number), ETag: p.ETag, CRC32C: p.CRC32C})
	}
	return parts, "", nil
}

// succeed records a merged upload: a blob for its object (with the whole
// object's CRC32C when S3 checked one), not yet in the dedup index (it has
// no SHA-256 until the verify job hashes it), the file
// on it with the client's claimed SHA-256 marked unverified, the upload's
// success and the verify job, with the merge job's completion, in one
// transaction. From here on the owner can list and download the file; it
// reaches nobody else, and upload.completed is not sent, until it is
// verified.
func (s *Service) succeed(ctx context.Context, j *jobs.Job, u *models.Upload, obj object) error {
	now := s.nowUTC()
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		b := models.Blob{ID: models.NewID("blb"), Size: u.Size, S3Key: obj.key, S3ETag: obj.etag, Refs: 1, CreatedAt: now, UpdatedAt: now}
		if obj.crc32c != "" {
			b.CRC32C = &obj.crc32c
		}
		if err := tx.Create(&b).Error; err != nil {
			return err
		}
		if obj.key != u.S3Key {
			// The posted original, which its policy may still write, has
			// served its purpose.
			if err := s.enqueuePurge(ctx, tx, u.S3Key, ""); err != nil {
				return err
			}
		}
		claim := ""
		if u.SHA256 != nil {
			claim = *u.SHA256
		}
		f, err := s.createFile(ctx, tx, u, &b, claim, false, now)
		if err != nil {
			return err
		}
		res := tx.Model(&models.Upload{}).Where("id = ? AND state IN ?", u.ID, []string{StatePending, StateMerging}).
			Updates(map[string]any{"state": StateSuccess, "file_id": f.ID, "error": nil, "resume_key": nil, "updated_at": now, "finished_at": now})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			var n int64
			if err := tx.Model(&models.Upload{}).Where("id = ?", u.ID).Count(&n).Error; err != nil {
				return err
			}
			if n == 0 {
				return errGoneDuringMerge
			}
			return fmt.Errorf("upload: %s left merging during the merge", u.ID)
		}
		if _, err := s.queue.Enqueue(ctx, tx, jobs.Spec{Kind: KindVerify, Key: u.ID}); err != nil {
			return err
		}
		return j.Finish(ctx, tx)
	})
	if errors.Is(err, errGoneDuringMerge) {
		// Its user was erased while S3 merged it. The erasure's purge job
		// may have run before the object existed, and a second purge of
		// the key would not be queued (one per key), so the object goes
		// now rather than wait for the cleanup job's sweep of unknown
		// objects; if the delete fails, that sweep still finds it.
		s.log.InfoContext(ctx, "upload erased during its merge; deleting the merged object", "upload_id", u.ID, "key", obj.key)
		s.deleteQuietly(ctx, obj.key)
		return j.Finish(ctx, s.db.WithContext(ctx))
	}
	if err != nil {
		return err
	}
	s.changes.done(u.ID)
	s.queue.Wake(KindVerify)
	s.queue.Wake(KindPurge)
	s.metrics.transition(StateSuccess)
	return nil
}

func (s *Service) createFile(ctx context.Context, tx *gorm.DB, u *models.Upload, b *models.Blob, sha string, verified bool, now time.Time) (*models.File, error) {
	f := models.File{
		ID: models.NewID("fil"), UserID: u.UserID, BlobID: b.ID, UploadID: u.ID, Name: u.FileName,
		ContentType: u.ContentType, Size: b.Size, SHA256: sha, SHA256Verified: verified, CreatedAt: now,
		TicketID: u.TicketID, Metadata: u.Metadata, ClientMetadata: u.ClientMetadata,
	}
	if err := tx.WithContext(ctx).Create(&f).Error; err != nil {
		return nil, err
	}
	return &f, nil
}

// CompletedEvent is the data of an upload.completed event: server-verified
// facts only (the SHA-256 is the one ferry computed from the stored bytes),
// a snapshot the receiver can check against storage, with the times of the
// changes it reports (the upload began, its file came to be, ferry
// verified it).
type CompletedEvent struct {
	UploadID        string    `json:"upload_id"`
	FileID          string    `json:"file_id"`
	UserID          string    `json:"user_id"`
	Name            string    `json:"name"`
	Size            int64     `json:"size"`
	SHA256          string    `json:"sha256"`
	ContentType     string    `json:"content_type"`
	Instant         bool      `json:"instant"`
	UploadCreatedAt time.Time `json:"upload_created_at"`
	CompletedAt     time.Time `json:"completed_at"`
	VerifiedAt      time.Time `json:"verified_at"`
	CreatedAt       time.Time `json:"created_at"` // the file's, as GET /files/{id} shows it
	// Metadata is the trusted metadata of the ticket that made the upload
	// ({} without one); ClientMetadata what the uploader sent ({} for
	// none); TicketID the ticket, if any.
	Metadata       Metadata `json:"metadata"`
	ClientMetadata Metadata `json:"client_metadata"`
	TicketID       string   `json:"ticket_id,omitempty"`
}

// FailedEvent is the data of an upload.failed event, with when the upload
// began and when it failed.
type FailedEvent struct {
	UploadID        string    `json:"upload_id"`
	UserID          string    `json:"user_id"`
	Name            string    `json:"name"`
	Size            int64     `json:"size"`
	SHA256          string    `json:"sha256,omitempty"` // as declared
	Error           string    `json:"error"`
	UploadCreatedAt time.Time `json:"upload_created_at"`
	FailedAt        time.Time `json:"failed_at"`
}

// emitCompleted writes upload.completed for a verified file f of upload u.
func (s *Service) emitCompleted(ctx context.Context, tx *gorm.DB, u *models.Upload, f *models.File, now time.Time) error {
	completed := now
	if u.FinishedAt != nil {
		completed = *u.FinishedAt
	}
	_, err := notify.Emit(ctx, tx, now, notify.Event{
		Type: notify.UploadCompleted, Subject: u.ID, UserID: u.UserID,
		Data: CompletedEvent{UploadID: u.ID, FileID: f.ID, UserID: u.UserID, Name: f.Name, Size: f.Size,
			SHA256: f.SHA256, ContentType: f.ContentType, Instant: u.Instant,
			UploadCreatedAt: models.Time(u.CreatedAt), CompletedAt: models.Time(completed), VerifiedAt: models.Time(now),
			CreatedAt: f.CreatedAt, Metadata: decodeMetadata(f.Metadata), ClientMetadata: decodeMetadata(f.ClientMetadata),
			TicketID: deref(f.TicketID)},
	})
	return err
}

// fail records a permanent failure: the upload's state and reason, the
// upload.failed event and a job that deletes the object (and aborts the
// multipart upload if it was never completed), in one transaction with the
// job's completion. j is nil when cleanup fails a merge whose job gave up.
func (s *Service) fail(ctx context.Context, j *jobs.Job, u *models.Upload, reason string) error {
	now := s.nowUTC()
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Model(&models.Upload{}).Where("id = ? AND state IN ?", u.ID, []string{StatePending, StateMerging}).
			Updates(map[string]any{"state": StateFailed, "error": reason, "resume_key": nil, "updated_at": now, "finished_at": now})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			return fmt.Errorf("upload: %s left merging before it could fail", u.ID)
		}
		if err := s.emitFailed(ctx, tx, u, reason, now); err != nil {
			return err
		}
		if err := s.enqueuePurge(ctx, tx, u.S3Key, u.S3UploadID); err != nil {
			return err
		}
		if posted(u) {
			if err := s.enqueuePurge(ctx, tx, blobKey(u.ID), ""); err != nil {
				return err
			}
		}
		if j == nil {
			return nil
		}
		return j.Finish(ctx, tx)
	})
	if err != nil {
		return err
	}
	s.changes.done(u.ID)
	s.queue.Wake(KindPurge)
	s.queue.Wake(notify.WakeDispatch)
	s.metrics.transition(StateFailed)
	return nil
}

func (s *Service) emitFailed(ctx context.Context, tx *gorm.DB, u *models.Upload, reason string, now time.Time) error {
	ev := FailedEvent{UploadID: u.ID, UserID: u.UserID, Name: u.FileName, Size: u.Size, Error: reason,
		UploadCreatedAt: models.Time(u.CreatedAt), FailedAt: now}
	if u.SHA256 != nil {
		ev.SHA256 = *u.SHA256
	}
	_, err := notify.Emit(ctx, tx, now, notify.Event{Type: notify.UploadFailed, Subject: u.ID, UserID: u.UserID, Data: ev})
	return err
}

// describeStorageError names what went wrong without leaking internal
// text into a reason shown to clients.
func describeStorageError(err error) string {
	for _, e := range []error{s3store.ErrInvalidParts, s3store.ErrBadDigest, s3store.ErrStorageFull, s3store.ErrUnavailable, s3store.ErrAccessDenied, s3store.ErrNotFound, s3store.ErrNoSuchUpload} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return "storage error"
}
