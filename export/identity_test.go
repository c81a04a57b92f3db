package export

import (
	"context"
	"errors"
	"testing"

	"github.com/ferry-io/ferry/internal/testenv"
)

// Idempotency keys and ids that differ only in trailing spaces are other
// keys and other ids, on MySQL as on SQLite. utf8mb4_bin pads with spaces,
// so on MariaDB "abc " replayed the export of "abc" (and with another
// body got 422), and a padded export id found the export.
func TestIdentityIsByteExact(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil, Config{})
		ctx := context.Background()
		alice := e.user("alice", false)
		c, err := e.chat.CreateConversation(ctx, alice, "c")
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]string{}
		for _, k := range []string{"abc", "abc ", "abc  "} {
			scope := "all"
			if k == "abc " {
				scope = "conv:" + c.ID // another body: must not be "key reused"
			}
			v, replayed, err := e.svc.Create(ctx, alice.ID, k, Request{Scope: scope})
			if err != nil || replayed {
				t.Fatalf("key %q: %+v replayed=%v %v; want a new export", k, v, replayed, err)
			}
			for other, id := range ids {
				if id == v.ID {
					t.Fatalf("keys %q and %q made one export %s", other, k, id)
				}
			}
			ids[k] = v.ID
			again, replayed, err := e.svc.Create(ctx, alice.ID, k, Request{Scope: scope})
			if err != nil || !replayed || again.ID != v.ID {
				t.Fatalf("replay of %q: %+v replayed=%v %v", k, again, replayed, err)
			}
		}
		padded := ids["abc"] + " "
		if _, err := e.svc.Get(ctx, alice.ID, padded); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get(%q) = %v, want not found", padded, err)
		}
		if _, err := e.svc.Artifact(ctx, padded); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Artifact(%q) = %v, want not found", padded, err)
		}
		if _, err := e.svc.Revoke(ctx, alice.ID, padded); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Revoke(%q) = %v, want not found", padded, err)
		}
	})
}
