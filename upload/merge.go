package upload

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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

// Verification reads the object in chunks of verifyChunk through
// verifyBuffers buffers: one is filled from the network while another is
// hashed, so reading and hashing overlap and memory stays at a few MiB
// whatever the file's size.
const (
	verifyChunk   = 1 << 20
	verifyBuffers = 4
)

// merge is the merge job's handler. It completes the multipart upload with
// the parts S3 lists, verifies the object, and records the outcome in one
// fenced transaction with the job's completion. Every step is idempotent,
// so a rerun after a crash anywhere ends the same way.
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

	reason, sum, err := s.assemble(ctx, &u)
	if err != nil {
		if ctx.Err() != nil || j.Attempt < j.MaxAttempts {
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
	if err := s.succeed(ctx, j, &u, sum); err != nil {
		return err
	}
	s.metrics.mergeDuration.WithLabelValues(StateSuccess).Observe(time.Since(start).Seconds())
	log.InfoContext(ctx, "upload verified", "sha256", sum, "size", u.Size, "elapsed", time.Since(start))
	return nil
}

// assemble completes the multipart upload and verifies the object. A
// non-empty reason is a permanent failure; an error is worth retrying.
func (s *Service) assemble(ctx context.Context, u *models.Upload) (reason, sum string, err error) {
	merged := false
	var listed []s3store.Part
	err = s3store.ErrNoSuchUpload // a POST upload has no multipart upload
	if !posted(u) {
		listed, err = s.store.ListParts(ctx, u.S3Key, u.S3UploadID)
	}
	switch {
	case errors.Is(err, s3store.ErrNoSuchUpload):
		// Completed by an earlier attempt that died before recording it,
		// or gone; the object tells which.
	case err != nil:
		return "", "", err
	default:
		parts, reason, err := s.partsToComplete(ctx, u, listed)
		if reason != "" || err != nil {
			return reason, "", err
		}
		_, err = s.store.CompleteMultipart(ctx, u.S3Key, u.S3UploadID, parts)
		switch {
		case err == nil:
			merged = true
		case errors.Is(err, s3store.ErrNoSuchUpload):
		case errors.Is(err, s3store.ErrInvalidParts):
			return "S3 refused the parts: " + describeStorageError(err), "", nil
		default:
			return "", "", err
		}
	}
	if !merged {
		info, err := s.store.Head(ctx, u.S3Key)
		if errors.Is(err, s3store.ErrNotFound) {
			return "the multipart upload vanished before it was merged", "", nil
		}
		if err != nil {
			return "", "", err
		}
		if info.Size != u.Size {
			return fmt.Sprintf("size mismatch: the object has %d bytes, the upload declared %d", info.Size, u.Size), "", nil
		}
		s.log.InfoContext(ctx, "multipart upload already completed by an earlier attempt; verifying", "upload_id", u.ID)
	}
	if h := s.cfg.Hooks.AfterComplete; h != nil {
		h(u.ID)
	}
	sum, n, err := s.verifyObject(ctx, u.S3Key, u.ID)
	if err != nil {
		return "", "", err
	}
	if n != u.Size {
		return fmt.Sprintf("size mismatch: the object has %d bytes, the upload declared %d", n, u.Size), "", nil
	}
	if u.SHA256 != nil && *u.SHA256 != sum {
		return fmt.Sprintf("sha256 mismatch: the upload declared %s, the content hashes to %s", *u.SHA256, sum), "", nil
	}
	return "", sum, nil
}

// partsToComplete picks the parts for CompleteMultipartUpload: exactly
// 1..PartCount with the ETags S3 reports, so strays never reach the file.
// Parts must still have the right sizes, and where the client named an
// ETag (at complete, or by reporting the part) it must be S3's: a part
// replaced after the client vouched for it fails the merge.
func (s *Service) partsToComplete(ctx context.Context, u *models.Upload, listed []s3store.Part) ([]s3store.CompletedPart, string, error) {
	if err := checkLayout(u, listed); err != nil {
		var ke *errkind.Error
		if errors.As(err, &ke) {
			return nil, fmt.Sprintf("parts changed after complete: missing %v, wrong size %v", ke.Fields["missing_parts"], ke.Fields["bad_parts"]), nil
		}
		return nil, "", err
	}
	want := map[int]string{}
	rows, err := s.partRows(ctx, u.ID)
	if err != nil {
		return nil, "", err
	}
	for _, r := range rows {
		want[r.Number] = normalizeETag(r.ETag)
	}
	if u.ClientETags != nil {
		var sent map[int]string
		if err := json.Unmarshal([]byte(*u.ClientETags), &sent); err != nil {
			return nil, "", fmt.Errorf("upload: client etags of %s: %w", u.ID, err)
		}
		for n, e := range sent {
			want[n] = e
		}
	}
	parts := make([]s3store.CompletedPart, 0, u.PartCount)
	for _, p := range s3Parts(listed, u.PartCount) {
		if e, ok := want[p.Number]; ok && e != normalizeETag(p.ETag) {
			return nil, fmt.Sprintf("part %d changed: the client reported ETag %s, S3 holds %s", p.Number, e, normalizeETag(p.ETag)), nil
		}
		parts = append(parts, s3store.CompletedPart{Number: int32(p.Number), ETag: p.ETag})
	}
	return parts, "", nil
}

// verifyObject streams the object through SHA-256 and returns the digest
// and the byte count. Memory is verifyBuffers chunks, whatever the size.
// The jobs runner heartbeats the lease meanwhile; if the lease is lost ctx
// ends and so does the read.
func (s *Service) verifyObject(ctx context.Context, key, uploadID string) (string, int64, error) {
	start := time.Now()
	body, err := s.store.Get(ctx, key)
	if err != nil {
		return "", 0, err
	}
	defer body.Close()

	free := make(chan []byte, verifyBuffers)
	for range verifyBuffers {
		free <- make([]byte, verifyChunk)
	}
	full := make(chan []byte, verifyBuffers)
	h := sha256.New()
	hashed := make(chan struct{})
	go func() {
		defer close(hashed)
		for b := range full {
			h.Write(b)
			free <- b[:cap(b)]
		}
	}()
	var n int64
	var rerr error
	for {
		buf := <-free
		k, err := io.ReadFull(body, buf)
		if k > 0 {
			full <- buf[:k]
			n += int64(k)
			if p := s.cfg.Hooks.VerifyProgress; p != nil {
				p(uploadID, n)
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			rerr = err
			break
		}
	}
	close(full)
	<-hashed
	s.metrics.verifyBytes.Add(float64(n))
	if rerr != nil {
		return "", n, fmt.Errorf("upload: verify %s after %d bytes: %w", key, n, rerr)
	}
	if secs := time.Since(start).Seconds(); secs > 0 && n > 0 {
		s.metrics.verifyThroughput.Observe(float64(n) / secs)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// succeed records a verified upload: the blob (or a reference to the one
// that already holds this content), the file, the upload's success and the
// upload.completed event, with the job's completion, in one transaction.
func (s *Service) succeed(ctx context.Context, j *jobs.Job, u *models.Upload, sum string) error {
	now := s.nowUTC()
	var f *models.File
	dup := false
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		blob, err := s.claimBlob(tx, u, sum, now)
		if err != nil {
			return err
		}
		if blob.S3Key != u.S3Key {
			// The content arrived twice at once; keep the first copy.
			dup = true
			if err := s.enqueuePurge(ctx, tx, u.S3Key, ""); err != nil {
				return err
			}
		}
		if f, err = s.createFile(ctx, tx, u, blob, now); err != nil {
			return err
		}
		res := tx.Model(&models.Upload{}).Where("id = ? AND state IN ?", u.ID, []string{StatePending, StateMerging}).
			Updates(map[string]any{"state": StateSuccess, "sha256": sum, "file_id": f.ID, "error": nil, "resume_key": nil, "updated_at": now, "finished_at": now})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			return fmt.Errorf("upload: %s left merging during verification", u.ID)
		}
		u.SHA256, u.FileID = &sum, &f.ID
		if err := s.emitCompleted(ctx, tx, u, f, now); err != nil {
			return err
		}
		return j.Finish(ctx, tx)
	})
	if err != nil {
		return err
	}
	if dup {
		s.queue.Wake(KindPurge)
	}
	s.metrics.transition(StateSuccess)
	return nil
}

// claimBlob takes a reference on the blob holding sum, or creates it from
// this upload's object. refs > 0 in the condition keeps a blob whose last
// file is being deleted from being revived.
func (s *Service) claimBlob(tx *gorm.DB, u *models.Upload, sum string, now time.Time) (*models.Blob, error) {
	res := tx.Model(&models.Blob{}).Where("sha256 = ? AND refs > 0", sum).
		Updates(map[string]any{"refs": gorm.Expr("refs + 1"), "updated_at": now})
	if res.Error != nil {
		return nil, res.Error
	}
	var b models.Blob
	if res.RowsAffected == 1 {
		if err := tx.Where("sha256 = ?", sum).Take(&b).Error; err != nil {
			return nil, err
		}
		return &b, nil
	}
	b = models.Blob{ID: models.NewID("blb"), SHA256: sum, Size: u.Size, S3Key: u.S3Key, Refs: 1, CreatedAt: now, UpdatedAt: now}
	if err := tx.Create(&b).Error; err != nil {
		return nil, err // a racing merge of the same content: the retry finds its blob
	}
	return &b, nil
}

func (s *Service) createFile(ctx context.Context, tx *gorm.DB, u *models.Upload, b *models.Blob, now time.Time) (*models.File, error) {
	f := models.File{
		ID: models.NewID("fil"), UserID: u.UserID, BlobID: b.ID, UploadID: u.ID, Name: u.FileName,
		ContentType: u.ContentType, Size: b.Size, SHA256: b.SHA256, CreatedAt: now,
	}
	if err := tx.WithContext(ctx).Create(&f).Error; err != nil {
		return nil, err
	}
	return &f, nil
}

// CompletedEvent is the data of an upload.completed event: a snapshot the
// receiver can check against storage.
type CompletedEvent struct {
	UploadID    string    `json:"upload_id"`
	FileID      string    `json:"file_id"`
	UserID      string    `json:"user_id"`
	Name        string    `json:"name"`
	Size        int64     `json:"size"`
	SHA256      string    `json:"sha256"`
	ContentType string    `json:"content_type"`
	Instant     bool      `json:"instant"`
	CreatedAt   time.Time `json:"created_at"`
}

// FailedEvent is the data of an upload.failed event.
type FailedEvent struct {
	UploadID string    `json:"upload_id"`
	UserID   string    `json:"user_id"`
	Name     string    `json:"name"`
	Size     int64     `json:"size"`
	SHA256   string    `json:"sha256,omitempty"` // as declared
	Error    string    `json:"error"`
	FailedAt time.Time `json:"failed_at"`
}

func (s *Service) emitCompleted(ctx context.Context, tx *gorm.DB, u *models.Upload, f *models.File, now time.Time) error {
	_, err := notify.Emit(ctx, tx, now, notify.Event{
		Type: notify.UploadCompleted, Subject: u.ID, UserID: u.UserID,
		Data: CompletedEvent{UploadID: u.ID, FileID: f.ID, UserID: u.UserID, Name: f.Name, Size: f.Size,
			SHA256: f.SHA256, ContentType: f.ContentType, Instant: u.Instant, CreatedAt: f.CreatedAt},
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
		ev := FailedEvent{UploadID: u.ID, UserID: u.UserID, Name: u.FileName, Size: u.Size, Error: reason, FailedAt: now}
		if u.SHA256 != nil {
			ev.SHA256 = *u.SHA256
		}
		if _, err := notify.Emit(ctx, tx, now, notify.Event{Type: notify.UploadFailed, Subject: u.ID, UserID: u.UserID, Data: ev}); err != nil {
			return err
		}
		if err := s.enqueuePurge(ctx, tx, u.S3Key, u.S3UploadID); err != nil {
			return err
		}
		if j == nil {
			return nil
		}
		return j.Finish(ctx, tx)
	})
	if err != nil {
		return err
	}
	s.queue.Wake(KindPurge)
	s.metrics.transition(StateFailed)
	return nil
}

// describeStorageError names what went wrong without leaking internal
// text into a reason shown to clients.
func describeStorageError(err error) string {
	for _, e := range []error{s3store.ErrInvalidParts, s3store.ErrUnavailable, s3store.ErrAccessDenied, s3store.ErrNotFound, s3store.ErrNoSuchUpload} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return "storage error"
}
