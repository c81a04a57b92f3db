package chat_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ferry-io/ferry/chat"
	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/chattest"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/users"
)

type fixture struct {
	svc   *chat.Service
	users *users.Service
	db    *testenv.DB
}

func newFixture(t *testing.T, db *testenv.DB, files chat.Files) *fixture {
	if files == nil {
		files = chattest.Files{}
	}
	return &fixture{svc: testenv.Must(chat.New(chat.Config{DB: db.DB, Files: files})), users: testenv.Must(users.New(users.Config{DB: db.DB, Now: time.Now, SessionTTL: time.Hour})), db: db}
}

func (f *fixture) user(t *testing.T, name string, admin bool) chat.Actor {
	t.Helper()
	u, _, err := f.users.Create(context.Background(), name, admin)
	if err != nil {
		t.Fatal(err)
	}
	return chat.Actor{ID: u.ID, Admin: admin}
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func wantErr(t *testing.T, err error, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("err = %v, want %v", err, want)
	}
}

func bodies(ms []chat.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Body
		if m.Recalled {
			out[i] = "<recalled>"
		}
	}
	return out
}

// A member sees a conversation only inside their membership intervals; a
// leave and a re-join make two intervals; people who never joined see
// nothing, and only current members post.
func TestMembershipIntervals(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		f := newFixture(t, db, chattest.Files{})
		ctx := context.Background()
		alice, bob, carol := f.user(t, "alice", false), f.user(t, "bob", false), f.user(t, "carol", false)
		root := f.user(t, "root", true)

		conv := must[chat.Conversation](t)(f.svc.CreateConversation(ctx, alice, "  team  "))
		if conv.Title != "team" || !conv.Member || conv.JoinGseq == 0 {
			t.Fatalf("created %+v", conv)
		}
		post := func(a chat.Actor, body string) chat.Message {
			t.Helper()
			return must[chat.Message](t)(f.svc.Post(ctx, a, conv.ID, body, nil))
		}
		post(alice, "a1")
		join1 := must[int64](t)(f.svc.AddMember(ctx, alice, conv.ID, bob.ID))
		m2 := post(bob, "b2")
		if m2.Seq != 2 || m2.Gseq <= join1 {
			t.Fatalf("second message seq %d gseq %d (join %d)", m2.Seq, m2.Gseq, join1)
		}
		leave := must[int64](t)(f.svc.RemoveMember(ctx, bob, conv.ID, bob.ID))
		post(alice, "a3 while bob is away")
		_, err := f.svc.Post(ctx, bob, conv.ID, "bob after leaving", nil)
		wantErr(t, err, chat.ErrNotMember)
		must[int64](t)(f.svc.AddMember(ctx, alice, conv.ID, bob.ID))
		post(alice, "a4")

		got := must[[]chat.Message](t)(f.svc.Messages(ctx, bob, conv.ID, 0, 0))
		if want := []string{"b2", "a4"}; fmt.Sprint(bodies(got)) != fmt.Sprint(want) {
			t.Fatalf("bob sees %v, want %v (a1 before his join, a3 between leave %d and re-join)", bodies(got), want, leave)
		}
		all := must[[]chat.Message](t)(f.svc.Messages(ctx, alice, conv.ID, 0, 0))
		if len(all) != 4 || all[3].Seq != 4 {
			t.Fatalf("alice sees %v", bodies(all))
		}
		page := must[[]chat.Message](t)(f.svc.Messages(ctx, alice, conv.ID, 1, 2))
		if fmt.Sprint(bodies(page)) != "[b2 a3 while bob is away]" {
			t.Fatalf("page after 1, limit 2 = %v", bodies(page))
		}

		// Never a member: the conversation does not exist for carol.
		_, err = f.svc.Messages(ctx, carol, conv.ID, 0, 0)
		wantErr(t, err, chat.ErrConversationNotFound)
		_, err = f.svc.Post(ctx, carol, conv.ID, "hi", nil)
		wantErr(t, err, chat.ErrConversationNotFound)
		_, err = f.svc.AddMember(ctx, carol, conv.ID, carol.ID)
		wantErr(t, err, chat.ErrConversationNotFound)

		// Removing: yourself, or an admin; not another member.
		_, err = f.svc.RemoveMember(ctx, bob, conv.ID, alice.ID)
		wantErr(t, err, chat.ErrNotSelf)
		_, err = f.svc.AddMember(ctx, alice, conv.ID, bob.ID)
		wantErr(t, err, chat.ErrAlreadyMember)
		_, err = f.svc.AddMember(ctx, alice, conv.ID, "usr_nobody")
		wantErr(t, err, chat.ErrUserNotFound)
		must[int64](t)(f.svc.RemoveMember(ctx, root, conv.ID, bob.ID))
		_, err = f.svc.RemoveMember(ctx, root, conv.ID, bob.ID)
		wantErr(t, err, chat.ErrMemberNotFound)
		_, err = f.svc.RemoveMember(ctx, root, "cnv_missing", bob.ID)
		wantErr(t, err, chat.ErrConversationNotFound)

		// Bob, gone again, still sees what he saw, and lists the
		// conversation as a former member.
		if got := must[[]chat.Message](t)(f.svc.Messages(ctx, bob, conv.ID, 0, 0)); len(got) != 2 {
			t.Fatalf("after removal bob sees %v", bodies(got))
		}
		list, _, err := f.svc.Conversations(ctx, bob, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || list[0].Member {
			t.Fatalf("bob's conversations: %+v", list)
		}

		// The intervals as of a snapshot ignore later joins and leaves.
		ivs := must[[]chat.ConversationIntervals](t)(chat.Intervals(ctx, db.DB, bob.ID, conv.ID, leave))
		if len(ivs) != 1 || fmt.Sprint(ivs[0].Intervals) != fmt.Sprintf("[{%d %d}]", join1, leave) {
			t.Fatalf("bob's intervals as of %d: %+v", leave, ivs)
		}
		ivs = must[[]chat.ConversationIntervals](t)(chat.Intervals(ctx, db.DB, bob.ID, conv.ID, leave-1))
		if fmt.Sprint(ivs[0].Intervals) != fmt.Sprintf("[{%d 0}]", join1) {
			t.Fatalf("bob's intervals as of %d (before his leave): %+v", leave-1, ivs)
		}
	})
}

// The sender or an admin may recall; a recalled message keeps its place
// with no body and no attachments; recalling twice answers the first gseq.
func TestRecallAndAttachments(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		f := newFixture(t, db, nil)
		alice, bob := f.user(t, "alice", false), f.user(t, "bob", false)
		root, carol := f.user(t, "root", true), f.user(t, "carol", false)
		f.svc = testenv.Must(chat.New(chat.Config{DB: db.DB, Files: chattest.Files{"fil_a1": alice.ID, "fil_a2": alice.ID, "fil_b1": bob.ID}}))
		ctx := context.Background()
		conv := must[chat.Conversation](t)(f.svc.CreateConversation(ctx, alice, "files"))
		must[int64](t)(f.svc.AddMember(ctx, alice, conv.ID, bob.ID))

		m1 := must[chat.Message](t)(f.svc.Post(ctx, alice, conv.ID, "two files", []string{"fil_a2", "fil_a1"}))
		m2 := must[chat.Message](t)(f.svc.Post(ctx, bob, conv.ID, "", []string{"fil_b1"}))
		_, err := f.svc.Post(ctx, bob, conv.ID, "not mine", []string{"fil_a1"})
		if !errors.Is(err, errkind.NotFound) {
			t.Fatalf("someone else's file: %v, want not found", err)
		}

		_, err = f.svc.Recall(ctx, bob, conv.ID, m1.Seq)
		wantErr(t, err, chat.ErrNotSender)
		_, err = f.svc.Recall(ctx, carol, conv.ID, m1.Seq)
		wantErr(t, err, chat.ErrMessageNotFound)
		_, err = f.svc.Recall(ctx, alice, conv.ID, 99)
		wantErr(t, err, chat.ErrMessageNotFound)
		r1 := must[int64](t)(f.svc.Recall(ctx, alice, conv.ID, m1.Seq))
		if again := must[int64](t)(f.svc.Recall(ctx, alice, conv.ID, m1.Seq)); again != r1 {
			t.Fatalf("second recall gseq %d, want the first's %d", again, r1)
		}
		if snap := must[int64](t)(chat.Snapshot(ctx, db.DB)); snap != r1 {
			t.Fatalf("a repeated recall allocated a gseq: counter %d, recall %d", snap, r1)
		}
		must[int64](t)(f.svc.Recall(ctx, root, conv.ID, m2.Seq)) // admins recall anyone's

		got := must[[]chat.Message](t)(f.svc.Messages(ctx, bob, conv.ID, 0, 0))
		for _, m := range got {
			if !m.Recalled || m.Body != "" || len(m.Attachments) != 0 {
				t.Fatalf("recalled message shows %+v", m)
			}
		}
		// As of a snapshot before the recall, the message is whole.
		old := must[[]chat.Message](t)(chat.ReadMessages(ctx, db.DB, chat.Range{
			Conversation: conv.ID, Reader: chat.Member(alice.ID), AsOf: r1 - 1,
		}))
		if len(old) != 2 || old[0].Recalled || old[0].Body != "two files" || fmt.Sprint(old[0].Attachments) != "[fil_a2 fil_a1]" {
			t.Fatalf("as of before the recall: %+v", old)
		}
		if fmt.Sprint(old[1].Attachments) != "[fil_b1]" {
			t.Fatalf("attachment-only message: %+v", old[1])
		}
	})
}

func TestBadInput(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		f := newFixture(t, db, chattest.Files{})
		ctx := context.Background()
		alice := f.user(t, "alice", false)
		conv := must[chat.Conversation](t)(f.svc.CreateConversation(ctx, alice, "x"))
		many := make([]string, chat.MaxAttachments+1)
		for i := range many {
			many[i] = fmt.Sprintf("fil_%d", i)
		}
		for _, tc := range []struct {
			name string
			run  func() error
			code string
		}{
			{"empty title", func() error { _, err := f.svc.CreateConversation(ctx, alice, " "); return err }, "invalid_title"},
			{"long title", func() error {
				_, err := f.svc.CreateConversation(ctx, alice, strings.Repeat("t", chat.MaxTitleLen+1))
				return err
			}, "invalid_title"},
			{"control in title", func() error { _, err := f.svc.CreateConversation(ctx, alice, "a\x07b"); return err }, "invalid_title"},
			{"empty message", func() error { _, err := f.svc.Post(ctx, alice, conv.ID, "  ", nil); return err }, "empty_message"},
			{"long body", func() error {
				_, err := f.svc.Post(ctx, alice, conv.ID, strings.Repeat("b", chat.MaxBodyBytes+1), nil)
				return err
			}, "body_too_long"},
			{"invalid utf-8", func() error { _, err := f.svc.Post(ctx, alice, conv.ID, "\xff", nil); return err }, "invalid_body"},
			{"too many attachments", func() error { _, err := f.svc.Post(ctx, alice, conv.ID, "x", many); return err }, "too_many_attachments"},
			{"duplicate attachment", func() error {
				_, err := f.svc.Post(ctx, alice, conv.ID, "x", []string{"fil_1", "fil_1"})
				return err
			}, "invalid_attachments"},
			{"bad page", func() error { _, err := f.svc.Messages(ctx, alice, conv.ID, 0, chat.MaxPageSize+1); return err }, "invalid_page"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var e *errkind.Error
				if err := tc.run(); !errors.As(err, &e) || e.Code != tc.code {
					t.Fatalf("err = %v, want code %s", err, tc.code)
				}
			})
		}
		if n := must[int64](t)(chat.Snapshot(ctx, db.DB)); n != 1 {
			t.Fatalf("refused writes moved the counter to %d", n)
		}
	})
}

// Seed writes the data set it reports, through the gseq counter: every
// gseq at or below the counter is used exactly once, and every message was
// sent by a member at the time.
func TestSeed(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		f := newFixture(t, db, chattest.Files{})
		ctx := context.Background()
		var ids []string
		for i := range 5 {
			ids = append(ids, f.user(t, fmt.Sprintf("u%d", i), false).ID)
		}
		rep := must[chat.SeedReport](t)(chat.Seed(ctx, db.DB, chat.SeedOptions{Users: ids, Conversations: 3, Messages: 3000, Seed: 7, Batch: 700}))
		if rep.Messages != 3000 || rep.Leaves == 0 || rep.Joins == 0 || rep.Recalls == 0 {
			t.Fatalf("report %+v: want leaves, joins and recalls", rep)
		}
		var n struct{ Messages, Recalls, Memberships, Convs, MaxSeq int64 }
		db.Raw("SELECT COUNT(*) FROM messages").Scan(&n.Messages)
		db.Raw("SELECT COUNT(*) FROM recalls").Scan(&n.Recalls)
		db.Raw("SELECT COUNT(*) FROM memberships").Scan(&n.Memberships)
		db.Raw("SELECT SUM(last_seq) FROM conversations").Scan(&n.MaxSeq)
		if n.Messages != 3000 || n.Recalls != int64(rep.Recalls) || n.MaxSeq != 3000 {
			t.Fatalf("database has %+v for report %+v", n, rep)
		}
		// Each gseq once: conversations, messages, joins (the founding
		// ones share their conversation's gseq), leaves and recalls.
		var used int64
		db.Raw(`SELECT (SELECT COUNT(*) FROM conversations) + (SELECT COUNT(*) FROM messages) + (SELECT COUNT(*) FROM recalls)
			+ (SELECT COUNT(*) FROM memberships m JOIN conversations c ON c.id = m.conversation_id WHERE m.join_gseq <> c.created_gseq)
			+ (SELECT COUNT(*) FROM memberships WHERE leave_gseq IS NOT NULL)`).Scan(&used)
		if snap := must[int64](t)(chat.Snapshot(ctx, db.DB)); used != snap || snap != rep.LastGseq {
			t.Fatalf("%d writes, counter %d, report %d: every gseq must be used once", used, snap, rep.LastGseq)
		}
		var strays int64
		db.Raw(`SELECT COUNT(*) FROM messages m WHERE NOT EXISTS (SELECT 1 FROM memberships s
			WHERE s.conversation_id = m.conversation_id AND s.user_id = m.sender_id
			AND s.join_gseq <= m.gseq AND (s.leave_gseq IS NULL OR s.leave_gseq > m.gseq))`).Scan(&strays)
		if strays != 0 {
			t.Fatalf("%d messages were sent by non-members", strays)
		}
		var firstUserConvs int64
		db.Model(&models.Membership{}).Where("user_id = ?", ids[0]).Distinct("conversation_id").Count(&firstUserConvs)
		if firstUserConvs != 3 {
			t.Fatalf("the first user is in %d conversations, want all 3", firstUserConvs)
		}
	})
}

// GET /conversations pages newest first: complete, without repeats, and
// undisturbed by conversations created between two pages; a user's list
// holds each conversation once however often they joined it.
func TestConversationsPage(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		f := newFixture(t, db, chattest.Files{})
		ctx := context.Background()
		alice, bob := f.user(t, "alice", false), f.user(t, "bob", false)
		var want []string // newest first
		for i := range 7 {
			c := must[chat.Conversation](t)(f.svc.CreateConversation(ctx, alice, fmt.Sprint("c", i)))
			want = append([]string{c.ID}, want...)
		}
		// bob: in the newest, left and came back to the third, left the fifth.
		for _, i := range []int{0, 2, 4} {
			must[int64](t)(f.svc.AddMember(ctx, alice, want[i], bob.ID))
		}
		must[int64](t)(f.svc.RemoveMember(ctx, bob, want[2], bob.ID))
		must[int64](t)(f.svc.AddMember(ctx, alice, want[2], bob.ID))
		must[int64](t)(f.svc.RemoveMember(ctx, bob, want[4], bob.ID))

		read := func(a chat.Actor, limit int, between func()) (ids []string, member []bool) {
			t.Helper()
			cursor := ""
			for range 20 {
				list, next, err := f.svc.Conversations(ctx, a, cursor, limit)
				if err != nil {
					t.Fatal(err)
				}
				if len(list) > limit {
					t.Fatalf("page of %d, limit %d", len(list), limit)
				}
				for _, c := range list {
					ids, member = append(ids, c.ID), append(member, c.Member)
				}
				if next == "" {
					return ids, member
				}
				cursor = next
				between()
			}
			t.Fatal("no last page")
			return nil, nil
		}
		var created []string
		got, _ := read(alice, 3, func() {
			c := must[chat.Conversation](t)(f.svc.CreateConversation(ctx, alice, "between pages"))
			created = append(created, c.ID)
		})
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("alice's pages %v, want %v (created meanwhile: %v)", got, want, created)
		}
		got, member := read(bob, 2, func() {})
		if fmt.Sprint(got) != fmt.Sprint([]string{want[0], want[2], want[4]}) || fmt.Sprint(member) != "[true true false]" {
			t.Fatalf("bob's list %v member %v", got, member)
		}

		_, _, err := f.svc.Conversations(ctx, alice, "bogus", 3)
		wantErr(t, err, errkind.Invalid)
		_, _, err = f.svc.Conversations(ctx, alice, "", 1001)
		wantErr(t, err, errkind.Invalid)
	})
}
