package chat

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/internal/chattest"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/users"
)

// Every statement that reads messages for a reader runs on an index, in
// the index's order: the intervals by (key, conversation, join), the
// messages by their primary key (conversation, seq), whatever the number
// of intervals.
func TestReadPlansUseIndexes(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		ctx := context.Background()
		us := testenv.Must(users.New(users.Config{DB: db.DB, Now: time.Now, SessionTTL: time.Hour}))
		a, _, _ := us.Create(ctx, "alice", false)
		b, _, _ := us.Create(ctx, "bob", false)
		svc := testenv.Must(New(Config{DB: db.DB, Files: chattest.Files{}}))
		conv, err := svc.CreateConversation(ctx, Actor{ID: a.ID}, "plans")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := chattest.Churn(ctx, db.DB, conv.ID, b.ID, a.ID, 100); err != nil {
			t.Fatal(err)
		}
		// Other people's history, so the reader's rows are a small part of
		// each table, as in production; on a table of only the reader's
		// rows a full scan is the right plan.
		for i := range 8 {
			o, _, _ := us.Create(ctx, fmt.Sprintf("other%d", i), false)
			c, err := svc.CreateConversation(ctx, Actor{ID: a.ID}, "other")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := chattest.Churn(ctx, db.DB, c.ID, o.ID, a.ID, 400); err != nil {
				t.Fatal(err)
			}
			for seq := int64(2); seq <= 40; seq += 2 { // some of alice's messages recalled
				if _, err := svc.Recall(ctx, Actor{ID: a.ID}, c.ID, seq); err != nil {
					t.Fatal(err)
				}
			}
		}
		testenv.Analyze(t, db, "memberships", "messages", "recalls")
		for _, r := range []Range{
			{Conversation: conv.ID, Reader: Member(b.ID)},
			{Conversation: conv.ID, Reader: Member(b.ID), AsOf: 500, FromSeq: 10, ToSeq: 210},
			{Conversation: conv.ID, Reader: StoredIntervals("export_permissions", "export_id", "exp_x"), AsOf: 900},
		} {
			ivs, err := r.intervals(ctx, db.DB)
			if err != nil {
				t.Fatal(err)
			}
			if r.Reader.table == "memberships" && r.AsOf == 0 && len(ivs) != 100 {
				t.Fatalf("%d intervals, want 100", len(ivs))
			}
			if len(ivs) == 0 {
				ivs = []Interval{{Join: 1, Leave: 50}, {Join: 60}}
			}
			where, args := r.bounds(ivs)
			span := strings.TrimPrefix(where, "m.conversation_id = ? AND ")
			qs := map[string][]any{
				readQuery() + span + " ORDER BY m.seq": append([]any{r.Conversation}, args[1:]...), // ReadSpan
				fmt.Sprintf("SELECT join_gseq, leave_gseq FROM %s WHERE %s = ? AND conversation_id = ? ORDER BY join_gseq", r.Reader.table, r.Reader.column): {r.Reader.key, r.Conversation},
				scanQuery(db.DB, r, ivs):                             append(args, int64(3)),
				readQuery() + "m.seq BETWEEN ? AND ? ORDER BY m.seq": {r.Conversation, int64(5), int64(25)},
				readQuery() + "m.seq IN ? ORDER BY m.seq":            {r.Conversation, []int64{5, 9, 77}},
			}
			rq, rargs := recallQuery(r, 5, 250)
			qs[rq] = rargs
			for q, args := range qs {
				plan, bad := testenv.Explain(t, db, q, args...)
				t.Logf("%s\n    %s", q, plan)
				if bad {
					t.Errorf("%s: the plan scans a table or sorts: %s", q, plan)
				}
			}
		}
	})
}

// A page of GET /conversations walks the conversations by the index on
// their creating gseq, or the caller's memberships by theirs; either way
// no table is scanned.
func TestConversationPagePlan(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		ctx := context.Background()
		us := testenv.Must(users.New(users.Config{DB: db.DB, Now: time.Now, SessionTTL: time.Hour}))
		svc := testenv.Must(New(Config{DB: db.DB, Files: chattest.Files{}}))
		var people []Actor
		for i := range 20 {
			u, _, err := us.Create(ctx, fmt.Sprintf("u%d", i), false)
			if err != nil {
				t.Fatal(err)
			}
			people = append(people, Actor{ID: u.ID})
		}
		for i := range 200 {
			if _, err := svc.CreateConversation(ctx, people[i%len(people)], fmt.Sprint("c", i)); err != nil {
				t.Fatal(err)
			}
		}
		testenv.Analyze(t, db, "conversations", "memberships")
		for _, after := range []int64{0, 150} {
			sql := db.ToSQL(func(tx *gorm.DB) *gorm.DB {
				return conversationPage(tx, people[3].ID, after, 5).Find(&[]models.Conversation{})
			})
			plan, bad := testenv.Explain(t, db, sql)
			t.Logf("%s\n    %s", sql, plan)
			if bad {
				t.Errorf("the page query scans or sorts: %s", plan)
			}
		}
	})
}
