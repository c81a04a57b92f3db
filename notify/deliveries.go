package notify

import (
	"context"
	"errors"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
)

// Delivery is one event on its way to one subscription, as the admin API
// shows it.
type Delivery struct {
	ID             string
	SubscriptionID string
	WebhookID      string // the webhook-id header: the event's id
	EventType      string
	State          string // pending, delivered, failed
	Round          int    // 1, plus one per redelivery
	LastStatus     int
	LastError      string
	NextAttemptAt  *time.Time
	CreatedAt      time.Time
	DeliveredAt    *time.Time
	Attempts       []Attempt // oldest first
}

// Attempt is one HTTP request of a delivery.
type Attempt struct {
	Round    int
	N        int // 1-based within the round
	At       time.Time
	Status   int // 0: no response
	Error    string
	Duration time.Duration
}

// MaxDeliveriesListed bounds one Deliveries page.
const MaxDeliveriesListed = 200

// Deliveries returns a subscription's most recent deliveries, newest
// first, with their attempts.
func (s *Service) Deliveries(ctx context.Context, subscriptionID string, limit int) ([]Delivery, error) {
	if limit < 0 || limit > MaxDeliveriesListed {
		return nil, errkind.Invalidf("invalid_limit", "limit must be from 1 to %d", MaxDeliveriesListed)
	}
	if limit == 0 {
		limit = 50
	}
	db := s.db.WithContext(ctx)
	if _, err := s.loadSubscription(db, subscriptionID); err != nil {
		return nil, err
	}
	var rows []models.WebhookDelivery
	if err := db.Where("subscription_id = ?", subscriptionID).Order("created_at DESC, id DESC").Limit(limit).Find(&rows).Error; err != nil {
		return nil, err
	}
	return s.withAttempts(db, rows)
}

// GetDelivery returns one delivery with its attempts.
func (s *Service) GetDelivery(ctx context.Context, id string) (Delivery, error) {
	db := s.db.WithContext(ctx)
	var row models.WebhookDelivery
	err := db.Where("id = ?", id).Take(&row).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Delivery{}, errNoDelivery
	}
	if err != nil {
		return Delivery{}, err
	}
	out, err := s.withAttempts(db, []models.WebhookDelivery{row})
	if err != nil {
		return Delivery{}, err
	}
	return out[0], nil
}

func (s *Service) withAttempts(db *gorm.DB, rows []models.WebhookDelivery) ([]Delivery, error) {
	out := make([]Delivery, len(rows))
	if len(rows) == 0 {
		return out, nil
	}
	ids := make([]string, len(rows))
	index := map[string]int{}
	for i, r := range rows {
		ids[i] = r.ID
		index[r.ID] = i
		out[i] = Delivery{
			ID: r.ID, SubscriptionID: r.SubscriptionID, WebhookID: r.EventID, EventType: r.EventType,
			State: r.State, Round: r.Round, LastError: deref(r.LastError), NextAttemptAt: r.NextAttemptAt,
			CreatedAt: r.CreatedAt, DeliveredAt: r.DeliveredAt, Attempts: []Attempt{},
		}
		if r.LastStatus != nil {
			out[i].LastStatus = *r.LastStatus
		}
	}
	var atts []models.WebhookAttempt
	if err := db.Where("delivery_id IN ?", ids).Order("id").Find(&atts).Error; err != nil {
		return nil, err
	}
	for _, a := range atts {
		d := &out[index[a.DeliveryID]]
		d.Attempts = append(d.Attempts, Attempt{
			Round: a.Round, N: a.Attempt, At: a.StartedAt, Status: a.Status, Error: deref(a.Error),
			Duration: time.Duration(a.DurationMS) * time.Millisecond,
		})
	}
	return out, nil
}

// Redeliver queues a delivered or failed delivery again, as a new round
// with a fresh attempt budget and the same webhook-id. A pending delivery
// is still being attempted (409), and a disabled webhook gets nothing
// (409).
func (s *Service) Redeliver(ctx context.Context, id string) (Delivery, error) {
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var d models.WebhookDelivery
		err := tx.Where("id = ?", id).Take(&d).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return errNoDelivery
		}
		if err != nil {
			return err
		}
		if d.State == StatePending {
			return errPendingDelivery
		}
		sub, err := s.loadSubscription(tx, d.SubscriptionID)
		if err != nil {
			return err
		}
		if !sub.Active {
			return errDisabled
		}
		now := models.Time(s.now())
		round := d.Round + 1
		// Conditional on the round read above: of two admins clicking at
		// once, one starts the round and the other gets 409.
		res := tx.Model(&models.WebhookDelivery{}).Where("id = ? AND round = ? AND state <> ?", id, d.Round, StatePending).
			Updates(map[string]any{"state": StatePending, "round": round, "next_attempt_at": now, "updated_at": now, "delivered_at": nil})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			return errPendingDelivery
		}
		_, err = s.q.Enqueue(ctx, tx, jobs.Spec{Kind: KindDeliver, Key: jobKey(id, round)})
		return err
	})
	if err != nil {
		return Delivery{}, err
	}
	s.q.Wake(KindDeliver)
	s.log.InfoContext(ctx, "webhook redelivery queued", "delivery_id", id)
	return s.GetDelivery(ctx, id)
}
