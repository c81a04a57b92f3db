package export

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
)

// EraseKind is the job that deletes an erased export's objects: its
// shards and artifact under exports/<id>/, and any multipart upload left
// there. Its business key is the export id.
const EraseKind = "export.erase"

// errExportRunning: the export's own job still holds its lease, so it may
// still write shards; the erase job waits for it to end.
var errExportRunning = errors.New("export: the erased export's job is still running")

// EraseUser removes every export of userID's inside tx: the export rows,
// their permission snapshots and shard plans, and their queued export
// jobs; each export's objects (artifact and shards, copies of the user's
// data) get an EraseKind job in tx, so they go from S3 if and only if the
// erasure commits, retried until S3 answers. It returns how many exports
// it removed. It needs no Service, so `ferry user delete` runs it
// without a store; the EraseKind jobs run on any replica. The caller
// wakes EraseKind after its commit.
func EraseUser(ctx context.Context, tx *gorm.DB, q *jobs.Queue, userID string) (int, error) {
	tx = tx.WithContext(ctx)
	var ids []string
	if err := tx.Model(&models.Export{}).Where("user_id = ?", userID).Pluck("id", &ids).Error; err != nil {
		return 0, fmt.Errorf("export: erase user %s: %w", userID, err)
	}
	for _, id := range ids {
		for _, m := range []any{&models.ExportPermission{}, &models.ExportShard{}} {
			if err := tx.Where("export_id = ?", id).Delete(m).Error; err != nil {
				return 0, fmt.Errorf("export: erase %s: %w", id, err)
			}
		}
		// A queued export job would only fail on the missing row; a
		// running one is waited for by the erase job.
		if err := tx.Where("kind = ? AND business_key = ? AND state = ?", JobKind, id, jobs.StateQueued).Delete(&models.Job{}).Error; err != nil {
			return 0, fmt.Errorf("export: erase %s: %w", id, err)
		}
		if err := tx.Where("id = ?", id).Delete(&models.Export{}).Error; err != nil {
			return 0, fmt.Errorf("export: erase %s: %w", id, err)
		}
		if _, err := q.Enqueue(ctx, tx, jobs.Spec{Kind: EraseKind, Key: id}); err != nil {
			return 0, fmt.Errorf("export: erase %s: %w", id, err)
		}
	}
	return len(ids), nil
}

// erase is the EraseKind handler. Every step is idempotent: deleting what
// is already gone, or aborting an upload already aborted, succeeds, so a
// crashed run is simply run again.
func (s *Service) erase(ctx context.Context, j *jobs.Job) error {
	var running int64
	if err := s.db.WithContext(ctx).Model(&models.Job{}).
		Where("kind = ? AND business_key = ? AND state = ?", JobKind, j.Key, jobs.StateRunning).Count(&running).Error; err != nil {
		return err
	}
	if running > 0 {
		return jobs.RetryAfter(errExportRunning, 5*time.Second)
	}
	if _, err := s.store.DeletePrefix(ctx, prefix(j.Key)); err != nil {
		return err
	}
	ups, err := s.store.ListMultipartUploads(ctx, prefix(j.Key))
	if err != nil {
		return err
	}
	for _, u := range ups {
		if err := s.store.AbortMultipart(ctx, u.Key, u.UploadID); err != nil {
			return err
		}
	}
	s.log.InfoContext(ctx, "erased export objects deleted", "export_id", j.Key)
	return nil
}
