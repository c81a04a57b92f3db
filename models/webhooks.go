package models

import "time"

// WebhookSubscription is a receiver URL and the events it wants; see
// package notify.
type WebhookSubscription struct {
	ID             string `gorm:"primaryKey"`
	URL            string
	Events         string // comma-separated event types
	Secret         string // whsec_…, signs every delivery
	Active         bool
	DisabledReason *string
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// WebhookSecret is a secret a rotation took out of service; it keeps
// signing beside the current one until ExpiresAt.
type WebhookSecret struct {
	ID             int64 `gorm:"primaryKey"`
	SubscriptionID string
	Secret         string
	ExpiresAt      time.Time
	CreatedAt      time.Time
}

// WebhookDelivery is one outbox event on its way to one subscription.
// EventID is the webhook-id the receiver sees.
type WebhookDelivery struct {
	ID             string `gorm:"primaryKey"`
	SubscriptionID string
	EventID        string
	EventType      string
	State          string
	Round          int
	Attempts       int
	LastStatus     *int
	LastError      *string
	NextAttemptAt  *time.Time
	CreatedAt      time.Time
	UpdatedAt      time.Time
	DeliveredAt    *time.Time
}

// WebhookAttempt is one HTTP request made for a delivery. Status 0 means
// no response arrived.
type WebhookAttempt struct {
	ID         int64 `gorm:"primaryKey"`
	DeliveryID string
	Round      int
	Attempt    int
	StartedAt  time.Time
	Status     int
	Error      *string
	DurationMS int64 `gorm:"column:duration_ms"`
}
