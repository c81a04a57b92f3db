package users_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/users"
)

func TestTokensSessionsAndDeactivation(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		ctx := context.Background()
		now := time.Now()
		s := testenv.Must(users.New(users.Config{DB: db.DB, Now: func() time.Time { return now }, SessionTTL: time.Hour}))

		u, tok, err := s.Create(ctx, "alice", false)
		if err != nil || !strings.HasPrefix(tok, users.TokenPrefix) {
			t.Fatalf("create: %v %q", err, tok)
		}
		// Only the hash is stored.
		var stored models.Token
		db.Where("user_id = ?", u.ID).Take(&stored)
		if stored.Hash == "" || strings.Contains(stored.Hash, tok[len(users.TokenPrefix):]) {
			t.Fatalf("token stored as %q", stored.Hash)
		}
		if got, err := s.Authenticate(ctx, tok); err != nil || got.ID != u.ID {
			t.Fatalf("authenticate: %v %v", got, err)
		}
		for _, bad := range []string{"", "fry_", tok + "x", strings.ToUpper(tok), "Bearer " + tok} {
			if _, err := s.Authenticate(ctx, bad); !errors.Is(err, errkind.Unauthenticated) {
				t.Errorf("token %q: %v, want unauthenticated", bad, err)
			}
		}
		if _, _, err := s.Create(ctx, "alice", true); !errors.Is(err, errkind.Conflict) {
			t.Errorf("duplicate name: %v", err)
		}
		for _, name := range []string{"", "a b", "../x", strings.Repeat("a", 65), "-lead"} {
			if _, _, err := s.Create(ctx, name, false); !errors.Is(err, errkind.Invalid) {
				t.Errorf("name %q: %v, want invalid", name, err)
			}
		}

		_, secret, expires, err := s.CreateSession(ctx, tok)
		if err != nil || !expires.After(now) {
			t.Fatalf("session: %v", err)
		}
		if got, err := s.SessionUser(ctx, secret); err != nil || got.ID != u.ID {
			t.Fatalf("session user: %v", err)
		}

		// Deactivation refuses the token and ends the session at once.
		if _, err := s.SetActive(ctx, u.ID, false); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Authenticate(ctx, tok); !errors.Is(err, errkind.Unauthenticated) {
			t.Errorf("deactivated token: %v", err)
		}
		if _, err := s.SessionUser(ctx, secret); !errors.Is(err, errkind.Unauthenticated) {
			t.Errorf("deactivated session: %v", err)
		}
		if ok, _ := s.IsActive(ctx, u.ID); ok {
			t.Error("IsActive true after deactivation")
		}
		if _, err := s.SetActive(ctx, u.ID, true); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Authenticate(ctx, tok); err != nil {
			t.Errorf("reactivated token: %v", err)
		}
		if _, err := s.SessionUser(ctx, secret); err == nil {
			t.Error("a session survived deactivation")
		}
		if _, err := s.SetActive(ctx, "usr_missing", false); !errors.Is(err, errkind.NotFound) {
			t.Errorf("unknown user: %v", err)
		}

		// Sessions expire.
		_, secret2, _, _ := s.CreateSession(ctx, tok)
		now = now.Add(2 * time.Hour)
		if _, err := s.SessionUser(ctx, secret2); !errors.Is(err, errkind.Unauthenticated) {
			t.Errorf("expired session: %v", err)
		}
	})
}

func TestBootstrapCreatesOneAdminOnce(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		ctx := context.Background()
		s := testenv.Must(users.New(users.Config{DB: db.DB, Now: time.Now, SessionTTL: time.Hour}))
		tok, err := s.Bootstrap(ctx)
		if err != nil || tok == "" {
			t.Fatalf("first bootstrap: %q %v", tok, err)
		}
		u, err := s.Authenticate(ctx, tok)
		if err != nil || !u.Admin || u.Name != "admin" {
			t.Fatalf("bootstrap user: %+v %v", u, err)
		}
		if tok2, err := s.Bootstrap(ctx); err != nil || tok2 != "" {
			t.Fatalf("second bootstrap: %q %v; want nothing", tok2, err)
		}
	})
}

// Expired sessions are deleted by the pruning job's query; live ones stay.
func TestExpiredSessionsArePruned(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		now := time.Now()
		clock := func() time.Time { return now }
		svc := testenv.Must(users.New(users.Config{DB: db.DB, Now: clock, SessionTTL: time.Hour}))
		ctx := context.Background()
		_, tok, err := svc.Create(ctx, "sam", false)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, _, _, err := svc.CreateSession(ctx, tok); err != nil {
				t.Fatal(err)
			}
		}
		now = now.Add(2 * time.Hour) // those three are expired now
		_, live, _, err := svc.CreateSession(ctx, tok)
		if err != nil {
			t.Fatal(err)
		}
		n, err := svc.PruneSessions(ctx)
		if err != nil || n != 3 {
			t.Fatalf("pruned %d (%v), want 3", n, err)
		}
		if _, err := svc.SessionUser(ctx, live); err != nil {
			t.Fatalf("the live session: %v", err)
		}
	})
}

// RotateToken: the new token authenticates, every old one is refused.
func TestRotateToken(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		ctx := context.Background()
		s := testenv.Must(users.New(users.Config{DB: db.DB, SessionTTL: time.Hour}))
		u, old, err := s.Create(ctx, "rotator", false)
		if err != nil {
			t.Fatal(err)
		}
		fresh, err := s.RotateToken(ctx, u.ID)
		if err != nil || fresh == old {
			t.Fatalf("rotate: %q %v", fresh, err)
		}
		if _, err := s.Authenticate(ctx, old); !errors.Is(err, errkind.Unauthenticated) {
			t.Errorf("old token after rotation: %v, want unauthenticated", err)
		}
		if got, err := s.Authenticate(ctx, fresh); err != nil || got.ID != u.ID {
			t.Errorf("new token: %v %v", got, err)
		}
		if _, err := s.RotateToken(ctx, "usr_nobody"); !errors.Is(err, errkind.NotFound) {
			t.Errorf("rotate for no user: %v, want not found", err)
		}
	})
}
