package notify

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
)

// dispatchBatch is how many outbox events one pass takes.
const dispatchBatch = 100

// WakeDispatch is the name, for jobs.Queue.Wake, that wakes the local
// webhook dispatcher. Code that emitted an event calls
// queue.Wake(notify.WakeDispatch) after its commit, so the event is
// fanned out and delivered at once rather than at the next poll.
const WakeDispatch = "notify.dispatch"

// Kick asks the dispatcher to look at the outbox now instead of at its
// next poll; it never blocks.
func (s *Service) Kick() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// RunDispatcher fans new outbox events out into deliveries until ctx ends.
// Every replica runs one; they may race for the same events safely.
func (s *Service) RunDispatcher(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	woken := s.q.Woken(WakeDispatch)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
		case <-woken:
		}
		for range 100 { // drain a burst, but let ctx be checked now and then
			n, err := s.Dispatch(ctx)
			if err != nil && ctx.Err() == nil {
				s.log.ErrorContext(ctx, "webhook dispatch failed", "err", err)
			}
			if err != nil || n < dispatchBatch {
				break
			}
		}
		t.Reset(s.o.Poll)
	}
}

// Dispatch takes one batch of undispatched outbox events and creates one
// delivery per event and matching active subscription, each with its job.
// It reports how many events it looked at.
//
// Each event is claimed by a conditional UPDATE of its dispatched_at in
// the same transaction that creates its deliveries and jobs: of several
// replicas racing for one event, exactly one sees the UPDATE match, and if
// it crashes before committing, the event is still undispatched. The
// unique (event, subscription) key on deliveries backs this up.
func (s *Service) Dispatch(ctx context.Context) (int, error) {
	var evs []models.OutboxEvent
	if err := s.db.WithContext(ctx).Select("id, type, created_at").
		Where("dispatched_at IS NULL").Order("created_at, id").Limit(dispatchBatch).Find(&evs).Error; err != nil {
		return 0, fmt.Errorf("notify: read outbox: %w", err)
	}
	fanned := 0
	for _, ev := range evs {
		n, err := s.dispatchOne(ctx, ev)
		if err != nil {
			return len(evs), fmt.Errorf("notify: dispatch %s: %w", ev.ID, err)
		}
		fanned += n
	}
	if fanned > 0 {
		s.q.Wake(KindDeliver)
	}
	return len(evs), nil
}

func (s *Service) dispatchOne(ctx context.Context, ev models.OutboxEvent) (int, error) {
	created := 0
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		created = 0
		now := models.Time(s.now())
		res := tx.Model(&models.OutboxEvent{}).Where("id = ? AND dispatched_at IS NULL", ev.ID).Update("dispatched_at", now)
		if res.Error != nil || res.RowsAffected == 0 {
			return res.Error // another dispatcher has it
		}
		var subs []models.WebhookSubscription
		if err := tx.Select("id, events").Where("active = ?", true).Order("id").Find(&subs).Error; err != nil {
			return err
		}
		for _, sub := range subs {
			if !slices.Contains(strings.Split(sub.Events, ","), ev.Type) {
				continue
			}
			d := models.WebhookDelivery{
				ID: models.NewID("dlv"), SubscriptionID: sub.ID, EventID: ev.ID, EventType: ev.Type,
				State: StatePending, Round: 1, NextAttemptAt: &now, CreatedAt: now, UpdatedAt: now,
			}
			if err := tx.Create(&d).Error; err != nil {
				return err
			}
			if _, err := s.q.Enqueue(ctx, tx, jobs.Spec{Kind: KindDeliver, Key: jobKey(d.ID, 1)}); err != nil {
				return err
			}
			created++
		}
		return nil
	})
	return created, err
}

func jobKey(deliveryID string, round int) string {
	return deliveryID + "#" + strconv.Itoa(round)
}

func parseJobKey(key string) (string, int, error) {
	id, r, ok := strings.Cut(key, "#")
	round, err := strconv.Atoi(r)
	if !ok || err != nil || round < 1 {
		return "", 0, fmt.Errorf("notify: bad job key %q", key)
	}
	return id, round, nil
}
