package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

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
	incomplete bool   // the answer's body did not arrive in time
	outcome    string // metrics label
}

func (r result) ok() bool { return r.status >= 200 && r.status < 300 && !r.incomplete }

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

	prev, err := previousSecrets(db, s.now(), sub.ID)
	if err != nil {
		return err
	}
	res := s.send(ctx, sub, prev[sub.ID], ev.ID, []byte(ev.Payload))
	if s.afterSend != nil {
		s.afterSend(d.ID, res.status)
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
	case res.outcome == "blocked":
		// The target resolves to an address ferry never dials; retrying
		// only repeats the refusal. Fixed DNS, or a redelivery, resumes.
		log.WarnContext(ctx, "webhook target refused by the SSRF guard; delivery failed", "err", res.err)
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
// owns the delivery by now. It is written only while the delivery exists,
// with the delivery row locked, so an attempt that was in flight when its
// subscription was deleted leaves no orphan row (DeleteSubscription locks
// the same rows before it deletes).
func (s *Service) recordAttempt(ctx context.Context, d *models.WebhookDelivery, round, n int, res result) error {
	a := models.WebhookAttempt{
		DeliveryID: d.ID, Round: round, Attempt: n, StartedAt: models.Time(res.started),
		Status: res.status, DurationMS: res.duration.Milliseconds(),
	}
	if res.err != "" {
		e := truncate(res.err, 1024)
		a.Error = &e
	}
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var ids []string
		if err := tx.Model(&models.WebhookDelivery{}).Clauses(clause.Locking{Strength: "UPDATE"}).
			Where("id = ?", d.ID).Pluck("id", &ids).Error; err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil // deleted with its subscription during the attempt
		}
		return tx.Create(&a).Error
	})
}

// send makes one signed POST of body to the subscription's URL, signed
// with its current secret and with each rotated-out one in prev.
func (s *Service) send(ctx context.Context, sub *models.WebhookSubscription, prev []models.WebhookSecret, id string, body []byte) result {
	now := s.now()
	res := result{started: now}
	keys, err := signingKeys(sub, prev)
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
	if rerr != nil {
		// The answer is complete when its body (or the first 64 KiB of
		// it) has arrived within the attempt's time. A 2xx whose body
		// trickles past the timeout, or breaks off, is no answer: the
		// receiver may not have finished, and a retry is what tells.
		res.incomplete = true
		res.outcome = "network_error"
		res.err = "HTTP " + strconv.Itoa(res.status) + " but reading the answer failed: " + describeSendError(rerr)
		return res
	}
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
	return res
}

// describeSendError keeps an attempt's error short and free of the URL,
// which the admin already knows.
func describeSendError(err error) string {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return "timed out"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
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
