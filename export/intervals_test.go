package export

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/ferry-io/ferry/internal/chattest"
	"github.com/ferry-io/ferry/internal/testenv"
)

// A user who joined and left a conversation 5,000 times, with a message in
// each interval and one from someone else in each gap, exports exactly
// their 5,000 messages, conv: and all alike. With one OR term per interval
// the plan query failed on SQLite past about 1,000 intervals and every
// such export ended failed after its attempts.
func TestExportWithThousandsOfIntervals(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil, Config{ShardSize: 200, DeleteShards: true})
		ctx := context.Background()
		alice, bob := e.user("alice", false), e.user("bob", false)
		busy, err := e.chat.CreateConversation(ctx, alice, "busy")
		if err != nil {
			t.Fatal(err)
		}
		quiet, err := e.chat.CreateConversation(ctx, bob, "quiet")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.chat.Post(ctx, bob, quiet.ID, "quiet 1", nil); err != nil {
			t.Fatal(err)
		}
		const n = 5000
		seqs, err := chattest.Churn(ctx, db.DB, busy.ID, bob.ID, alice.ID, n)
		if err != nil {
			t.Fatal(err)
		}
		one := e.create(bob, "busy", "conv:"+busy.ID)
		all := e.create(bob, "all", "all")

		start := time.Now()
		e.start()
		x1 := e.wait(one.ID, 2*time.Minute, StateDone, StateFailed)
		x2 := e.wait(all.ID, 2*time.Minute, StateDone, StateFailed)
		t.Logf("%s: two exports through %d intervals (%d and %d messages) done in %s",
			db.Dialect, n, n, n+1, time.Since(start).Round(time.Millisecond))
		if x1.State != StateDone || x2.State != StateDone {
			t.Fatalf("states %s (%v), %s (%v)", x1.State, deref(x1.Error), x2.State, deref(x2.Error))
		}
		check := func(id string, convs map[string][]int64) {
			t.Helper()
			_, lines := artifactLines(t, e.store.Bucket(), id)
			got := map[string][]int64{}
			for _, raw := range lines {
				var l line
				if err := json.Unmarshal(raw, &l); err != nil {
					t.Fatal(err)
				}
				if l.Sender != bob.ID {
					t.Fatalf("export %s holds %s's message %d, written while bob was away", id, l.Sender, l.Seq)
				}
				got[l.Conv] = append(got[l.Conv], l.Seq)
			}
			if fmt.Sprint(got) != fmt.Sprint(convs) {
				t.Fatalf("export %s holds %d conversations, %d lines; want %v", id, len(got), len(lines), map[string]int{busy.ID: n})
			}
		}
		check(one.ID, map[string][]int64{busy.ID: seqs})
		check(all.ID, map[string][]int64{busy.ID: seqs, quiet.ID: {1}})
	})
}
