package users

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/models"
)

// ServiceKeyPrefix starts every service key, so it is told from a user's
// token (fry_) at a glance, by people, secret scanners and ferry itself.
const ServiceKeyPrefix = "fsk_"

// The scopes a service key can hold. A key may call only the routes its
// scopes open; it is never a user, so every other route refuses it.
const (
	// ScopeTicketsCreate: create upload tickets for a user (POST /tickets).
	ScopeTicketsCreate = "tickets:create"
	// ScopeGrantsCreate: grant any user's file to another user.
	ScopeGrantsCreate = "grants:create"
	// ScopeFilesRead: read any user's files (their details and downloads).
	ScopeFilesRead = "files:read"
	// ScopeWebhooksManage: the webhook admin API (/admin/webhooks…).
	ScopeWebhooksManage = "webhooks:manage"
)

// Scopes lists every scope, in the order the docs give them.
func Scopes() []string {
	return []string{ScopeTicketsCreate, ScopeGrantsCreate, ScopeFilesRead, ScopeWebhooksManage}
}

// lastUsedEvery bounds how often a key's last_used_at is written: each
// request would otherwise be a write, and a minute is precise enough to
// tell a key in use from a forgotten one.
const lastUsedEvery = time.Minute

// ServiceKey is a host app's backend credential as the rest of ferry sees
// it. The secret itself is never kept.
type ServiceKey struct {
	ID         string
	Name       string
	Scopes     []string
	CreatedAt  time.Time
	LastUsedAt *time.Time
}

// Has reports whether the key holds scope.
func (k ServiceKey) Has(scope string) bool { return slices.Contains(k.Scopes, scope) }

var errServiceKeyNotFound = errkind.New(errkind.NotFound, "service_key_not_found", "no such service key")

// CreateServiceKey adds a service key with the given scopes and returns it
// with its secret, which is shown only this once.
func (s *Service) CreateServiceKey(ctx context.Context, name string, scopes []string) (ServiceKey, string, error) {
	if !namePattern.MatchString(name) {
		return ServiceKey{}, "", errkind.Invalidf("invalid_name", "name must be 1-64 characters of letters, digits, '.', '_', '@' or '-', starting with a letter or digit")
	}
	scopes, err := normaliseScopes(scopes)
	if err != nil {
		return ServiceKey{}, "", err
	}
	secret := ServiceKeyPrefix + randomSecret()
	row := models.ServiceKey{ID: models.NewID("svk"), Name: name, Hash: hash(secret), Scopes: strings.Join(scopes, " "),
		CreatedAt: models.Time(s.now())}
	if err := s.db.WithContext(ctx).Create(&row).Error; err != nil {
		return ServiceKey{}, "", fmt.Errorf("create service key: %w", err)
	}
	return toServiceKey(row), secret, nil
}

// normaliseScopes checks every scope against Scopes and drops repeats,
// keeping the caller's order.
func normaliseScopes(in []string) ([]string, error) {
	if len(in) == 0 {
		return nil, errkind.Invalidf("missing_scopes", "give the key at least one scope: %s", strings.Join(Scopes(), ", "))
	}
	var out []string
	for _, sc := range in {
		if !slices.Contains(Scopes(), sc) {
			return nil, errkind.Invalidf("unknown_scope", "unknown scope %q; the scopes are %s", sc, strings.Join(Scopes(), ", ")).
				With("scope", sc)
		}
		if !slices.Contains(out, sc) {
			out = append(out, sc)
		}
	}
	return out, nil
}

// ListServiceKeys returns the keys that are not revoked, oldest first.
func (s *Service) ListServiceKeys(ctx context.Context) ([]ServiceKey, error) {
	var rows []models.ServiceKey
	if err := s.db.WithContext(ctx).Where("revoked_at IS NULL").Order("created_at, id").Find(&rows).Error; err != nil {
		return nil, err
	}
	out := make([]ServiceKey, len(rows))
	for i, r := range rows {
		out[i] = toServiceKey(r)
	}
	return out, nil
}

// RevokeServiceKey revokes a key; its very next request is refused. A key
// that is unknown or already revoked is not found.
func (s *Service) RevokeServiceKey(ctx context.Context, id string) error {
	res := s.db.WithContext(ctx).Model(&models.ServiceKey{}).Where("id = ? AND revoked_at IS NULL", id).
		Update("revoked_at", models.Time(s.now()))
	if res.Error != nil {
		return fmt.Errorf("revoke service key: %w", res.Error)
	}
	if res.RowsAffected == 0 {
		return errServiceKeyNotFound
	}
	return nil
}

// AuthenticateServiceKey resolves a service key's secret to the key, on
// every request, so a revocation holds at once.
func (s *Service) AuthenticateServiceKey(ctx context.Context, secret string) (ServiceKey, error) {
	if !strings.HasPrefix(secret, ServiceKeyPrefix) || len(secret) > 128 {
		return ServiceKey{}, ErrUnauthenticated
	}
	var row models.ServiceKey
	err := s.db.WithContext(ctx).Where("hash = ? AND revoked_at IS NULL", hash(secret)).Take(&row).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return ServiceKey{}, ErrUnauthenticated
	}
	if err != nil {
		return ServiceKey{}, fmt.Errorf("authenticate service key: %w", err)
	}
	now := models.Time(s.now())
	if row.LastUsedAt == nil || now.Sub(*row.LastUsedAt) >= lastUsedEvery {
		// Conditional, so replicas racing here write once; a failure only
		// leaves last_used_at a little old, which is no reason to refuse.
		res := s.db.WithContext(ctx).Model(&models.ServiceKey{}).
			Where("id = ? AND (last_used_at IS NULL OR last_used_at <= ?)", row.ID, now.Add(-lastUsedEvery)).
			Update("last_used_at", now)
		if res.Error == nil && res.RowsAffected == 1 {
			row.LastUsedAt = &now
		}
	}
	return toServiceKey(row), nil
}

func toServiceKey(r models.ServiceKey) ServiceKey {
	return ServiceKey{ID: r.ID, Name: r.Name, Scopes: strings.Fields(r.Scopes), CreatedAt: r.CreatedAt, LastUsedAt: r.LastUsedAt}
}
