package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/notify/receiver"
)

// maxRetryAfter caps how long a receiver's Retry-After may postpone the
// next attempt, so one odd header cannot park a delivery for a year.
const maxRetryAfter = 24 * time.Hour

// result is what one attempt produced.
type result struct {
	started    time.Time
	duration   time.Duration
	status     int // 0: no response
	err        string
	retryAfter time.Duration
	outcome    string // metrics label
}

func (r result) ok() bool { return r.status >= 200 && r.status < 300 }

// deliver is the KindDeliver job handler: one attempt of one delivery.
func (s *Service) deliver(ctx context.Context, j *jobs.Job) error {
	id, round, err := parseJobKey(j.Key)
	if err != nil {
		return jobs.Permanent(err)
	}
	db := s.db.WithContext(ctx)
	var d models.WebhookDelivery
	if err := db.Where("id = ?", id).Take(&d).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return nil // its subscription was deleted
		}
		return err
	}
	if d.State != StatePending || d.Round != round {
		return nil // a stale job from an earlier round
	}
	sub, err := s.loadSubscription(db, d.SubscriptionID)
	if errors.Is(err, errNoSubscription) {
		// Dispatched while the subscription was being deleted.
		return db.Where("id = ?", d.ID).Delete(&models.WebhookDelivery{}).Error
	}
	if err != nil {
		return err
	}
	log := s.log.With("delivery_id", d.ID, "webhook_id", d.EventID, "subscription_id", sub.ID, "attempt", j.Attempt)
	switch {
	case !sub.Active:
		return s.finish(ctx, j, &d, nil, StateFailed, "webhook disabled: "+deref(sub.DisabledReason))
	case j.Attempt > s.o.MaxAttempts:
		return s.finish(ctx, j, &d, nil, StateFailed, "the worker was lost during the last attempt")
	}
	var ev models.OutboxEvent
	if err := db.Where("id = ?", d.EventID).Take(&ev).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return s.finish(ctx, j, &d, nil, StateFailed, "the event is no longer in the outbox")
		}
		return fmt.Errorf("notify: outbox event %s: %w", d.EventID, err)
	}

	res := s.send(ctx, sub, ev.ID, []byte(ev.Payload))
	if s.o.AfterSend != nil {
		s.o.AfterSend(d.ID, res.status)
	}
	if ctx.Err() != nil {
		// Shutdown or a lost lease cut the attempt short; the job runner
		// hands the job on, and this half-attempt is not the receiver's
		// fault.
		return ctx.Err()
	}
	s.metrics.attempts.WithLabelValues(res.outcome).Inc()
	if err := s.recordAttempt(ctx, &d, round, j.Attempt, res); err != nil {
		log.ErrorContext(ctx, "webhook attempt not recorded", "err", err)
	}
	switch {
	case res.ok():
		if round == 1 { // a redelivery's age says nothing about the sender
			s.metrics.latency.Observe(s.now().Sub(ev.CreatedAt).Seconds())
		}
		log.InfoContext(ctx, "webhook delivered", "status", res.status, "duration", res.duration)
		return s.finish(ctx, j, &d, &res, StateDelivered, "")
	case res.status == http.StatusGone:
		log.WarnContext(ctx, "webhook receiver answered 410 Gone; disabling the webhook")
		return s.finish(ctx, j, &d, &res, StateFailed, "")
	case j.Attempt >= s.o.MaxAttempts:
		log.WarnContext(ctx, "webhook delivery failed after the last attempt", "status", res.status, "err", res.err)
		return s.finish(ctx, j, &d, &res, StateFailed, "")
	}
	delay := max(s.delayAfter(j.Attempt), res.retryAfter)
	next := models.Time(s.now().Add(delay))
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := j.Check(ctx, tx); err != nil {
			return err
		}
		return tx.Model(&models.WebhookDelivery{}).Where("id = ?", d.ID).Updates(map[string]any{
			"attempts": gorm.Expr("attempts + 1"), "last_status": res.status, "last_error": truncate(res.err, 1024),
			"next_attempt_at": next, "updated_at": models.Time(s.now()),
		}).Error
	})
	if err != nil {
		return err
	}
	log.InfoContext(ctx, "webhook attempt failed; will retry", "status", res.status, "err", res.err, "delay", delay)
	return jobs.RetryAfter(fmt.Errorf("attempt %d: %s", j.Attempt, res.summary()), delay)
}

func (r result) summary() string {
	if r.status != 0 {
		return "HTTP " + strconv.Itoa(r.status)
	}
	return r.err
}

// finish ends a delivery's round as delivered or failed, in one fenced
// transaction with the job's completion. A 410 also disables the
// subscription.
func (s *Service) finish(ctx context.Context, j *jobs.Job, d *models.WebhookDelivery, res *result, state, reason string) error {
	now := models.Time(s.now())
	fields := map[string]any{"state": state, "next_attempt_at": nil, "updated_at": now}
	if res != nil {
		fields["attempts"] = gorm.Expr("attempts + 1")
		fields["last_status"] = res.status
		fields["last_error"] = truncate(res.err, 1024)
	}
	if reason != "" {
		fields["last_error"] = reason
	}
	if state == StateDelivered {
		fields["delivered_at"] = now
	}
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := j.Finish(ctx, tx); err != nil {
			return err
		}
		if err := tx.Model(&models.WebhookDelivery{}).Where("id = ?", d.ID).Updates(fields).Error; err != nil {
			return err
		}
		if res != nil && res.status == http.StatusGone {
			return tx.Model(&models.WebhookSubscription{}).Where("id = ?", d.SubscriptionID).Updates(map[string]any{
				"active": false, "disabled_reason": "receiver answered 410 Gone at " + now.Format(time.RFC3339), "updated_at": now,
			}).Error
		}
		return nil
	})
	if err == nil {
		s.metrics.deliveries.WithLabelValues(state).Inc()
	}
	return err
}

// recordAttempt writes the attempt on its own, outside the fenced state
// change: an attempt that happened is history even if a newer worker
// owns the delivery by now.
func (s *Service) recordAttempt(ctx context.Context, d *models.WebhookDelivery, round, n int, res result) error {
	a := models.WebhookAttempt{
		DeliveryID: d.ID, Round: round, Attempt: n, StartedAt: models.Time(res.started),
		Status: res.status, DurationMS: res.duration.Milliseconds(),
	}
	if res.err != "" {
		e := truncate(res.err, 1024)
		a.Error = &e
	}
	return s.db.WithContext(ctx).Create(&a).Error
}

// send makes one signed POST of body to the subscription's URL.
func (s *Service) send(ctx context.Context, sub *models.WebhookSubscription, id string, body []byte) result {
	now := s.now()
	res := result{started: now}
	keys, err := signingKeys(sub, now)
	if err != nil {
		res.err, res.outcome = err.Error(), "error"
		return res
	}
	sigs := make([]string, len(keys))
	for i, k := range keys {
		sigs[i] = receiver.Sign(k, id, now, body)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, sub.URL, bytes.NewReader(body))
	if err != nil {
		res.err, res.outcome = "bad url: "+err.Error(), "error"
		return res
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "ferry-webhooks/1")
	req.Header.Set(receiver.HeaderID, id)
	req.Header.Set(receiver.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(receiver.HeaderSignature, strings.Join(sigs, " "))

	start := time.Now()
	resp, err := s.client.Do(req)
	if err != nil {
		res.duration = time.Since(start)
		res.err, res.outcome = describeSendError(err), "network_error"
		if errors.Is(err, ErrBlockedAddress) {
			res.outcome = "blocked"
		}
		return res
	}
	// Read a bounded amount so the connection can be reused when the
	// answer is short, and never more: a receiver cannot make ferry
	// buffer or wait for a large body.
	var head bytes.Buffer
	_, rerr := io.Copy(&head, io.LimitReader(resp.Body, MaxResponseBytes))
	resp.Body.Close()
	res.duration = time.Since(start)
	res.status = resp.StatusCode
	switch {
	case res.ok():
		res.outcome = "delivered"
	case res.status == http.StatusGone:
		res.outcome = "gone"
		res.err = "HTTP 410: the receiver asked to stop; webhook disabled"
	default:
		res.outcome = "http_error"
		res.err = "HTTP " + strconv.Itoa(res.status)
		if snippet := strings.TrimSpace(truncate(head.String(), 200)); snippet != "" {
			res.err += ": " + snippet
		}
		res.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), s.now())
	}
	if rerr != nil && res.ok() {
		// The status counts; a body cut short afterwards does not undo it.
		res.err = "reading the answer: " + rerr.Error()
	}
	return res
}

// describeSendError keeps an attempt's error short and free of the URL,
// which the admin already knows.
func describeSendError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return "timed out"
		}
		err = ue.Err
	}
	return err.Error()
}

// parseRetryAfter reads Retry-After as seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
		d = time.Duration(min(secs, int64(maxRetryAfter/time.Second))) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return max(0, min(d, maxRetryAfter))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for !utf8.ValidString(s) && len(s) > 0 {
		s = s[:len(s)-1]
	}
	return s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
