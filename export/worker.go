package export

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/chat"
	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/notify"
)

// NondeterministicError means a shard regenerated to bytes other than the
// ones recorded for it. The export fails for good: a rerun could not be
// byte-identical.
type NondeterministicError struct {
	Shard          int
	Recorded, Got  string // SHA-256 hex
	RecordedMsgs   int
	GotMsgs        int
	messagesDiffer bool
}

func (e *NondeterministicError) Error() string {
	if e.messagesDiffer {
		return fmt.Sprintf("shard %d regenerated with %d messages, the plan recorded %d: the snapshot changed under the export", e.Shard, e.GotMsgs, e.RecordedMsgs)
	}
	return fmt.Sprintf("shard %d regenerated to different bytes (sha256 %s, recorded %s): the export is not deterministic", e.Shard, e.Got, e.Recorded)
}

// Run is the jobs handler for one export. It is idempotent: every step
// either finds its result already recorded and verified, or redoes it.
func (s *Service) Run(ctx context.Context, j *jobs.Job) error {
	start := time.Now()
	e, err := s.load(ctx, s.db, j.Key)
	if errors.Is(err, ErrNotFound) {
		return jobs.Permanent(err)
	}
	if err != nil {
		return err
	}
	switch e.State {
	case StateDone, StateFailed, StateExpired:
		return nil
	case StateRevoked:
		// Revoked while queued or mid-run: whatever an earlier run left in
		// the bucket goes.
		s.purge(ctx, e.ID)
		return nil
	}
	now := s.now()
	res := s.db.WithContext(ctx).Model(&models.Export{}).
		Where("id = ? AND state IN ?", e.ID, []string{StateQueued, StateRunning}).
		Updates(map[string]any{"state": StateRunning, "runs": gorm.Expr("runs + 1"), "started_at": gorm.Expr("COALESCE(started_at, ?)", now), "updated_at": now})
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected == 0 {
		return nil // revoked just now; the next sweep cleans up
	}
	if e.StartedAt == nil {
		e.StartedAt = &now // as the COALESCE above just stored it, for the events
	}
	if e.Runs > 0 {
		s.metrics.reruns.Inc()
	}
	log := s.log.With("export_id", e.ID, "run", e.Runs+1, "attempt", j.Attempt)
	st := &runStats{}
	err = s.run(ctx, j, e, st, log)
	s.metrics.runDuration.Observe(time.Since(start).Seconds())
	s.metrics.runShards.WithLabelValues(shardWritten).Observe(float64(st.written))
	s.metrics.runShards.WithLabelValues(shardRewritten).Observe(float64(st.rewritten))
	s.metrics.runShards.WithLabelValues(shardSkipped).Observe(float64(st.skipped))
	log.InfoContext(ctx, "export run ended", "shards_written", st.written, "shards_rewritten", st.rewritten,
		"shards_skipped", st.skipped, "elapsed", time.Since(start), "err", err)
	if err == nil || errors.Is(err, jobs.ErrLeaseLost) || ctx.Err() != nil {
		return err
	}
	if errors.Is(err, errkind.Unavailable) {
		return err // an outage: the runner waits it out without using up an attempt
	}
	var nd *NondeterministicError
	if errors.As(err, &nd) || j.Attempt >= j.MaxAttempts {
		reason := "the export could not be completed; the operators have the details"
		if nd != nil {
			reason = nd.Error()
		}
		if ferr := s.fail(ctx, j, e, reason); ferr != nil {
			return ferr
		}
		return jobs.Permanent(err)
	}
	return err
}

type runStats struct{ written, rewritten, skipped int }

func (s *Service) run(ctx context.Context, j *jobs.Job, e models.Export, st *runStats, log *slog.Logger) error {
	count, err := s.plan(ctx, j, e)
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	b, err := s.build(ctx, e, count, st, log)
	if err != nil {
		return err
	}
	return s.finish(ctx, j, e, b)
}

// plan persists the shard plan unless an earlier run did, and returns the
// shard count. Each transaction checks the job's fence, so a stale worker
// cannot write a plan beside the current one.
func (s *Service) plan(ctx context.Context, j *jobs.Job, e models.Export) (int, error) {
	if e.ShardCount != nil {
		return *e.ShardCount, nil
	}
	convs, err := s.conversations(ctx, e.ID)
	if err != nil {
		return 0, err
	}
	// Rows of a plan an earlier run did not finish writing.
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := j.Check(ctx, tx); err != nil {
			return err
		}
		return tx.Where("export_id = ?", e.ID).Delete(&models.ExportShard{}).Error
	})
	if err != nil {
		return 0, err
	}
	start := time.Now()
	n, total := 0, int64(0)
	for _, conv := range convs {
		// One conversation's plan at a time: memory grows with the
		// largest conversation's shard count, not the export's size.
		var shards []models.ExportShard
		cur := models.ExportShard{ExportID: e.ID, ConversationID: conv}
		err := chat.VisibleSeqs(ctx, s.db, chat.Range{Conversation: conv, Reader: snapshotReader(e.ID), AsOf: e.SnapshotGseq}, func(seq int64) error {
			if cur.Messages == 0 {
				cur.FirstSeq = seq
			}
			cur.LastSeq = seq
			cur.Messages++
			if cur.Messages == s.opts.ShardSize {
				cur.N = n
				shards = append(shards, cur)
				n++
				cur = models.ExportShard{ExportID: e.ID, ConversationID: conv}
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
		if cur.Messages > 0 {
			cur.N = n
			shards = append(shards, cur)
			n++
		}
		for _, sh := range shards {
			total += int64(sh.Messages)
		}
		if len(shards) == 0 {
			continue
		}
		err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if err := j.Check(ctx, tx); err != nil {
				return err
			}
			return tx.CreateInBatches(shards, 500).Error
		})
		if err != nil {
			return 0, err
		}
	}
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := j.Check(ctx, tx); err != nil {
			return err
		}
		return tx.Model(&models.Export{}).Where("id = ? AND shard_count IS NULL", e.ID).
			Updates(map[string]any{"shard_count": n, "message_count": total, "updated_at": s.now()}).Error
	})
	if err != nil {
		return 0, err
	}
	s.log.InfoContext(ctx, "export planned", "export_id", e.ID, "shards", n, "messages", total, "conversations", len(convs), "elapsed", time.Since(start))
	return n, nil
}

// snapshotReader reads messages through export id's permission snapshot.
func snapshotReader(id string) chat.Reader {
	return chat.StoredIntervals("export_permissions", "export_id", id)
}

// conversations lists the conversations in export id's permission
// snapshot, in id order: the order of the artifact.
func (s *Service) conversations(ctx context.Context, id string) ([]string, error) {
	var convs []string
	err := s.db.WithContext(ctx).Model(&models.ExportPermission{}).Where("export_id = ?", id).
		Distinct("conversation_id").Order("conversation_id").Pluck("conversation_id", &convs).Error
	return convs, err
}

// eachShard calls fn for every shard of the plan in order, reading the
// plan a page at a time.
func (s *Service) eachShard(ctx context.Context, id string, fn func(models.ExportShard) error) error {
	const page = 500
	for next := 0; ; {
		var shards []models.ExportShard
		if err := s.db.WithContext(ctx).Where("export_id = ? AND n >= ?", id, next).Order("n").Limit(page).Find(&shards).Error; err != nil {
			return err
		}
		for _, sh := range shards {
			if err := fn(sh); err != nil {
				return err
			}
		}
		if len(shards) < page {
			return nil
		}
		next = shards[len(shards)-1].N + 1
	}
}

// sentAtLayout is fixed-width, UTC, microseconds: the stored precision.
const sentAtLayout = "2006-01-02T15:04:05.000000Z"

// completedData is the export.completed event's data, with the times the
// export was requested, started, finished and stops being downloadable.
type completedData struct {
	ExportID     string     `json:"export_id"`
	UserID       string     `json:"user_id"`
	Scope        string     `json:"scope"`
	SnapshotGseq int64      `json:"snapshot_gseq"`
	SHA256       string     `json:"sha256"`
	Bytes        int64      `json:"bytes"`
	CreatedAt    time.Time  `json:"created_at"`
	StartedAt    *time.Time `json:"started_at,omitempty"`
	FinishedAt   time.Time  `json:"finished_at"`
	ExpiresAt    time.Time  `json:"expires_at"`
}

// finish records the artifact, the done state and the outbox row, and
// finishes the job, in one fenced transaction.
func (s *Service) finish(ctx context.Context, j *jobs.Job, e models.Export, b built) error {
	now, sum, size := s.now(), b.sha256, b.size
	revoked := false
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Model(&models.Export{}).Where("id = ? AND state = ?", e.ID, StateRunning).Updates(map[string]any{
			"state": StateDone, "artifact_key": artifactKey(e.ID), "sha256": sum, "crc32c": b.crc32c, "bytes": size, "error": nil,
			"finished_at": now, "expires_at": now.Add(s.opts.Retention), "updated_at": now,
		})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			revoked = true // revoked while running
			return j.Finish(ctx, tx)
		}
		_, err := notify.Emit(ctx, tx, now, notify.Event{Type: notify.ExportCompleted, Subject: e.ID, UserID: e.UserID, Data: completedData{
			ExportID: e.ID, UserID: e.UserID, Scope: e.Scope, SnapshotGseq: e.SnapshotGseq, SHA256: sum, Bytes: size,
			CreatedAt: e.CreatedAt, StartedAt: e.StartedAt, FinishedAt: now, ExpiresAt: now.Add(s.opts.Retention),
		}})
		if err != nil {
			return err
		}
		return j.Finish(ctx, tx)
	})
	if err != nil {
		return err
	}
	if revoked {
		s.purge(ctx, e.ID)
		return nil
	}
	s.queue.Wake(notify.WakeDispatch)
	s.metrics.finished.WithLabelValues(StateDone).Inc()
	s.metrics.duration.Observe(now.Sub(e.CreatedAt).Seconds())
	s.log.InfoContext(ctx, "export done", "export_id", e.ID, "sha256", sum, "bytes", size)
	if s.opts.DeleteShards {
		if _, err := s.store.DeletePrefix(ctx, shardPrefix(e.ID)); err != nil {
			// The retention sweep deletes the whole prefix later anyway.
			s.log.WarnContext(ctx, "export shards not deleted", "export_id", e.ID, "err", err)
		}
	}
	return nil
}

// failedData is the export.failed event's data, with the times the export
// was requested, started (absent if it never ran) and failed.
type failedData struct {
	ExportID  string     `json:"export_id"`
	UserID    string     `json:"user_id"`
	Scope     string     `json:"scope"`
	Error     string     `json:"error"`
	CreatedAt time.Time  `json:"created_at"`
	StartedAt *time.Time `json:"started_at,omitempty"`
	FailedAt  time.Time  `json:"failed_at"`
}

// fail records the failed state and the outbox row in one transaction,
// fenced on the job (j nil: no job to check, as in the sweep).
func (s *Service) fail(ctx context.Context, j *jobs.Job, e models.Export, reason string) error {
	now := s.now()
	failed := false
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if j != nil {
			if err := j.Check(ctx, tx); err != nil {
				return err
			}
		}
		res := tx.Model(&models.Export{}).Where("id = ? AND state IN ?", e.ID, []string{StateQueued, StateRunning}).
			Updates(map[string]any{"state": StateFailed, "error": reason, "finished_at": now, "updated_at": now})
		if res.Error != nil || res.RowsAffected == 0 {
			return res.Error
		}
		failed = true
		_, err := notify.Emit(ctx, tx, now, notify.Event{Type: notify.ExportFailed, Subject: e.ID, UserID: e.UserID,
			Data: failedData{ExportID: e.ID, UserID: e.UserID, Scope: e.Scope, Error: reason,
				CreatedAt: e.CreatedAt, StartedAt: e.StartedAt, FailedAt: now}})
		return err
	})
	if err == nil && failed {
		s.queue.Wake(notify.WakeDispatch)
		s.metrics.finished.WithLabelValues(StateFailed).Inc()
		s.log.ErrorContext(ctx, "export failed", "export_id", e.ID, "reason", reason)
	}
	return err
}

// purge deletes everything an export has in the bucket and notes when.
// Errors are logged: the sweep retries exports whose purge did not finish.
func (s *Service) purge(ctx context.Context, id string) {
	if _, err := s.store.DeletePrefix(ctx, prefix(id)); err != nil {
		s.log.WarnContext(ctx, "export objects not deleted", "export_id", id, "err", err)
		return
	}
	ups, err := s.store.ListMultipartUploads(ctx, prefix(id))
	if err == nil {
		for _, u := range ups {
			s.store.AbortMultipart(ctx, u.Key, u.UploadID)
		}
	}
	s.db.WithContext(ctx).Model(&models.Export{}).Where("id = ? AND state IN ?", id, []string{StateRevoked, StateExpired, StateFailed}).
		Update("purged_at", s.now())
}
