package users_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/users"
)

func countUsers(t *testing.T, db *testenv.DB) int64 {
	t.Helper()
	var n int64
	if err := db.Model(&models.User{}).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// A host app's user is created on first sight, once for (issuer, subject)
// however many requests race, follows the name and admin claims, and is
// stopped by deactivation in ferry.
func TestExternalUsers(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		ctx := context.Background()
		s := testenv.Must(users.New(users.Config{DB: db.DB, Now: time.Now, SessionTTL: time.Hour}))
		// A ferry user may hold the name a host app's user claims: names
		// of external users need not be unique.
		if _, _, err := s.Create(ctx, "Ada", false); err != nil {
			t.Fatal(err)
		}
		yes, no := true, false
		id := users.Identity{Issuer: "https://app.example.test/", Subject: "42", Name: "Ada"}

		const racers = 16
		got := make([]users.User, racers)
		errs := make([]error, racers)
		var wg sync.WaitGroup
		for i := range racers {
			wg.Go(func() { got[i], errs[i] = s.External(ctx, id) })
		}
		wg.Wait()
		for i := range racers {
			if errs[i] != nil || got[i].ID != got[0].ID {
				t.Fatalf("racer %d: %+v %v; want %s", i, got[i], errs[i], got[0].ID)
			}
		}
		u := got[0]
		if u.Name != "Ada" || u.Issuer != id.Issuer || u.Subject != "42" || u.Admin || !u.Active {
			t.Fatalf("external user %+v", u)
		}
		if n := countUsers(t, db); n != 2 {
			t.Fatalf("%d users, want 2", n)
		}
		// The same subject under another issuer is someone else.
		other, err := s.External(ctx, users.Identity{Issuer: "https://other.example.test/", Subject: "42"})
		if err != nil || other.ID == u.ID || other.Name != "42" {
			t.Fatalf("other issuer: %+v %v", other, err)
		}

		// Claims win on each sign-in: name, and admin when configured.
		u2, err := s.External(ctx, users.Identity{Issuer: id.Issuer, Subject: "42", Name: "Ada L.", Admin: &yes})
		if err != nil || u2.ID != u.ID || u2.Name != "Ada L." || !u2.Admin {
			t.Fatalf("after new claims: %+v %v", u2, err)
		}
		if g, _ := s.Get(ctx, u.ID); g.Name != "Ada L." || !g.Admin {
			t.Fatalf("stored: %+v", g)
		}
		if u3, _ := s.External(ctx, users.Identity{Issuer: id.Issuer, Subject: "42", Name: "Ada L.", Admin: &no}); u3.Admin {
			t.Fatal("admin claim false left the user an admin")
		}
		if u4, _ := s.External(ctx, users.Identity{Issuer: id.Issuer, Subject: "42", Name: "Ada L."}); u4.Admin {
			t.Fatal("no admin claim configured made the user an admin")
		}
		if b, err := s.BySubject(ctx, id.Issuer, "42"); err != nil || b.ID != u.ID {
			t.Fatalf("by subject: %+v %v", b, err)
		}
		if _, err := s.BySubject(ctx, id.Issuer, "43"); !errors.Is(err, errkind.NotFound) {
			t.Fatalf("unknown subject: %v", err)
		}

		if _, err := s.SetActive(ctx, u.ID, false); err != nil {
			t.Fatal(err)
		}
		_, err = s.External(ctx, id)
		wantCode(t, err, errkind.Unauthenticated, "user_deactivated")
		if ok, _ := s.IsActive(ctx, u.ID); ok {
			t.Fatal("a deactivated user's token reactivated them")
		}
		s.SetActive(ctx, u.ID, true)
		if again, err := s.External(ctx, id); err != nil || again.ID != u.ID {
			t.Fatalf("reactivated: %+v %v", again, err)
		}
	})
}
