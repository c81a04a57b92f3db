package models_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
)

// Migration 0011 fills user_conversations from the memberships already
// there: one row per user and conversation, however many intervals.
func TestUserConversationsBackfill(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		ctx := context.Background()
		var backfill string
		migs, _ := models.Migrations()
		for _, m := range migs {
			stmts, err := m.Render(db.Dialect)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range stmts {
				if strings.HasPrefix(s, "INSERT INTO user_conversations") {
					backfill = s
				}
			}
		}
		if backfill == "" {
			t.Fatal("no migration fills user_conversations")
		}
		for _, q := range []string{
			"INSERT INTO conversations (id, title, created_by, created_gseq, last_seq, created_at) VALUES ('cnv_a', 'a', 'usr_1', 1, 0, '2026-01-01'), ('cnv_b', 'b', 'usr_2', 4, 0, '2026-01-01')",
			"INSERT INTO memberships (conversation_id, user_id, join_gseq, leave_gseq, added_by, created_at) VALUES " +
				"('cnv_a', 'usr_1', 1, NULL, 'usr_1', '2026-01-01'), ('cnv_a', 'usr_2', 2, 3, 'usr_1', '2026-01-01'), " +
				"('cnv_a', 'usr_2', 5, NULL, 'usr_1', '2026-01-01'), ('cnv_b', 'usr_2', 4, NULL, 'usr_2', '2026-01-01')",
			backfill,
		} {
			if err := db.WithContext(ctx).Exec(q).Error; err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		var rows []models.UserConversation
		db.Order("user_id, conversation_id").Find(&rows)
		want := []models.UserConversation{{"usr_1", "cnv_a", 1}, {"usr_2", "cnv_a", 1}, {"usr_2", "cnv_b", 4}}
		if len(rows) != len(want) {
			t.Fatalf("rows %+v, want %+v", rows, want)
		}
		for i := range want {
			if rows[i] != want[i] {
				t.Fatalf("rows %+v, want %+v", rows, want)
			}
		}
	})
}
