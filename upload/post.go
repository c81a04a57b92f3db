package upload

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/s3store"
)

// KindAdopt is the job that takes over an object a browser POSTed
// straight to S3 under a POST policy.
const KindAdopt = "upload.adopt"

// adoptGrace is how long after its policy expires a POST upload is adopted:
// a POST accepted just before expiry may still be writing.
const adoptGrace = time.Minute

// PostUpload is an upload that a browser sends in one request straight to
// S3 (Companion's /s3/params): a form POST with the signed policy, or, on
// a store without POST policies (Config.PutInsteadOfPost), a PUT to a
// presigned URL with the headers it pins. Method says which.
type PostUpload struct {
	Multipart
	Method string                   // http.MethodPost or http.MethodPut
	Policy s3store.PostPolicy       // for POST
	Put    s3store.PresignedRequest // for PUT
}

// InitPost starts an upload of one object sent with a browser form POST
// straight to S3 (or a PUT, see signPosted). S3 tells ferry nothing when
// the object lands, so the upload is adopted by a job that runs once
// nothing can land any more (the policy's or URL's expiry, plus a grace),
// or earlier when its owner asks for its status: the object, if there,
// then goes through the same merge job as any upload — copied to a key
// the policy cannot write, verified, a file, an upload.completed event —
// and an upload whose object never came expires. The policy stays valid
// after adoption, so whatever it writes later lands on the posted key,
// which nothing reads, and cleanup deletes it.
func (s *Service) InitPost(ctx context.Context, userID string, r OpenRequest, fields map[string]string) (PostUpload, error) {
	name, ct, err := validateOpen(r)
	if err != nil {
		return PostUpload{}, err
	}
	if err := s.checkOpenLimit(ctx, userID); err != nil {
		return PostUpload{}, err
	}
	if err := s.checkQuotaLeft(ctx, userID); err != nil {
		return PostUpload{}, err
	}
	id := models.NewID("upl")
	key := postPrefix + id
	// S3 takes at most 5 GiB in one POST, and the merge copies the object
	// in one CopyObject, which has the same limit; a ticket may bound it
	// further.
	maxSize := min(s.cfg.MaxSize, s3store.MaxCopySize)
	if r.Ticket != nil && r.Ticket.MaxSize > 0 {
		maxSize = min(maxSize, r.Ticket.MaxSize)
	}
	out, expires, err := s.signPosted(ctx, key, ct, fields, maxSize)
	if err != nil {
		return PostUpload{}, err
	}
	now := s.nowUTC()
	u := openRow(r, KindPost, id, userID, name, ct, key, "", now, now.Add(s.cfg.TTL))
	err = s.insertOpen(ctx, r, &u, func(tx *gorm.DB) error {
		_, err := s.queue.Enqueue(ctx, tx, jobs.Spec{Kind: KindAdopt, Key: id, RunAt: expires.Add(adoptGrace)})
		return err
	})
	if err != nil {
		if errkind.KindOf(err) != nil {
			return PostUpload{}, err
		}
		return PostUpload{}, fmt.Errorf("upload: insert: %w", err)
	}
	s.metrics.transition(StateUploading)
	s.log.InfoContext(ctx, "upload created", "upload_id", id, "user_id", userID, "size", "unknown", "api", "s3-post", "ticket_id", deref(u.TicketID))
	out.Multipart = s.multipartOf(&u)
	return out, nil
}

// signPosted signs what sends the file to key: a POST policy pinning the
// key, the content type and fields and bounding the size by maxSize; or, where the store has no POST policies, a
// PUT whose signature pins the key, the content type and the x-amz-meta-*
// fields. A PUT cannot bound the size: S3 takes at most 5 GiB in one, and
// adoption refuses an object over the maximum upload size.
func (s *Service) signPosted(ctx context.Context, key, ct string, fields map[string]string, maxSize int64) (PostUpload, time.Time, error) {
	if !s.cfg.PutInsteadOfPost {
		pol, err := s.store.PresignPost(ctx, key, s3store.PostOptions{ContentType: ct, MinSize: 1, MaxSize: maxSize, Fields: fields}, s.cfg.PresignTTL)
		if err != nil {
			return PostUpload{}, time.Time{}, storageError("sign POST policy", err)
		}
		return PostUpload{Method: http.MethodPost, Policy: pol}, pol.ExpiresAt, nil
	}
	meta := map[string]string{}
	for k, v := range fields {
		if name, ok := strings.CutPrefix(k, "x-amz-meta-"); ok {
			meta[name] = v
		}
	}
	put, err := s.store.PresignPut(ctx, key, s3store.PutOptions{ContentType: ct, Metadata: meta}, s.cfg.PresignTTL)
	if err != nil {
		return PostUpload{}, time.Time{}, storageError("sign PUT", err)
	}
	return PostUpload{Method: http.MethodPut, Put: put}, put.ExpiresAt, nil
}

// posted reports whether u is a POST-policy upload: one object, no
// multipart upload.
func posted(u *models.Upload) bool { return u.Kind == KindPost }

// adopt is the adoption job's handler.
func (s *Service) adopt(ctx context.Context, j *jobs.Job) error {
	var u models.Upload
	err := s.db.WithContext(ctx).Where("id = ?", j.Key).Take(&u).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	found, err := s.adoptPosted(ctx, &u)
	if err != nil || found || u.State != StateUploading {
		return err
	}
	return s.expire(ctx, &u) // nothing came before the policy expired
}

// adoptPosted moves a POST upload whose object has landed to pending and
// enqueues its merge. It reports whether the object was there.
func (s *Service) adoptPosted(ctx context.Context, u *models.Upload) (bool, error) {
	if !posted(u) || u.State != StateUploading {
		return false, nil
	}
	info, err := s.store.Head(ctx, u.S3Key)
	if errors.Is(err, s3store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, storageError("head object", err)
	}
	if info.Size <= 0 || info.Size > min(s.cfg.MaxSize, s3store.MaxCopySize) {
		return true, s.failPosted(ctx, u, fmt.Sprintf("the posted object has %d bytes", info.Size))
	}
	if err := s.checkLearntSize(ctx, u, info.Size); err != nil {
		if errkind.KindOf(err) == nil {
			return false, err
		}
		// Nobody waits on this request: the upload fails with the reason,
		// and upload.failed says it.
		var ke *errkind.Error
		reason := "refused"
		if errors.As(err, &ke) {
			reason = ke.Detail
		}
		return true, s.failPosted(ctx, u, reason)
	}
	_, err = s.recordCompleted(ctx, u, info.Size, info.Size, 1, nil)
	return true, err
}

// failPosted moves a POST upload straight to failed and deletes its object.
func (s *Service) failPosted(ctx context.Context, u *models.Upload, reason string) error {
	err := s.db.WithContext(ctx).Model(&models.Upload{}).Where("id = ? AND state = ?", u.ID, StateUploading).
		Update("state", StatePending).Error
	if err != nil {
		return err
	}
	u.State = StatePending
	return s.fail(ctx, nil, u, reason)
}
