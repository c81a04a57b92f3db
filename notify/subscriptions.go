package notify

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/notify/receiver"
)

// Events lists the event types a subscription may ask for.
var Events = []string{UploadCompleted, UploadFailed, ExportCompleted, ExportFailed}

// MaxRotationGrace bounds how long an old secret may keep signing.
const MaxRotationGrace = 30 * 24 * time.Hour

var (
	errInvalidURL      = errkind.Invalidf("invalid_url", "url must be an absolute http or https URL")
	errURLUserinfo     = errkind.Invalidf("invalid_url", "url must not carry a user name or password; authenticate with the signature")
	errURLTooLong      = errkind.Invalidf("invalid_url", "url is longer than 2048 bytes")
	errPrivateURL      = errkind.Invalidf("private_url", "url points at a loopback, private, link-local or metadata address; set FERRY_WEBHOOK_ALLOW_PRIVATE=true to allow that (tests and development only)")
	errNoSubscription  = errkind.New(errkind.NotFound, "webhook_not_found", "no such webhook")
	errNoDelivery      = errkind.New(errkind.NotFound, "delivery_not_found", "no such delivery")
	errPendingDelivery = errkind.New(errkind.Conflict, "delivery_pending", "the delivery is still being attempted")
	errDisabled        = errkind.New(errkind.Conflict, "webhook_disabled", "the webhook is disabled because its receiver answered 410 Gone; create a new one")
)

// Subscription is a receiver as the admin API shows it. Its secret is
// returned only by CreateSubscription and RotateSecret.
type Subscription struct {
	ID             string
	URL            string
	Events         []string
	Active         bool
	DisabledReason string
	// PreviousSecretUntil is when a rotated-out secret stops signing; nil
	// when none is signing.
	PreviousSecretUntil *time.Time
	CreatedAt           time.Time
}

func toSubscription(m *models.WebhookSubscription, now time.Time) Subscription {
	s := Subscription{ID: m.ID, URL: m.URL, Events: strings.Split(m.Events, ","), Active: m.Active, CreatedAt: m.CreatedAt}
	if m.DisabledReason != nil {
		s.DisabledReason = *m.DisabledReason
	}
	if m.PreviousSecret != nil && m.PreviousUntil != nil && now.Before(*m.PreviousUntil) {
		s.PreviousSecretUntil = m.PreviousUntil
	}
	return s
}

// NewSecret returns a fresh signing secret: "whsec_" and the base64 of 32
// random bytes.
func NewSecret() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("crypto/rand failed: " + err.Error()) // cannot happen on supported platforms
	}
	return receiver.SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

func validEvents(events []string) (string, error) {
	if len(events) == 0 {
		return "", errkind.Invalidf("invalid_events", "events must name at least one of %s", strings.Join(Events, ", "))
	}
	var out []string
	for _, e := range events {
		if !slices.Contains(Events, e) {
			return "", errkind.Invalidf("invalid_events", "unknown event %q; known events are %s", e, strings.Join(Events, ", ")).
				With("known_events", Events)
		}
		if !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	return strings.Join(out, ","), nil
}

// CreateSubscription registers url for events and returns the
// subscription with its secret, which is not shown again.
func (s *Service) CreateSubscription(ctx context.Context, url string, events []string) (Subscription, string, error) {
	if _, err := s.guard.checkURL(ctx, url); err != nil {
		return Subscription{}, "", err
	}
	evs, err := validEvents(events)
	if err != nil {
		return Subscription{}, "", err
	}
	now := models.Time(s.now())
	m := models.WebhookSubscription{
		ID: models.NewID("whk"), URL: url, Events: evs, Secret: NewSecret(), Active: true,
		CreatedAt: now, UpdatedAt: now,
	}
	if err := s.db.WithContext(ctx).Create(&m).Error; err != nil {
		return Subscription{}, "", fmt.Errorf("notify: create subscription: %w", err)
	}
	s.log.InfoContext(ctx, "webhook created", "webhook_id", m.ID, "url", url, "events", evs)
	return toSubscription(&m, now), m.Secret, nil
}

// Subscriptions lists every subscription, oldest first.
func (s *Service) Subscriptions(ctx context.Context) ([]Subscription, error) {
	var rows []models.WebhookSubscription
	if err := s.db.WithContext(ctx).Order("created_at, id").Find(&rows).Error; err != nil {
		return nil, err
	}
	now := s.now()
	out := make([]Subscription, len(rows))
	for i := range rows {
		out[i] = toSubscription(&rows[i], now)
	}
	return out, nil
}

// GetSubscription returns one subscription.
func (s *Service) GetSubscription(ctx context.Context, id string) (Subscription, error) {
	m, err := s.loadSubscription(s.db.WithContext(ctx), id)
	if err != nil {
		return Subscription{}, err
	}
	return toSubscription(m, s.now()), nil
}

func (s *Service) loadSubscription(db *gorm.DB, id string) (*models.WebhookSubscription, error) {
	var m models.WebhookSubscription
	err := db.Where("id = ?", id).Take(&m).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, errNoSubscription
	}
	if err != nil {
		return nil, err
	}
	return &m, nil
}

// DeleteSubscription removes a subscription with its deliveries and their
// attempts. Jobs still queued for them find nothing and end.
func (s *Service) DeleteSubscription(ctx context.Context, id string) error {
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Where("id = ?", id).Delete(&models.WebhookSubscription{})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return errNoSubscription
		}
		// A derived table keeps MySQL from refusing a subquery on the
		// table being deleted from (it is not, but the rule is broad).
		if err := tx.Exec(`DELETE FROM webhook_attempts WHERE delivery_id IN
			(SELECT id FROM (SELECT id FROM webhook_deliveries WHERE subscription_id = ?) AS d)`, id).Error; err != nil {
			return err
		}
		return tx.Where("subscription_id = ?", id).Delete(&models.WebhookDelivery{}).Error
	})
	if err == nil {
		s.log.InfoContext(ctx, "webhook deleted", "webhook_id", id)
	}
	return err
}

// RotateSecret gives a subscription a new secret and returns it. The old
// secret keeps signing beside the new one for grace, so receivers can
// switch without losing a message; nil means Options.RotationGrace and
// zero ends the old secret at once.
func (s *Service) RotateSecret(ctx context.Context, id string, grace *time.Duration) (Subscription, string, error) {
	g := s.o.RotationGrace
	if grace != nil {
		g = *grace
	}
	if g < 0 || g > MaxRotationGrace {
		return Subscription{}, "", errkind.Invalidf("invalid_grace", "the grace period must be from 0 to %s", MaxRotationGrace)
	}
	var out Subscription
	secret := NewSecret()
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		m, err := s.loadSubscription(tx, id)
		if err != nil {
			return err
		}
		now := models.Time(s.now())
		fields := map[string]any{"secret": secret, "previous_secret": m.Secret, "previous_until": now.Add(g), "updated_at": now}
		if g == 0 {
			fields["previous_secret"], fields["previous_until"] = nil, nil
		}
		if err := tx.Model(m).Updates(fields).Error; err != nil {
			return err
		}
		m, err = s.loadSubscription(tx, id)
		if err != nil {
			return err
		}
		out = toSubscription(m, now)
		return nil
	})
	if err != nil {
		return Subscription{}, "", err
	}
	s.log.InfoContext(ctx, "webhook secret rotated", "webhook_id", id, "previous_until", out.PreviousSecretUntil)
	return out, secret, nil
}

// signingKeys returns the keys that sign at now: the current secret, and
// the previous one while its grace period lasts.
func signingKeys(m *models.WebhookSubscription, now time.Time) ([][]byte, error) {
	secrets := []string{m.Secret}
	if m.PreviousSecret != nil && m.PreviousUntil != nil && now.Before(*m.PreviousUntil) {
		secrets = append(secrets, *m.PreviousSecret)
	}
	keys := make([][]byte, 0, len(secrets))
	for _, sec := range secrets {
		k, err := receiver.ParseSecret(sec)
		if err != nil {
			return nil, fmt.Errorf("notify: subscription %s: %w", m.ID, err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}
