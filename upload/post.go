package upload

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

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

// PostUpload is an upload that a browser sends in one form POST straight to
// S3 (Companion's /s3/params), with the signed policy to send it with.
type PostUpload struct {
	Multipart
	Policy s3store.PostPolicy
}

// InitPost starts an upload of one object sent with a browser form POST
// straight to S3. The policy pins the key, the content type and fields,
// and bounds the size by the maximum upload size. S3 tells ferry nothing
// when the POST lands, so the upload is adopted by a job that runs once no
// POST can land any more (the policy's expiry, plus a grace), or earlier
// when its owner asks for its status: the object, if there, then goes
// through the same merge job as any upload — verified, a file, an
// upload.completed event — and an upload whose object never came expires.
func (s *Service) InitPost(ctx context.Context, userID string, r OpenRequest, fields map[string]string) (PostUpload, error) {
	name, ct, err := validateOpen(r)
	if err != nil {
		return PostUpload{}, err
	}
	id := models.NewID("upl")
	key := keyPrefix + id
	pol, err := s.store.PresignPost(ctx, key, s3store.PostOptions{ContentType: ct, MinSize: 1, MaxSize: s.cfg.MaxSize, Fields: fields}, s.cfg.PresignTTL)
	if err != nil {
		return PostUpload{}, storageError("sign POST policy", err)
	}
	now := s.nowUTC()
	u := models.Upload{
		ID: id, UserID: userID, FileName: name, ContentType: ct, S3Key: key, State: StateUploading,
		CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(s.cfg.TTL),
	}
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&u).Error; err != nil {
			return err
		}
		_, err := s.queue.Enqueue(ctx, tx, jobs.Spec{Kind: KindAdopt, Key: id, RunAt: pol.ExpiresAt.Add(adoptGrace)})
		return err
	})
	if err != nil {
		return PostUpload{}, fmt.Errorf("upload: insert: %w", err)
	}
	s.metrics.transition(StateUploading)
	s.log.InfoContext(ctx, "upload created", "upload_id", id, "user_id", userID, "size", "unknown", "api", "s3-post")
	return PostUpload{Multipart: s.multipartOf(&u), Policy: pol}, nil
}

// posted reports whether u is a POST-policy upload (it has no multipart
// upload).
func posted(u *models.Upload) bool { return u.S3UploadID == "" }

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
	if info.Size <= 0 || info.Size > s.cfg.MaxSize {
		return true, s.failPosted(ctx, u, fmt.Sprintf("the posted object has %d bytes", info.Size))
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
