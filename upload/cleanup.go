package upload

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
)

// cleanupBatch bounds the rows one cleanup pass handles per step, so a
// backlog is worked off over several runs instead of in one huge query.
const cleanupBatch = 500

// CleanupReport counts what one cleanup pass did.
type CleanupReport struct {
	Expired       int // idle uploads expired and aborted in S3
	Orphans       int // multipart uploads aborted that no live upload owns
	Challenges    int // expired challenges purged
	StuckFailures int // merges failed because their job gave up
	StrayPosts    int // objects a POST policy wrote after its upload ended
	Pruned        int // ended uploads (aborted, expired, failed) deleted after the retention
	Tickets       int // expired tickets forgotten: unused, or their upload ended
}

// Cleanup expires idle uploads, aborts orphan multipart uploads, purges
// expired challenges and fails merges whose job gave up. Every step is
// idempotent and conditional, so replicas running it at once, or a pass
// cut short, do no harm.
func (s *Service) Cleanup(ctx context.Context) (CleanupReport, error) {
	var rep CleanupReport
	var errs []error
	var err error
	if rep.Expired, err = s.expireIdle(ctx); err != nil {
		errs = append(errs, err)
	}
	if rep.Orphans, err = s.abortOrphans(ctx); err != nil {
		errs = append(errs, err)
	}
	res := s.db.WithContext(ctx).Where("expires_at < ?", s.nowUTC()).Delete(&models.UploadChallenge{})
	if res.Error != nil {
		errs = append(errs, res.Error)
	}
	rep.Challenges = int(res.RowsAffected)
	if rep.StuckFailures, err = s.failStuck(ctx); err != nil {
		errs = append(errs, err)
	}
	if rep.StrayPosts, err = s.deleteStrayPosts(ctx); err != nil {
		errs = append(errs, err)
	}
	if rep.Pruned, err = s.pruneEnded(ctx); err != nil {
		errs = append(errs, err)
	}
	if rep.Tickets, err = s.forgetTickets(ctx); err != nil {
		errs = append(errs, err)
	}
	if rep != (CleanupReport{}) {
		s.log.InfoContext(ctx, "upload cleanup", "expired", rep.Expired, "orphans_aborted", rep.Orphans,
			"challenges_purged", rep.Challenges, "stuck_merges_failed", rep.StuckFailures, "stray_posts_deleted", rep.StrayPosts,
			"ended_uploads_pruned", rep.Pruned, "tickets_forgotten", rep.Tickets)
	}
	return rep, errors.Join(errs...)
}

func (s *Service) expireIdle(ctx context.Context) (int, error) {
	var rows []models.Upload
	err := s.db.WithContext(ctx).Where("state = ? AND expires_at <= ?", StateUploading, s.nowUTC()).
		Order("expires_at").Limit(cleanupBatch).Find(&rows).Error
	if err != nil {
		return 0, fmt.Errorf("upload: cleanup: %w", err)
	}
	for i := range rows {
		if err := s.expire(ctx, &rows[i]); err != nil {
			return i, err
		}
	}
	return len(rows), nil
}

// live states still need their multipart upload or posted object.
var (
	liveStateList = []string{StateUploading, StatePending, StateMerging}
	liveStates    = map[string]bool{StateUploading: true, StatePending: true, StateMerging: true}
)

// abortOrphans aborts multipart uploads under uploads/ that no live upload
// owns: those whose row ended (an abort that failed after the row changed)
// at once, and those with no row at all (a crash between
// CreateMultipartUpload and the insert) once they are older than the TTL,
// so an Init in flight is never hit.
func (s *Service) abortOrphans(ctx context.Context) (int, error) {
	ups, err := s.store.ListMultipartUploads(ctx, keyPrefix)
	if err != nil {
		return 0, storageError("list multipart uploads", err)
	}
	n := 0
	for start := 0; start < len(ups); start += cleanupBatch {
		batch := ups[start:min(start+cleanupBatch, len(ups))]
		ids := make([]string, 0, len(batch))
		for _, mu := range batch {
			ids = append(ids, strings.TrimPrefix(mu.Key, keyPrefix))
		}
		var rows []models.Upload
		if err := s.db.WithContext(ctx).Select("id, state, s3_upload_id").Where("id IN ?", ids).Find(&rows).Error; err != nil {
			return n, fmt.Errorf("upload: cleanup: %w", err)
		}
		known := make(map[string]models.Upload, len(rows))
		for _, r := range rows {
			known[r.ID] = r
		}
		for _, mu := range batch {
			row, ok := known[strings.TrimPrefix(mu.Key, keyPrefix)]
			switch {
			case ok && row.S3UploadID == mu.UploadID && liveStates[row.State]:
				continue
			case !ok || row.S3UploadID != mu.UploadID:
				if s.now().Sub(mu.Initiated) < s.cfg.TTL {
					continue
				}
			}
			if err := s.store.AbortMultipart(ctx, mu.Key, mu.UploadID); err != nil {
				return n, storageError("abort orphan", err)
			}
			s.log.InfoContext(ctx, "orphan multipart upload aborted", "key", mu.Key, "initiated", mu.Initiated, "row_state", row.State)
			n++
		}
	}
	return n, nil
}

// deleteStrayPosts deletes objects under postPrefix whose upload is no
// longer live. A POST policy stays valid until it expires, whatever
// happens to its upload, so its holder can write the posted key after the
// upload was adopted (the merge copied the object away), aborted or
// expired; nothing reads those bytes, and this deletes them. Objects of
// live uploads (still waiting for their POST, or being merged) are left
// alone. Each pass handles at most cleanupBatch objects.
func (s *Service) deleteStrayPosts(ctx context.Context) (int, error) {
	objs, err := s.store.ListObjects(ctx, postPrefix, cleanupBatch)
	if err != nil {
		return 0, storageError("list posted objects", err)
	}
	if len(objs) == 0 {
		return 0, nil
	}
	ids := make([]string, len(objs))
	for i, o := range objs {
		ids[i] = strings.TrimPrefix(o.Key, postPrefix)
	}
	var live []string
	if err := s.db.WithContext(ctx).Model(&models.Upload{}).Where("id IN ? AND state IN ?", ids, liveStateList).
		Pluck("id", &live).Error; err != nil {
		return 0, fmt.Errorf("upload: cleanup: %w", err)
	}
	keep := make(map[string]bool, len(live))
	for _, id := range live {
		keep[id] = true
	}
	var keys []string
	var sizes []int64
	for i, o := range objs {
		if !keep[ids[i]] {
			keys = append(keys, o.Key)
			sizes = append(sizes, o.Size)
		}
	}
	// One DeleteObjects call for the pass: a policy's holder may post
	// after its upload ended as often as it likes.
	n, err := s.store.DeleteKeys(ctx, keys)
	s.metrics.cleanedPosts.Add(float64(n))
	if err != nil {
		return n, storageError("delete stray posts", err)
	}
	for i, k := range keys {
		s.log.InfoContext(ctx, "stray posted object deleted", "key", k, "size", sizes[i])
	}
	return n, nil
}

// pruneEnded deletes uploads that ended without a file (aborted, expired,
// failed) longer than the retention ago, with their part reports and
// Companion mappings: their objects went when they ended, and their rows
// only answer "this upload is gone" by then. Successful uploads stay: each
// is the provenance of a file, and goes with it.
func (s *Service) pruneEnded(ctx context.Context) (int, error) {
	cutoff := models.Time(s.now().Add(-s.cfg.Retention))
	var ids []string
	err := s.db.WithContext(ctx).Model(&models.Upload{}).
		Where("state IN ? AND finished_at < ?", []string{StateAborted, StateExpired, StateFailed}, cutoff).
		Order("id").Limit(cleanupBatch).Pluck("id", &ids).Error
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	var n int64
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Where("upload_id IN ?", ids).Delete(&models.UploadPart{}).Error; err != nil {
			return err
		}
		if err := tx.Where("upload_id IN ?", ids).Delete(&models.CompanionUpload{}).Error; err != nil {
			return err
		}
		res := tx.Where("id IN ?", ids).Delete(&models.Upload{})
		n = res.RowsAffected
		return res.Error
	})
	if err != nil {
		return 0, fmt.Errorf("upload: prune ended uploads: %w", err)
	}
	return int(n), nil
}

// forgetTickets deletes expired tickets that can do nothing any more:
// unused ones, and those whose upload has ended. A ticket whose upload is
// still under way keeps working for it, whatever its expiry.
func (s *Service) forgetTickets(ctx context.Context) (int, error) {
	var ids []string
	err := s.db.WithContext(ctx).Model(&models.UploadTicket{}).Where("expires_at < ?", s.nowUTC()).
		Where("upload_id IS NULL OR upload_id NOT IN (?)", s.db.Model(&models.Upload{}).Select("id").Where("state IN ?", liveStateList)).
		Limit(cleanupBatch).Pluck("id", &ids).Error
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	res := s.db.WithContext(ctx).Where("id IN ?", ids).Delete(&models.UploadTicket{})
	if res.Error != nil {
		return 0, fmt.Errorf("upload: cleanup: %w", res.Error)
	}
	return int(res.RowsAffected), nil
}

// failStuck fails uploads left pending or merging by a merge job that the
// runner gave up on without the handler recording it (its worker died on
// the last attempt).
func (s *Service) failStuck(ctx context.Context) (int, error) {
	var rows []models.Upload
	err := s.db.WithContext(ctx).
		Where("state IN ? AND id IN (?)", []string{StatePending, StateMerging},
			s.db.Model(&models.Job{}).Select("business_key").Where("kind = ? AND state = ?", KindMerge, jobs.StateFailed)).
		Limit(cleanupBatch).Find(&rows).Error
	if err != nil {
		return 0, fmt.Errorf("upload: cleanup: %w", err)
	}
	for i := range rows {
		if err := s.fail(ctx, nil, &rows[i], "the merge was abandoned after its last attempt"); err != nil {
			return i, err
		}
	}
	return len(rows), nil
}

type purgePayload struct {
	S3UploadID string `json:"s3_upload_id,omitempty"`
}

// enqueuePurge schedules the deletion of an object (and the abort of its
// multipart upload, if given) inside tx, so it happens if and only if the
// state change that made the object garbage commits.
func (s *Service) enqueuePurge(ctx context.Context, tx *gorm.DB, key, s3UploadID string) error {
	return enqueuePurge(ctx, tx, s.queue, key, s3UploadID)
}

func enqueuePurge(ctx context.Context, tx *gorm.DB, q *jobs.Queue, key, s3UploadID string) error {
	_, err := q.Enqueue(ctx, tx, jobs.Spec{Kind: KindPurge, Key: key, Payload: purgePayload{S3UploadID: s3UploadID}})
	return err
}

// purge deletes an object no blob references any more.
func (s *Service) purge(ctx context.Context, j *jobs.Job) error {
	var p purgePayload
	if err := j.Decode(&p); err != nil {
		return jobs.Permanent(err)
	}
	var refs int64
	if err := s.db.WithContext(ctx).Model(&models.Blob{}).Where("s3_key = ?", j.Key).Count(&refs).Error; err != nil {
		return err
	}
	if refs > 0 {
		s.log.WarnContext(ctx, "purge skipped: a blob uses the object", "key", j.Key)
		return nil
	}
	if p.S3UploadID != "" {
		if err := s.store.AbortMultipart(ctx, j.Key, p.S3UploadID); err != nil {
			return err
		}
	}
	if err := s.store.Delete(ctx, j.Key); err != nil {
		return err
	}
	s.log.InfoContext(ctx, "object purged", "key", j.Key)
	return nil
}
