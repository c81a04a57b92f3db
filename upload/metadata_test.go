package upload_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/upload"
)

// Metadata limits: 16 keys, 1 KiB per value, UTF-8, scalar values; each
// violation is a 400 invalid_metadata that says which rule it broke.
func TestParseMetadata(t *testing.T) {
	many := map[string]string{}
	for i := range upload.MaxMetadataKeys + 1 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	tooMany, _ := json.Marshal(many)
	delete(many, "k0")
	enough, _ := json.Marshal(many)
	long := `"` + strings.Repeat("é", upload.MaxMetadataValue/2) + `"` // exactly 1 KiB of UTF-8
	for _, tc := range []struct {
		raw  string
		keys int    // keys of the result, when valid
		why  string // a word of the detail, when refused
	}{
		{raw: ``},
		{raw: `null`},
		{raw: `{}`},
		{raw: `{"post_id":"42","n":7,"ok":true,"none":null,"ratio":1.5e3}`, keys: 5},
		{raw: string(enough), keys: upload.MaxMetadataKeys},
		{raw: `{"text":` + long + `}`, keys: 1},
		{raw: `{"text":"line one\nline\ttwo"}`, keys: 1},
		{raw: string(tooMany), why: "17 keys"},
		{raw: `{"text":"x` + strings.Repeat("é", upload.MaxMetadataValue/2) + `"}`, why: "longer than 1024 bytes"},
		{raw: `{"n":1` + strings.Repeat("0", upload.MaxMetadataValue) + `}`, why: "longer than 1024 bytes"},
		{raw: "{\"text\":\"\xff\xfe\"}", why: "UTF-8"},
		{raw: `{"text":"\ud800"}`, why: "U+FFFD"},
		{raw: `{"text":"bell\u0007"}`, why: "control characters"},
		{raw: `{"tags":["a","b"]}`, why: "a string, a number"},
		{raw: `{"nested":{"a":1}}`, why: "a string, a number"},
		{raw: `{"has space":"x","ключ":"y","relativePath":null}`, keys: 3},
		{raw: `{"` + strings.Repeat("k", 128) + `":"x"}`, keys: 1},
		{raw: `{"":"empty key"}`, why: "empty or blank"},
		{raw: `{"  ":"blank key"}`, why: "empty or blank"},
		{raw: `{"` + strings.Repeat("k", 129) + `":"x"}`, why: "longer than 128 bytes"},
		{raw: `{"tab\tkey":"x"}`, why: "control"},
		{raw: `{"post\u202eid":"x"}`, why: "invisible format"},
		{raw: `["post_id","42"]`, why: "JSON object"},
		{raw: `"post_id"`, why: "JSON object"},
		{raw: `{"a":`, why: "JSON object"},
	} {
		t.Run(tc.raw[:min(len(tc.raw), 40)], func(t *testing.T) {
			m, err := upload.ParseMetadata(json.RawMessage(tc.raw), "metadata")
			if tc.why == "" {
				if err != nil || len(m) != tc.keys {
					t.Fatalf("got %v, %v; want %d keys", m, err, tc.keys)
				}
				return
			}
			ke := wantKind(t, err, errkind.Invalid, "invalid_metadata")
			if !strings.Contains(ke.Detail, tc.why) || ke.Fields["limits"] == nil {
				t.Fatalf("detail %q (fields %v), want it to say %q", ke.Detail, ke.Fields, tc.why)
			}
		})
	}
	// Numbers keep their text, so a receiver sees what was sent.
	m, err := upload.ParseMetadata(json.RawMessage(`{"id":12345678901234567890}`), "metadata")
	if err != nil || fmt.Sprint(m["id"]) != "12345678901234567890" {
		t.Fatalf("big number: %v %v", m, err)
	}
}
