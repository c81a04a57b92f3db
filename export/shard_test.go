package export

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ferry-io/ferry/chat"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
)

// A shard's size is known before it is rendered, escapes included (the
// lineLens of its messages, by which the producer also decides who
// renders it): render fills one buffer of that size, with encoding/json's
// bytes, line for line.
func TestRenderSizesItsBuffer(t *testing.T) {
	s := &Service{}
	at := time.Date(2026, 11, 29, 16, 16, 9, 219087000, time.UTC)
	msg := func(i int, body string, atts ...string) chat.Message {
		return chat.Message{Conversation: "cnv_0123456789abcdefghijklmn", Seq: int64(i + 1), Gseq: int64(1_000_000_007 * (i + 1)),
			Sender: "usr_0123456789abcdefghijklmn", Body: body, Attachments: atts, SentAt: at.Add(time.Duration(i) * time.Second)}
	}
	plain := []chat.Message{msg(0, "hello"), msg(1, "", "fil_a", "fil_bb"), msg(2, "ünïcode ✓ and more text"), {Conversation: "c", Seq: 9, Gseq: 10, Sender: "u", Recalled: true, SentAt: at}}
	for i := range 200 {
		plain = append(plain, msg(i+3, fmt.Sprintf("message %d", i)))
	}
	escaped := []chat.Message{msg(0, "quote \" backslash \\ tab \t newline \n"), msg(1, "<html> & \u2028 \x01 \xff"), msg(2, "plain")}
	for _, c := range []struct {
		name string
		msgs []chat.Message
	}{{"plain", plain}, {"escaped", escaped}} {
		t.Run(c.name, func(t *testing.T) {
			b, err := s.render(models.Export{ID: "exp_x"}, models.ExportShard{Messages: len(c.msgs)}, c.msgs, linesLen(c.msgs))
			if err != nil {
				t.Fatal(err)
			}
			if cap(b) != len(b) {
				t.Fatalf("%d bytes in a buffer of %d: the size is off", len(b), cap(b))
			}
			var want bytes.Buffer
			for _, m := range c.msgs {
				want.Write(jsonLine(t, m))
			}
			if !bytes.Equal(b, want.Bytes()) {
				t.Fatalf("rendered\n%s\nwant\n%s", b, want.Bytes())
			}
		})
	}
	if digits(0) != 1 || digits(9) != 1 || digits(10) != 2 || digits(-10) != 3 || digits(1<<62) != 19 {
		t.Fatal("digits miscounts")
	}
}

// Without a configured size a shard holds 1,000 messages: one PUT each,
// where the S3 server's cost per PUT made 200-message shards slow.
func TestDefaultShardSize(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil, Config{})
		ctx := context.Background()
		var ids []string
		for i := range 2 {
			ids = append(ids, e.user(fmt.Sprintf("u%d", i), false).ID)
		}
		if _, err := chat.Seed(ctx, db.DB, chat.SeedOptions{Users: ids, Conversations: 1, Messages: 2500, Seed: 5}); err != nil {
			t.Fatal(err)
		}
		// The first seeded user is a member from the start and never
		// leaves: the export has every message.
		v := e.create(chat.Actor{ID: ids[0]}, "k", "all")
		e.start()
		e.wait(v.ID, 60*time.Second, StateDone)
		var sizes []int
		db.Model(&models.ExportShard{}).Where("export_id = ?", v.ID).Order("n").Pluck("messages", &sizes)
		if fmt.Sprint(sizes) != "[1000 1000 500]" {
			t.Fatalf("shards of %v messages, want [1000 1000 500]", sizes)
		}
	})
}

// linesLen is the size of msgs' lines, as generate counts it.
func linesLen(msgs []chat.Message) int {
	n := 0
	for _, m := range msgs {
		n += lineLen(m)
	}
	return n
}
