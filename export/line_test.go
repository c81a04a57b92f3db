package export

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ferry-io/ferry/chat"
	"github.com/ferry-io/ferry/models"
)

// goldenMessages cover every field and every kind of escape.
func goldenMessages() []chat.Message {
	at := time.Date(2026, 11, 29, 16, 16, 9, 219087999, time.FixedZone("CET", 3600))
	return []chat.Message{
		{Conversation: "cnv_0123456789abcdefghijklmn", Seq: 1, Gseq: 1_000_000_007, Sender: "usr_0123456789abcdefghijklmn",
			Body: "hello", SentAt: at},
		{Conversation: "cnv_0123456789abcdefghijklmn", Seq: 2, Gseq: 1_000_000_008, Sender: "usr_0123456789abcdefghijklmn",
			Attachments: []string{"fil_a", "fil_bb"}, SentAt: at.Add(time.Second)},
		{Conversation: "c", Seq: 3, Gseq: 9_000_000_000_000_000_000, Sender: "u", Recalled: true, SentAt: time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Conversation: "c", Seq: 4, Gseq: 5, Sender: "u", Body: "quote \" backslash \\ / tab \t newline \n cr \r bs \b ff \f nul \x00 us \x1f del \x7f",
			SentAt: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)},
		{Conversation: "c", Seq: 5, Gseq: 6, Sender: "u", Body: "<html> & \u2028 \u2029 \xff \xe2\x80 ünïcode ✓ 聊天记录 😀 \\u003c",
			Attachments: []string{"a\"b", "<&>"}, SentAt: time.Unix(0, 1500).UTC()},
	}
}

// A shard's bytes never change from one version of ferry to the next: a
// rerun regenerates the shards an earlier version recorded and fails the
// export for good if one hashes differently. The hash is of these
// messages rendered by encoding/json, as shards were before appendLine.
func TestShardBytesAreStable(t *testing.T) {
	msgs := goldenMessages()
	b, err := (&Service{}).render(models.Export{ID: "exp_x"}, models.ExportShard{Messages: len(msgs)}, msgs, linesLen(msgs))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if got, want := hex.EncodeToString(sum[:]), "bc6f7393ae8a61fce0efce4f144027c4945e5760708f360e3ad111877de4bdac"; got != want || len(b) != 979 {
		t.Fatalf("the shard hashes to %s (%d bytes), want %s (979 bytes):\n%s", got, len(b), want, b)
	}
}

// line is one message of the artifact as encoding/json reads and writes
// it, fields in key order so that the keys come sorted: the reference
// appendLine is held to, and what tests decode lines into.
type line struct {
	Attachments []string `json:"attachments"`
	Body        string   `json:"body"`
	Conv        string   `json:"conv"`
	Gseq        int64    `json:"gseq"`
	Recalled    bool     `json:"recalled"`
	Sender      string   `json:"sender"`
	SentAt      string   `json:"sent_at"`
	Seq         int64    `json:"seq"`
}

// jsonLine is a line as encoding/json writes it, which appendLine must
// match byte for byte.
func jsonLine(t testing.TB, m chat.Message) []byte {
	l := line{Attachments: m.Attachments, Body: m.Body, Conv: m.Conversation, Gseq: m.Gseq, Recalled: m.Recalled,
		Sender: m.Sender, SentAt: m.SentAt.UTC().Format(sentAtLayout), Seq: m.Seq}
	if l.Attachments == nil {
		l.Attachments = []string{}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(l); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestLineIsEncodingJSONs(t *testing.T) {
	msgs := goldenMessages()
	// Random strings drawn mostly from the bytes that need care: ASCII
	// controls, quotes, backslashes, the bytes of multi-byte UTF-8 (whole
	// or cut), U+2028 and U+2029; random times across and beyond years
	// 0-9999 and zones.
	rng := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"\x00", "\x1f", "\b", "\f", "\n", "\r", "\t", "\"", "\\", "/", "<", ">", "&", "a", "Z", " ", "\x7f",
		"\xc3", "\xa9", "é", "\xe2\x80", "\u2028", "\u2029", "\u2027", "\u202a", "聊", "😀", "\xf0\x9f\x98", "\xed\xa0\x80", "\xef\xbf\xbd"}
	str := func() string {
		var s []byte
		for range rng.IntN(12) {
			s = append(s, pieces[rng.IntN(len(pieces))]...)
		}
		return string(s)
	}
	for i := range 20000 {
		m := chat.Message{Conversation: str(), Seq: rng.Int64() - rng.Int64(), Gseq: rng.Int64(), Sender: str(), Body: str(),
			Recalled: rng.IntN(2) == 0, SentAt: time.Unix(rng.Int64N(600_000_000_000)-300_000_000_000, rng.Int64N(1e9)).In(time.FixedZone("", rng.IntN(100_000)-50_000))}
		for range rng.IntN(3) {
			m.Attachments = append(m.Attachments, str())
		}
		if i%7 == 0 {
			m.Attachments = []string{} // empty, not nil: the same line
		}
		msgs = append(msgs, m)
	}
	for i, m := range msgs {
		if got, want := appendLine(nil, m), jsonLine(t, m); !bytes.Equal(got, want) {
			t.Fatalf("message %d (%+v):\n got %q\nwant %q", i, m, got, want)
		}
		checkLineSizes(t, m)
	}
}

// checkLineSizes holds render's buffer size (lineLen) to the line's.
func checkLineSizes(t *testing.T, m chat.Message) {
	t.Helper()
	n := len(appendLine(nil, m))
	if got := lineLen(m); got != n {
		t.Fatalf("lineLen %d for a line of %d bytes: %q", got, n, appendLine(nil, m))
	}
}

func FuzzLine(f *testing.F) {
	for _, m := range goldenMessages() {
		f.Add(m.Body, m.Conversation, m.SentAt.UnixNano(), m.Gseq)
	}
	f.Fuzz(func(t *testing.T, body, att string, nanos, gseq int64) {
		m := chat.Message{Conversation: att, Seq: -gseq, Gseq: gseq, Sender: body, Body: body, Attachments: []string{att, body},
			SentAt: time.Unix(0, nanos)}
		if got, want := appendLine(nil, m), jsonLine(t, m); !bytes.Equal(got, want) {
			t.Fatalf("valid UTF-8 %v:\n got %q\nwant %q", utf8.ValidString(body), got, want)
		}
		checkLineSizes(t, m)
	})
}
