package users_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/users"
)

func TestServiceKeys(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		ctx := context.Background()
		now := time.Now()
		s := testenv.Must(users.New(users.Config{DB: db.DB, Now: func() time.Time { return now }, SessionTTL: time.Hour}))

		k, secret, err := s.CreateServiceKey(ctx, "backend", []string{users.ScopeTicketsCreate, users.ScopeGrantsCreate, users.ScopeTicketsCreate})
		if err != nil || !strings.HasPrefix(secret, users.ServiceKeyPrefix) {
			t.Fatalf("create: %v %q", err, secret)
		}
		if !slices.Equal(k.Scopes, []string{users.ScopeTicketsCreate, users.ScopeGrantsCreate}) || k.LastUsedAt != nil {
			t.Fatalf("created %+v; want the two scopes once each and no last use", k)
		}
		// Only the hash is stored.
		var row models.ServiceKey
		db.Where("id = ?", k.ID).Take(&row)
		if row.Hash == "" || strings.Contains(row.Hash, secret[len(users.ServiceKeyPrefix):]) {
			t.Fatalf("key stored as %q", row.Hash)
		}

		for _, bad := range []struct {
			name   string
			scopes []string
			code   string
		}{
			{"x", []string{"tickets:create", "files:write"}, "unknown_scope"},
			{"x", []string{"TICKETS:CREATE"}, "unknown_scope"},
			{"x", nil, "missing_scopes"},
			{"a b", []string{users.ScopeFilesRead}, "invalid_name"},
			{"", []string{users.ScopeFilesRead}, "invalid_name"},
		} {
			_, _, err := s.CreateServiceKey(ctx, bad.name, bad.scopes)
			var e *errkind.Error
			if !errors.As(err, &e) || e.Kind != errkind.Invalid || e.Code != bad.code {
				t.Errorf("create %q %v: %v, want %s", bad.name, bad.scopes, err, bad.code)
			}
		}

		got, err := s.AuthenticateServiceKey(ctx, secret)
		if err != nil || got.ID != k.ID || !got.Has(users.ScopeGrantsCreate) || got.Has(users.ScopeFilesRead) {
			t.Fatalf("authenticate: %+v %v", got, err)
		}
		if got.LastUsedAt == nil || !got.LastUsedAt.Equal(models.Time(now)) {
			t.Fatalf("last used %v, want %v", got.LastUsedAt, models.Time(now))
		}
		// last_used_at moves at most once a minute.
		first := *got.LastUsedAt
		now = now.Add(30 * time.Second)
		s.AuthenticateServiceKey(ctx, secret)
		list, _ := s.ListServiceKeys(ctx)
		if len(list) != 1 || list[0].LastUsedAt == nil || !list[0].LastUsedAt.Equal(first) {
			t.Fatalf("after 30 s: %+v, want last use still %v", list, first)
		}
		now = now.Add(time.Minute)
		s.AuthenticateServiceKey(ctx, secret)
		list, _ = s.ListServiceKeys(ctx)
		if !list[0].LastUsedAt.Equal(models.Time(now)) {
			t.Fatalf("after 90 s: last use %v, want %v", list[0].LastUsedAt, models.Time(now))
		}

		_, userToken, err := s.Create(ctx, "alice", false)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"", users.ServiceKeyPrefix, secret + "x", userToken, strings.ToUpper(secret)} {
			if _, err := s.AuthenticateServiceKey(ctx, bad); !errors.Is(err, errkind.Unauthenticated) {
				t.Errorf("key %q: %v, want unauthenticated", bad, err)
			}
		}
		// A service key is no user's token.
		if _, err := s.Authenticate(ctx, secret); !errors.Is(err, errkind.Unauthenticated) {
			t.Errorf("service key as a user token: %v", err)
		}

		if err := s.RevokeServiceKey(ctx, k.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AuthenticateServiceKey(ctx, secret); !errors.Is(err, errkind.Unauthenticated) {
			t.Errorf("revoked key: %v", err)
		}
		if list, _ := s.ListServiceKeys(ctx); len(list) != 0 {
			t.Errorf("revoked key still listed: %+v", list)
		}
		for _, id := range []string{k.ID, "svk_missing"} {
			if err := s.RevokeServiceKey(ctx, id); !errors.Is(err, errkind.NotFound) {
				t.Errorf("revoke %s again: %v, want not found", id, err)
			}
		}
	})
}
