package e2e

import (
	"testing"

	"github.com/ferry-io/ferry/models"
)

// Export bodies mean one thing: {"SCOPE":"all"} and a scope given twice
// are 400, not a replay of the export made with {"scope":"all"} (Go's
// decoder folds case and lets the last name win).
func TestExportBodiesAreStrict(t *testing.T) {
	f := Start(t, Options{})
	_, alice := f.CreateUser("alice", false)
	want(t, f.Do("POST", "/exports", alice, `{"scope":"all"}`, "Idempotency-Key", "k1"), 202, "")
	for _, body := range []string{`{"SCOPE":"all"}`, `{"Scope":"all"}`, `{"scope":"conv:zzz","scope":"all"}`, `{"scope":"all","scope":"all"}`} {
		r := f.Do("POST", "/exports", alice, body, "Idempotency-Key", "k1")
		want(t, r, 400, "invalid_json")
	}
	want(t, f.Do("POST", "/exports", alice, ` { "scope" : "all" } `, "Idempotency-Key", "k1"), 200, "") // the same body
	var n int64
	ferryDB(t, f).Model(&models.Export{}).Count(&n)
	if n != 1 {
		t.Fatalf("%d exports, want 1", n)
	}
}

// A chat body is valid Unicode or refused: an escaped lone surrogate was
// stored as U+FFFD and accepted, though invalid text is 400 invalid_body.
func TestChatBodiesAreStrict(t *testing.T) {
	f := Start(t, Options{})
	_, alice := f.CreateUser("alice", false)
	var conv struct{ ID string }
	want(t, f.Do("POST", "/conversations", alice, `{"title":"t\udc00"}`), 400, "invalid_title")
	r := f.Do("POST", "/conversations", alice, `{"title":"t"}`)
	want(t, r, 201, "")
	r.JSON(t, &conv)
	path := "/conversations/" + conv.ID + "/messages"
	for _, tc := range []struct{ body, code string }{
		{`{"body":"\ud800"}`, "invalid_body"},
		{`{"body":"a\ud800b"}`, "invalid_body"},
		{`{"body":"\udfff\ud800"}`, "invalid_body"},
		{"{\"body\":\"caf\xe9\"}", "invalid_body"},
		{`{"Body":"hello"}`, "invalid_json"},
		{`{"body":"a","body":"b"}`, "invalid_json"},
	} {
		want(t, f.Do("POST", path, alice, tc.body), 400, tc.code)
	}
	want(t, f.Do("POST", path, alice, `{"body":"\ud83d\ude00 \ufffd"}`), 201, "")
	var page struct{ Messages []struct{ Body string } }
	f.Do("GET", path, alice, nil).JSON(t, &page)
	if len(page.Messages) != 1 || page.Messages[0].Body != "😀 \ufffd" {
		t.Fatalf("stored %+v, want one message 😀 U+FFFD", page.Messages)
	}
}
