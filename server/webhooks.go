package server

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/notify"
)

// routeWebhooks registers the webhook admin API (docs/webhooks.md, "Admin API").
func (s *Server) routeWebhooks(admin *gin.RouterGroup) {
	admin.POST("/webhooks", h(s.createWebhook))
	admin.GET("/webhooks", h(s.listWebhooks))
	admin.GET("/webhooks/:id", h(s.getWebhook))
	admin.DELETE("/webhooks/:id", h(s.deleteWebhook))
	admin.POST("/webhooks/:id/rotate", h(s.rotateWebhook))
	admin.POST("/webhooks/:id/enable", h(s.enableWebhook))
	admin.GET("/webhooks/:id/deliveries", h(s.listDeliveries))
	admin.POST("/deliveries/:id/redeliver", h(s.redeliver))
}

// webhookJSON is a subscription as the API shows it. Secret is present
// only in the answers to create and rotate. previous_secret_expires_at is
// when the last rotated-out secret stops signing;
// previous_secrets_expire_at lists when each one does, latest first.
type webhookJSON struct {
	ID                      string      `json:"id"`
	URL                     string      `json:"url"`
	Events                  []string    `json:"events"`
	Active                  bool        `json:"active"`
	DisabledReason          string      `json:"disabled_reason,omitempty"`
	Secret                  string      `json:"secret,omitempty"`
	PreviousSecretExpiresAt *time.Time  `json:"previous_secret_expires_at,omitempty"`
	PreviousSecretsExpireAt []time.Time `json:"previous_secrets_expire_at,omitempty"`
	CreatedAt               time.Time   `json:"created_at"`
}

func toWebhookJSON(w notify.Subscription, secret string) webhookJSON {
	return webhookJSON{
		ID: w.ID, URL: w.URL, Events: w.Events, Active: w.Active, DisabledReason: w.DisabledReason,
		Secret: secret, PreviousSecretExpiresAt: w.PreviousSecretUntil(), PreviousSecretsExpireAt: w.PreviousSecretsUntil,
		CreatedAt: w.CreatedAt,
	}
}

// deliveryJSON is one delivery. webhook_id is the webhook-id header the
// receiver saw (the event's id), not the subscription's id.
type deliveryJSON struct {
	ID            string        `json:"id"`
	WebhookID     string        `json:"webhook_id"`
	Subscription  string        `json:"subscription_id"`
	Event         string        `json:"event"`
	State         string        `json:"state"`
	Round         int           `json:"round"`
	LastStatus    int           `json:"last_status,omitempty"`
	LastError     string        `json:"last_error,omitempty"`
	NextAttemptAt *time.Time    `json:"next_attempt_at,omitempty"`
	CreatedAt     time.Time     `json:"created_at"`
	DeliveredAt   *time.Time    `json:"delivered_at,omitempty"`
	Attempts      []attemptJSON `json:"attempts"`
}

type attemptJSON struct {
	Round      int       `json:"round"`
	Attempt    int       `json:"attempt"`
	Time       time.Time `json:"time"`
	Status     int       `json:"status"` // 0: no response
	Error      string    `json:"error,omitempty"`
	DurationMS int64     `json:"duration_ms"`
}

func toDeliveryJSON(d notify.Delivery) deliveryJSON {
	out := deliveryJSON{
		ID: d.ID, WebhookID: d.WebhookID, Subscription: d.SubscriptionID, Event: d.EventType, State: d.State,
		Round: d.Round, LastStatus: d.LastStatus, LastError: d.LastError, NextAttemptAt: d.NextAttemptAt,
		CreatedAt: d.CreatedAt, DeliveredAt: d.DeliveredAt, Attempts: make([]attemptJSON, len(d.Attempts)),
	}
	for i, a := range d.Attempts {
		out.Attempts[i] = attemptJSON{Round: a.Round, Attempt: a.N, Time: a.At, Status: a.Status, Error: a.Error, DurationMS: a.Duration.Milliseconds()}
	}
	return out
}

func (s *Server) createWebhook(c *gin.Context) error {
	var req struct {
		URL    string   `json:"url"`
		Events []string `json:"events"`
	}
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	w, secret, err := s.d.Webhooks.CreateSubscription(c.Request.Context(), req.URL, req.Events)
	if err != nil {
		return err
	}
	c.Header("Cache-Control", "no-store")
	c.PureJSON(http.StatusCreated, toWebhookJSON(w, secret))
	return nil
}

func (s *Server) listWebhooks(c *gin.Context) error {
	list, err := s.d.Webhooks.Subscriptions(c.Request.Context())
	if err != nil {
		return err
	}
	out := make([]webhookJSON, len(list))
	for i, w := range list {
		out[i] = toWebhookJSON(w, "")
	}
	c.PureJSON(http.StatusOK, gin.H{"webhooks": out})
	return nil
}

func (s *Server) getWebhook(c *gin.Context) error {
	w, err := s.d.Webhooks.GetSubscription(c.Request.Context(), c.Param("id"))
	if err != nil {
		return err
	}
	c.PureJSON(http.StatusOK, toWebhookJSON(w, ""))
	return nil
}

func (s *Server) enableWebhook(c *gin.Context) error {
	w, err := s.d.Webhooks.EnableSubscription(c.Request.Context(), c.Param("id"))
	if err != nil {
		return err
	}
	c.PureJSON(http.StatusOK, toWebhookJSON(w, ""))
	return nil
}

func (s *Server) deleteWebhook(c *gin.Context) error {
	if err := s.d.Webhooks.DeleteSubscription(c.Request.Context(), c.Param("id")); err != nil {
		return err
	}
	c.Status(http.StatusNoContent)
	return nil
}

// rotateWebhook takes an optional body {"grace_seconds": n}; without it
// the old secret keeps signing for the default grace period (24 h).
func (s *Server) rotateWebhook(c *gin.Context) error {
	var req struct {
		GraceSeconds *int64 `json:"grace_seconds"`
	}
	if c.Request.ContentLength != 0 {
		if err := bindJSON(c, &req); err != nil {
			return err
		}
	}
	var grace *time.Duration
	if req.GraceSeconds != nil {
		if *req.GraceSeconds < 0 || *req.GraceSeconds > int64(notify.MaxRotationGrace/time.Second) {
			return errkind.Invalidf("invalid_grace", "grace_seconds must be from 0 to %d", int64(notify.MaxRotationGrace/time.Second))
		}
		g := time.Duration(*req.GraceSeconds) * time.Second
		grace = &g
	}
	w, secret, err := s.d.Webhooks.RotateSecret(c.Request.Context(), c.Param("id"), grace)
	if err != nil {
		return err
	}
	c.Header("Cache-Control", "no-store")
	c.PureJSON(http.StatusOK, toWebhookJSON(w, secret))
	return nil
}

func (s *Server) listDeliveries(c *gin.Context) error {
	limit, err := queryWhole(c, "limit", 1)
	if err != nil {
		return err
	}
	list, err := s.d.Webhooks.Deliveries(c.Request.Context(), c.Param("id"), int(limit))
	if err != nil {
		return err
	}
	out := make([]deliveryJSON, len(list))
	for i, d := range list {
		out[i] = toDeliveryJSON(d)
	}
	c.PureJSON(http.StatusOK, gin.H{"deliveries": out})
	return nil
}

func (s *Server) redeliver(c *gin.Context) error {
	d, err := s.d.Webhooks.Redeliver(c.Request.Context(), c.Param("id"))
	if err != nil {
		return err
	}
	c.PureJSON(http.StatusAccepted, toDeliveryJSON(d))
	return nil
}
