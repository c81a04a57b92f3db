package chat_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ferry-io/ferry/chat"
	"github.com/ferry-io/ferry/internal/chattest"
	"github.com/ferry-io/ferry/internal/testenv"
)

// A member who joined and left 5,000 times reads exactly the messages of
// their intervals, page by page; the other member reads everything. With
// one OR term per interval, SQLite refused the query past about 1,000
// intervals ("Expression tree is too large") and the read answered 500.
func TestThousandsOfMembershipIntervals(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		f := newFixture(t, db, chattest.Files{})
		ctx := context.Background()
		alice, bob := f.user(t, "alice", false), f.user(t, "bob", false)
		conv := must[chat.Conversation](t)(f.svc.CreateConversation(ctx, alice, "busy"))
		const n = 5000
		want, err := chattest.Churn(ctx, db.DB, conv.ID, bob.ID, alice.ID, n)
		if err != nil {
			t.Fatal(err)
		}
		// Bob is back for good: one more, open interval.
		must[int64](t)(f.svc.AddMember(ctx, alice, conv.ID, bob.ID))
		last := must[chat.Message](t)(f.svc.Post(ctx, bob, conv.ID, "back", nil))
		want = append(want, last.Seq)

		start := time.Now()
		var got []int64
		for after := int64(0); ; {
			page := must[[]chat.Message](t)(f.svc.Messages(ctx, bob, conv.ID, after, chat.MaxPageSize))
			if len(page) == 0 {
				break
			}
			for _, m := range page {
				got = append(got, m.Seq)
			}
			after = page[len(page)-1].Seq
		}
		t.Logf("%s: bob read %d messages through %d intervals in %s", db.Dialect, len(got), n+1, time.Since(start).Round(time.Millisecond))
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("bob sees %d messages, want %d (his own, one per interval)", len(got), len(want))
		}
		if all := must[[]chat.Message](t)(f.svc.Messages(ctx, alice, conv.ID, 0, chat.MaxPageSize)); len(all) != chat.MaxPageSize {
			t.Fatalf("alice reads %d messages, want a full page", len(all))
		}
		var seqs []int64
		err = chat.VisibleSeqs(ctx, db.DB, chat.Range{Conversation: conv.ID, Reader: chat.Member(bob.ID)}, func(seq int64) error {
			seqs = append(seqs, seq)
			return nil
		})
		if err != nil || fmt.Sprint(seqs) != fmt.Sprint(want) {
			t.Fatalf("VisibleSeqs: %d seqs (%v), want %d", len(seqs), err, len(want))
		}
	})
}

// ReadSpan answers what ReadMessages does over the same seq range, for a
// reader with many intervals and one with a single open one, now and as
// of snapshots that fall inside intervals, with recalls and attachments.
func TestReadSpanMatchesReadMessages(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		ctx := context.Background()
		f := newFixture(t, db, nil)
		alice, bob := f.user(t, "alice", false), f.user(t, "bob", false)
		f = newFixture(t, db, chattest.Files{"fil_a": alice.ID, "fil_b": alice.ID})
		conv := must[chat.Conversation](t)(f.svc.CreateConversation(ctx, alice, "span"))
		var snaps []int64
		for round := range 3 {
			if _, err := chattest.Churn(ctx, db.DB, conv.ID, bob.ID, alice.ID, 40); err != nil {
				t.Fatal(err)
			}
			for i := range 6 {
				var files []string
				if i%2 == 0 {
					files = []string{"fil_a", "fil_b"}
				}
				m := must[chat.Message](t)(f.svc.Post(ctx, alice, conv.ID, fmt.Sprintf("r%d m%d", round, i), files))
				if i == 3 {
					must[int64](t)(f.svc.Recall(ctx, alice, conv.ID, m.Seq))
				}
			}
			snaps = append(snaps, must[int64](t)(chat.Snapshot(ctx, db.DB)))
		}
		var last int64
		db.Raw("SELECT last_seq FROM conversations WHERE id = ?", conv.ID).Scan(&last)
		checked := 0
		for _, reader := range []chat.Reader{chat.Member(bob.ID), chat.Member(alice.ID)} {
			for _, asOf := range append([]int64{0}, snaps[0], snaps[1]-7) {
				for _, span := range [][2]int64{{1, last}, {5, 60}, {61, 130}, {last - 10, last}} {
					r := chat.Range{Conversation: conv.ID, Reader: reader, AsOf: asOf, FromSeq: span[0], ToSeq: span[1]}
					want := must[[]chat.Message](t)(chat.ReadMessages(ctx, db.DB, r))
					got := must[[]chat.Message](t)(chat.ReadSpan(ctx, db.DB, r))
					if fmt.Sprint(got) != fmt.Sprint(want) {
						t.Fatalf("%+v: ReadSpan gave %d messages, ReadMessages %d:\n%v\n%v", r, len(got), len(want), got, want)
					}
					checked += len(want)
				}
			}
		}
		if checked < 500 {
			t.Fatalf("only %d messages compared", checked)
		}
		if _, err := chat.ReadSpan(ctx, db.DB, chat.Range{Conversation: conv.ID, Reader: chat.Member(bob.ID)}); err == nil {
			t.Fatal("ReadSpan without a seq range: no error")
		}
	})
}
