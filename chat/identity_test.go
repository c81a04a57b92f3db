package chat_test

import (
	"context"
	"testing"

	"github.com/ferry-io/ferry/chat"
	"github.com/ferry-io/ferry/internal/chattest"
	"github.com/ferry-io/ferry/internal/testenv"
)

// An id with a trailing space names nothing, on MySQL as on SQLite: with
// utf8mb4_bin (PAD SPACE) MariaDB matched "cnv_x " to "cnv_x", so a post
// to the padded id went through and stored its message under "cnv_x ",
// and a padded user id could be added as a member.
func TestPaddedIDsNameNothing(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		f := newFixture(t, db, chattest.Files{})
		ctx := context.Background()
		alice, bob := f.user(t, "alice", false), f.user(t, "bob", false)
		conv := must[chat.Conversation](t)(f.svc.CreateConversation(ctx, alice, "c"))
		padded := conv.ID + " "

		_, err := f.svc.Post(ctx, alice, padded, "hello", nil)
		wantErr(t, err, chat.ErrConversationNotFound)
		_, err = f.svc.Messages(ctx, alice, padded, 0, 0)
		wantErr(t, err, chat.ErrConversationNotFound)
		_, err = f.svc.AddMember(ctx, alice, padded, bob.ID)
		wantErr(t, err, chat.ErrConversationNotFound)
		_, err = f.svc.AddMember(ctx, alice, conv.ID, bob.ID+" ")
		wantErr(t, err, chat.ErrUserNotFound)
		_, err = f.svc.Recall(ctx, alice, padded, 1)
		wantErr(t, err, chat.ErrMessageNotFound)

		var stored int64
		db.Raw("SELECT COUNT(*) FROM messages WHERE conversation_id <> ?", conv.ID).Scan(&stored)
		if stored != 0 {
			t.Fatalf("%d messages stored under another conversation id", stored)
		}
	})
}
