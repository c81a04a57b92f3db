package notify

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/random"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/notify/receiver"
)

// Events lists the event types a subscription may ask for.
var Events = []string{UploadCompleted, UploadFailed, ExportCompleted, ExportFailed, UserDeleted}

// MaxRotationGrace bounds how long an old secret may keep signing.
const MaxRotationGrace = 30 * 24 * time.Hour

var (
	errInvalidURL      = errkind.Invalidf("invalid_url", "url must be an absolute http or https URL")
	errURLUserinfo     = errkind.Invalidf("invalid_url", "url must not carry a user name or password; authenticate with the signature")
	errURLTooLong      = errkind.Invalidf("invalid_url", "url is longer than 2048 bytes")
	errURLSpace        = errkind.Invalidf("invalid_url", "url must not contain spaces or control characters; percent-encode them (%%20)")
	errURLPort         = errkind.Invalidf("invalid_url", "url port must be a number from 1 to 65535")
	errURLZone         = errkind.Invalidf("invalid_url", "url must not name a network interface (a %%zone); link-local addresses reach one machine only")
	errPrivateURL      = errkind.Invalidf("private_url", "url points at a loopback, private, link-local, metadata or other special-purpose address; set FERRY_WEBHOOK_ALLOW_PRIVATE=true to allow that (tests and development only)")
	errNoSubscription  = errkind.New(errkind.NotFound, "webhook_not_found", "no such webhook")
	errNoDelivery      = errkind.New(errkind.NotFound, "delivery_not_found", "no such delivery")
	errPendingDelivery = errkind.New(errkind.Conflict, "delivery_pending", "the delivery is still being attempted")
	errDisabled        = errkind.New(errkind.Conflict, "webhook_disabled", "the webhook is disabled because its receiver answered 410 Gone; enable it again (POST /admin/webhooks/{id}/enable) once the receiver is back")
)

// MaxPreviousSecrets bounds how many rotated-out secrets may sign at once,
// so that a burst of rotations cannot grow every message's
// webhook-signature header without end.
const MaxPreviousSecrets = 4

// Subscription is a receiver as the admin API shows it. Its secret is
// returned only by CreateSubscription and RotateSecret.
type Subscription struct {
	ID             string
	URL            string
	Events         []string
	Active         bool
	DisabledReason string
	// PreviousSecretsUntil says, latest first, when each rotated-out
	// secret that still signs stops; empty when none does.
	PreviousSecretsUntil []time.Time
	CreatedAt            time.Time
}

// PreviousSecretUntil is when the last rotated-out secret stops signing;
// nil when none is signing.
func (s Subscription) PreviousSecretUntil() *time.Time {
	if len(s.PreviousSecretsUntil) == 0 {
		return nil
	}
	t := s.PreviousSecretsUntil[0]
	return &t
}

func toSubscription(m *models.WebhookSubscription, previous []models.WebhookSecret) Subscription {
	s := Subscription{ID: m.ID, URL: m.URL, Events: strings.Split(m.Events, ","), Active: m.Active, CreatedAt: m.CreatedAt,
		PreviousSecretsUntil: []time.Time{}}
	if m.DisabledReason != nil {
		s.DisabledReason = *m.DisabledReason
	}
	for _, p := range previous {
		s.PreviousSecretsUntil = append(s.PreviousSecretsUntil, p.ExpiresAt)
	}
	return s
}

// previousSecrets returns the rotated-out secrets of the given
// subscriptions that still sign at now, latest expiry first, by
// subscription.
func previousSecrets(db *gorm.DB, now time.Time, ids ...string) (map[string][]models.WebhookSecret, error) {
	var rows []models.WebhookSecret
	if err := db.Where("subscription_id IN ? AND expires_at > ?", ids, models.Time(now)).
		Order("expires_at DESC, id DESC").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("notify: previous secrets: %w", err)
	}
	out := map[string][]models.WebhookSecret{}
	for _, r := range rows {
		out[r.SubscriptionID] = append(out[r.SubscriptionID], r)
	}
	return out, nil
}

// NewSecret returns a fresh signing secret: "whsec_" and the base64 of 32
// random bytes.
func NewSecret() string {
	return receiver.SecretPrefix + base64.StdEncoding.EncodeToString(random.Bytes(32))
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
// subscription with its secret, which is not shown again. An active
// subscription that already sends one of the events to the same URL is a
// conflict: the receiver would get each such event twice, with one
// webhook-id under two secrets.
func (s *Service) CreateSubscription(ctx context.Context, rawURL string, events []string) (Subscription, string, error) {
	u, err := s.guard.checkURL(ctx, rawURL)
	if err != nil {
		return Subscription{}, "", err
	}
	evs, err := validEvents(events)
	if err != nil {
		return Subscription{}, "", err
	}
	now := models.Time(s.now())
	m := models.WebhookSubscription{
		ID: models.NewID("whk"), URL: rawURL, Events: evs, Secret: NewSecret(), Active: true,
		CreatedAt: now, UpdatedAt: now,
	}
	err = s.exclusive(ctx, "ferry_webhook_create", func(tx *gorm.DB) error {
		if err := overlapping(tx, u, evs, ""); err != nil {
			return err
		}
		return tx.Create(&m).Error
	})
	if err != nil {
		if errkind.KindOf(err) != nil {
			return Subscription{}, "", err
		}
		return Subscription{}, "", fmt.Errorf("notify: create subscription: %w", err)
	}
	// The URL stays out of the log: its path or query may carry the
	// receiver's own token.
	s.log.InfoContext(ctx, "webhook created", "subscription_id", m.ID, "host", u.Host, "events", evs)
	return toSubscription(&m, nil), m.Secret, nil
}

// overlapping refuses a subscription to u for evs when another active one
// (not exceptID) already sends one of those events to the same endpoint:
// the receiver would get each such event twice, with one webhook-id under
// two secrets.
func overlapping(tx *gorm.DB, u *url.URL, evs, exceptID string) error {
	var subs []models.WebhookSubscription
	if err := tx.Select("id, url, events").Where("active = ? AND id <> ?", true, exceptID).Order("created_at, id").Find(&subs).Error; err != nil {
		return err
	}
	target := targetKey(u)
	for _, o := range subs {
		ou, err := url.Parse(o.URL)
		if err != nil || targetKey(ou) != target {
			continue
		}
		var shared []string
		for _, e := range strings.Split(o.Events, ",") {
			if slices.Contains(strings.Split(evs, ","), e) {
				shared = append(shared, e)
			}
		}
		if len(shared) > 0 {
			return errkind.New(errkind.Conflict, "webhook_exists",
				"webhook %s already sends %s to this url; delete it first, or subscribe this url to other events", o.ID, strings.Join(shared, ", ")).
				With("existing_webhook", o.ID)
		}
	}
	return nil
}

// EnableSubscription turns a subscription that was disabled (its receiver
// answered 410 Gone) back on: new events are delivered to it again, under
// the secrets it had. Deliveries that failed while it was off stay failed;
// redeliver them one by one. Enabling an active subscription changes
// nothing. Like creating one, it is refused while another active
// subscription sends the same events to the same endpoint.
func (s *Service) EnableSubscription(ctx context.Context, id string) (Subscription, error) {
	err := s.exclusive(ctx, "ferry_webhook_create", func(tx *gorm.DB) error {
		m, err := s.loadSubscription(tx, id)
		if err != nil {
			return err
		}
		if m.Active {
			return nil
		}
		u, err := url.Parse(m.URL)
		if err != nil {
			return fmt.Errorf("notify: stored url of %s: %w", id, err)
		}
		if err := overlapping(tx, u, m.Events, m.ID); err != nil {
			return err
		}
		return tx.Model(&models.WebhookSubscription{}).Where("id = ?", id).
			Updates(map[string]any{"active": true, "disabled_reason": nil, "updated_at": models.Time(s.now())}).Error
	})
	if err != nil {
		if errkind.KindOf(err) != nil {
			return Subscription{}, err
		}
		return Subscription{}, fmt.Errorf("notify: enable subscription: %w", err)
	}
	s.log.InfoContext(ctx, "webhook enabled", "subscription_id", id)
	return s.GetSubscription(ctx, id)
}

// targetKey is what two subscription URLs share when they reach the same
// endpoint: scheme and host in lower case, the default port left out, an
// empty path as "/", and the query.
func targetKey(u *url.URL) string {
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if a, err := netip.ParseAddr(host); err == nil {
		host = a.String()
	}
	port := u.Port()
	if n, err := strconv.Atoi(port); err == nil {
		port = strconv.Itoa(n)
	}
	if (u.Scheme == "http" && port == "80") || (u.Scheme == "https" && port == "443") {
		port = ""
	}
	if port != "" {
		host = net.JoinHostPort(host, port)
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	path := u.Path
	if path == "" {
		path = "/"
	}
	key := u.Scheme + "://" + host + path
	if u.RawQuery != "" {
		key += "?" + u.RawQuery
	}
	return key
}

// exclusive runs fn in a transaction that no other exclusive call with
// the same name runs beside, on any replica. SQLite's transactions are
// immediate (they take the write lock at BEGIN), which is that already; on
// MySQL a named lock held by the transaction's connection does it, where
// row locks could not: the rows that would conflict do not exist yet.
func (s *Service) exclusive(ctx context.Context, name string, fn func(tx *gorm.DB) error) error {
	if models.Dialect(s.db) != models.MySQL {
		return s.db.WithContext(ctx).Transaction(fn)
	}
	return s.db.WithContext(ctx).Connection(func(conn *gorm.DB) error {
		var got int
		if err := conn.Raw("SELECT GET_LOCK(?, 10)", name).Scan(&got).Error; err != nil {
			return fmt.Errorf("notify: lock %s: %w", name, err)
		}
		if got != 1 {
			return fmt.Errorf("notify: lock %s: held by another replica for 10 s", name)
		}
		defer conn.Exec("SELECT RELEASE_LOCK(?)", name)
		return conn.Transaction(fn)
	})
}

// Subscriptions lists every subscription, oldest first.
func (s *Service) Subscriptions(ctx context.Context) ([]Subscription, error) {
	db := s.db.WithContext(ctx)
	var rows []models.WebhookSubscription
	if err := db.Order("created_at, id").Find(&rows).Error; err != nil {
		return nil, err
	}
	out := make([]Subscription, len(rows))
	if len(rows) == 0 {
		return out, nil
	}
	ids := make([]string, len(rows))
	for i := range rows {
		ids[i] = rows[i].ID
	}
	prev, err := previousSecrets(db, s.now(), ids...)
	if err != nil {
		return nil, err
	}
	for i := range rows {
		out[i] = toSubscription(&rows[i], prev[rows[i].ID])
	}
	return out, nil
}

// GetSubscription returns one subscription.
func (s *Service) GetSubscription(ctx context.Context, id string) (Subscription, error) {
	db := s.db.WithContext(ctx)
	m, err := s.loadSubscription(db, id)
	if err != nil {
		return Subscription{}, err
	}
	prev, err := previousSecrets(db, s.now(), id)
	if err != nil {
		return Subscription{}, err
	}
	return toSubscription(m, prev[id]), nil
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

// DeleteSubscription removes a subscription with its deliveries, their
// attempts and its rotated-out secrets. Jobs still queued for them find
// nothing and end.
func (s *Service) DeleteSubscription(ctx context.Context, id string) error {
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Where("id = ?", id).Delete(&models.WebhookSubscription{})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return errNoSubscription
		}
		// Lock the deliveries first: an attempt in flight records itself
		// only while its delivery exists (recordAttempt locks it too), so
		// its row lands before this delete and goes with it, or finds the
		// delivery gone and is not written.
		var ids []string
		if err := tx.Model(&models.WebhookDelivery{}).Clauses(clause.Locking{Strength: "UPDATE"}).
			Where("subscription_id = ?", id).Pluck("id", &ids).Error; err != nil {
			return err
		}
		// A derived table keeps MySQL from refusing a subquery on the
		// table being deleted from (it is not, but the rule is broad).
		if err := tx.Exec(`DELETE FROM webhook_attempts WHERE delivery_id IN
			(SELECT id FROM (SELECT id FROM webhook_deliveries WHERE subscription_id = ?) AS d)`, id).Error; err != nil {
			return err
		}
		if err := tx.Where("subscription_id = ?", id).Delete(&models.WebhookSecret{}).Error; err != nil {
			return err
		}
		return tx.Where("subscription_id = ?", id).Delete(&models.WebhookDelivery{}).Error
	})
	if err == nil {
		s.log.InfoContext(ctx, "webhook deleted", "subscription_id", id)
	}
	return err
}

// RotateSecret gives a subscription a new secret and returns it. The old
// secret keeps signing beside the new one for grace, so receivers can
// switch without losing a message; nil means Config.RotationGrace and
// zero ends the old secret at once. Secrets rotated out earlier keep
// signing until their own expiry: a rotation never shortens a grace
// period it did not grant. While MaxPreviousSecrets of them still sign, a
// rotation with a grace period is refused.
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
		// Locked, so that two rotations at once cannot both count the
		// previous secrets and both add one.
		var m models.WebhookSubscription
		err := tx.Clauses(clause.Locking{Strength: "UPDATE"}).Where("id = ?", id).Take(&m).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return errNoSubscription
		}
		if err != nil {
			return err
		}
		now := models.Time(s.now())
		if err := tx.Where("subscription_id = ? AND expires_at <= ?", id, now).Delete(&models.WebhookSecret{}).Error; err != nil {
			return err
		}
		prev, err := previousSecrets(tx, now, id)
		if err != nil {
			return err
		}
		live := prev[id]
		if g > 0 {
			if len(live) >= MaxPreviousSecrets {
				return errkind.New(errkind.Conflict, "too_many_secrets",
					"%d rotated-out secrets still sign; the next stops at %s. Wait until then, or rotate with grace_seconds 0",
					len(live), live[len(live)-1].ExpiresAt.Format(time.RFC3339))
			}
			old := models.WebhookSecret{SubscriptionID: id, Secret: m.Secret, ExpiresAt: now.Add(g), CreatedAt: now}
			if err := tx.Create(&old).Error; err != nil {
				return err
			}
			live = append([]models.WebhookSecret{old}, live...)
			slices.SortStableFunc(live, func(a, b models.WebhookSecret) int { return b.ExpiresAt.Compare(a.ExpiresAt) })
		}
		if err := tx.Model(&m).Updates(map[string]any{"secret": secret, "updated_at": now}).Error; err != nil {
			return err
		}
		out = toSubscription(&m, live)
		return nil
	})
	if err != nil {
		return Subscription{}, "", err
	}
	s.log.InfoContext(ctx, "webhook secret rotated", "subscription_id", id, "previous_secrets", len(out.PreviousSecretsUntil))
	return out, secret, nil
}

// signingKeys returns the keys that sign: the current secret, then the
// rotated-out ones that still sign.
func signingKeys(m *models.WebhookSubscription, previous []models.WebhookSecret) ([][]byte, error) {
	secrets := []string{m.Secret}
	for _, p := range previous {
		secrets = append(secrets, p.Secret)
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

// TargetCheck is what one subscription's receiver answered a probe.
type TargetCheck struct {
	Subscription Subscription
	// Status is the HTTP status the receiver answered; 0 when it could
	// not be reached, and Err says why.
	Status int
	Err    error
}

// CheckTargets asks every active subscription's receiver for a HEAD of its
// URL, through the same guarded client deliveries use, so a target that
// the address guard refuses or that does not answer is found before an
// event is due. Any HTTP answer counts as reachable: a receiver need not
// serve HEAD, it must only be there. Disabled subscriptions are returned
// unprobed (Status 0, Err nil).
func (s *Service) CheckTargets(ctx context.Context) ([]TargetCheck, error) {
	subs, err := s.Subscriptions(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]TargetCheck, len(subs))
	for i, sub := range subs {
		out[i].Subscription = sub
		if !sub.Active {
			continue
		}
		out[i].Status, out[i].Err = s.head(ctx, sub.URL)
	}
	return out, nil
}

func (s *Service) head(ctx context.Context, target string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, target, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("User-Agent", "ferry-doctor")
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
