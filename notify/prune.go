package notify

import (
	"context"
	"fmt"
	"time"

	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
)

// KindPrune is the periodic job that deletes webhook history past
// Config.Retention.
const KindPrune = "webhook.prune"

// DefaultRetention is how long finished deliveries, their attempts and
// their outbox events are kept.
const DefaultRetention = 30 * 24 * time.Hour

// PruneReport counts what one pruning pass deleted.
type PruneReport struct {
	Deliveries, Attempts, Events int64
}

// Prune deletes the history of webhooks older than the retention: finished
// deliveries (delivered or failed) last changed before it, with their
// attempts, and outbox events dispatched before it that no delivery refers
// to any more. A pending delivery, and so its event (a redelivery needs the
// payload), is never pruned. Safe on many replicas: a second pass finds
// nothing.
func (s *Service) Prune(ctx context.Context) (PruneReport, error) {
	var rep PruneReport
	cutoff := models.Time(s.now().Add(-s.o.Retention))
	for range models.PruneBatches {
		var ids []string
		err := s.db.WithContext(ctx).Model(&models.WebhookDelivery{}).
			Where("state IN ? AND updated_at < ?", []string{StateDelivered, StateFailed}, cutoff).
			Order("id").Limit(models.PruneBatch).Pluck("id", &ids).Error
		if err != nil {
			return rep, fmt.Errorf("notify: prune deliveries: %w", err)
		}
		if len(ids) == 0 {
			break
		}
		res := s.db.WithContext(ctx).Where("delivery_id IN ?", ids).Delete(&models.WebhookAttempt{})
		if res.Error != nil {
			return rep, fmt.Errorf("notify: prune attempts: %w", res.Error)
		}
		rep.Attempts += res.RowsAffected
		res = s.db.WithContext(ctx).Where("id IN ?", ids).Delete(&models.WebhookDelivery{})
		if res.Error != nil {
			return rep, fmt.Errorf("notify: prune deliveries: %w", res.Error)
		}
		rep.Deliveries += res.RowsAffected
		if len(ids) < models.PruneBatch {
			break
		}
	}
	n, err := models.DeleteInBatches[string](ctx, s.db, &models.OutboxEvent{}, "id",
		"dispatched_at < ? AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = outbox.id)", cutoff)
	rep.Events = n
	if err != nil {
		return rep, fmt.Errorf("notify: prune outbox: %w", err)
	}
	if rep != (PruneReport{}) {
		s.log.InfoContext(ctx, "webhook history pruned", "deliveries", rep.Deliveries, "attempts", rep.Attempts,
			"events", rep.Events, "before", cutoff)
	}
	return rep, nil
}

// registerPrune adds the pruning job to r, hourly.
func (s *Service) registerPrune(r *jobs.Runner) {
	r.Handle(KindPrune, func(ctx context.Context, _ *jobs.Job) error {
		rep, err := s.Prune(ctx)
		r.CountPruned("webhook_deliveries", rep.Deliveries)
		r.CountPruned("webhook_attempts", rep.Attempts)
		r.CountPruned("outbox", rep.Events)
		return err
	}, jobs.Options{Every: time.Hour, MaxAttempts: 1})
}
