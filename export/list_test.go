package export

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ferry-io/ferry/internal/page"
	"github.com/ferry-io/ferry/internal/testenv"
)

// GET /exports pages newest first and honours limit; it used to return
// the newest 100 whatever was asked.
func TestListPages(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil, Config{})
		ctx := context.Background()
		alice, bob := e.user("alice", false), e.user("bob", false)
		var want []string
		for i := range 5 {
			want = append([]string{e.create(alice, fmt.Sprint("k", i), "all").ID}, want...)
		}
		e.create(bob, "k0", "all")
		var got []string
		cursor, pages := "", 0
		for {
			list, next, err := e.svc.List(ctx, alice.ID, cursor, 2)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			for _, v := range list {
				got = append(got, v.ID)
			}
			if next == "" {
				break
			}
			cursor = next
		}
		if fmt.Sprint(got) != fmt.Sprint(want) || pages != 3 {
			t.Fatalf("%d pages %v, want 3 pages %v", pages, got, want)
		}
		if all, next, err := e.svc.List(ctx, alice.ID, "", 0); len(all) != 5 || next != "" || err != nil {
			t.Fatalf("default page: %d exports, next %q, %v", len(all), next, err)
		}
		for _, bad := range []struct {
			cursor string
			limit  int
			err    error
		}{
			{"", page.MaxLimit + 1, page.ErrLimit},
			{"", -1, page.ErrLimit},
			{"bogus", 2, page.ErrCursor},
			{page.EncodeInt("conversations", 5), 2, page.ErrCursor},
		} {
			if _, _, err := e.svc.List(ctx, alice.ID, bad.cursor, bad.limit); !errors.Is(err, bad.err) {
				t.Errorf("List(%q, %d) = %v, want %v", bad.cursor, bad.limit, err, bad.err)
			}
		}
	})
}
