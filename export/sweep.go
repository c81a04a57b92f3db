package export

import (
	"context"
	"fmt"

	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
)

// sweepBatch bounds each step of one sweep; the next sweep takes the
// rest. Expiry, only a state change, runs up to expireRounds batches.
const (
	sweepBatch   = 100
	expireRounds = 50
)

// Sweep is the periodic jobs handler: it runs SweepNow.
func (s *Service) Sweep(ctx context.Context, _ *jobs.Job) error { return s.SweepNow(ctx) }

// SweepNow does one round of housekeeping:
//   - done exports past their retention are recorded as expired (reads
//     and downloads treat them so from expires_at on, whether or not the
//     sweep ran) and their objects are deleted;
//   - revoked and expired exports whose objects were not yet deleted, and
//     failed ones past the retention period, are purged;
//   - exports whose job failed without the export being marked (the
//     worker died on its last attempt) are failed, with their outbox row.
func (s *Service) SweepNow(ctx context.Context) error {
	now := s.now()
	// Reads and downloads treat an export as expired from its expires_at
	// on (Service.state); this records it, every due export in one sweep
	// (within a bound), since recording is cheap and purging follows it.
	for round := 0; round < expireRounds; round++ {
		var due []string
		if err := s.db.WithContext(ctx).Model(&models.Export{}).Where("state = ? AND expires_at <= ?", StateDone, now).
			Order("expires_at").Limit(sweepBatch).Pluck("id", &due).Error; err != nil {
			return fmt.Errorf("export: sweep: %w", err)
		}
		for _, id := range due {
			res := s.db.WithContext(ctx).Model(&models.Export{}).Where("id = ? AND state = ?", id, StateDone).
				Updates(map[string]any{"state": StateExpired, "updated_at": now})
			if res.Error != nil {
				return fmt.Errorf("export: expire %s: %w", id, res.Error)
			}
			if res.RowsAffected == 1 {
				s.metrics.finished.WithLabelValues(StateExpired).Inc()
				s.log.InfoContext(ctx, "export expired", "export_id", id)
			}
		}
		if len(due) < sweepBatch {
			break
		}
	}

	var leftovers []string
	if err := s.db.WithContext(ctx).Model(&models.Export{}).
		Where("purged_at IS NULL AND (state IN ? OR (state = ? AND finished_at <= ?))",
			[]string{StateRevoked, StateExpired}, StateFailed, now.Add(-s.opts.Retention)).
		Limit(sweepBatch).Pluck("id", &leftovers).Error; err != nil {
		return fmt.Errorf("export: sweep: %w", err)
	}
	for _, id := range leftovers {
		s.purge(ctx, id)
	}

	var stuck []models.Export
	if err := s.db.WithContext(ctx).Model(&models.Export{}).
		Joins("JOIN jobs ON jobs.kind = ? AND jobs.business_key = exports.id", JobKind).
		Where("exports.state IN ? AND jobs.state = ?", []string{StateQueued, StateRunning}, jobs.StateFailed).
		Limit(sweepBatch).Find(&stuck).Error; err != nil {
		return fmt.Errorf("export: sweep: %w", err)
	}
	for _, e := range stuck {
		if err := s.fail(ctx, nil, e, "the export could not be completed; the operators have the details"); err != nil {
			return err
		}
	}
	return nil
}
