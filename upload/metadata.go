package upload

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ferry-io/ferry/errkind"
)

// Limits on metadata, the same for a ticket's (trusted) metadata and for
// what an uploader sends.
const (
	MaxMetadataKeys  = 16
	MaxMetadataValue = 1 << 10 // bytes of a value's UTF-8 (or a number's text)
)

// maxMetadataKey bounds a key, in bytes of UTF-8.
const maxMetadataKey = 128

// Metadata is a file's metadata: at most MaxMetadataKeys keys, each 1-128
// bytes of UTF-8 without control or invisible format characters, with
// scalar values: a string of at most MaxMetadataValue bytes of UTF-8, a
// number (a json.Number, kept as written), true or false, or nil. Files
// carry two: the trusted one from the ticket that made the upload, and
// the one the uploader sent (Uppy's meta, whose keys are the app's own).
type Metadata map[string]any

// ParseMetadata reads and checks a JSON object of metadata; field names
// it in errors. Absent and null are no metadata.
func ParseMetadata(raw json.RawMessage, field string) (Metadata, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	// encoding/json turns invalid UTF-8 into U+FFFD without a word; look
	// at the bytes first.
	if !utf8.Valid(raw) {
		return nil, metadataError(field, "must be UTF-8")
	}
	if raw[0] != '{' {
		return nil, metadataError(field, "must be a JSON object of keys and values")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, metadataError(field, "must be a JSON object of keys and values")
	}
	if err := Metadata(m).check(field); err != nil {
		return nil, err
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}

// MetadataFromStrings builds metadata from string values (query
// parameters) and checks it.
func MetadataFromStrings(kv map[string]string, field string) (Metadata, error) {
	if len(kv) == 0 {
		return nil, nil
	}
	m := make(Metadata, len(kv))
	for k, v := range kv {
		m[k] = v
	}
	if err := m.check(field); err != nil {
		return nil, err
	}
	return m, nil
}

func metadataError(field, why string, args ...any) error {
	return errkind.Invalidf("invalid_"+field, "%s %s", field, fmt.Sprintf(why, args...)).With("limits",
		map[string]int{"keys": MaxMetadataKeys, "value_bytes": MaxMetadataValue})
}

// check enforces the limits. Keys are checked in order, so the error names
// the same key every time.
func (m Metadata) check(field string) error {
	if len(m) > MaxMetadataKeys {
		return metadataError(field, "has %d keys; at most %d are allowed", len(m), MaxMetadataKeys)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if why := checkKey(k); why != "" {
			return metadataError(field, "key %q %s", truncate(k, 80), why)
		}
		switch v := m[k].(type) {
		case nil, bool:
		case json.Number:
			if len(v) > MaxMetadataValue {
				return metadataError(field, "value of %q is longer than %d bytes", k, MaxMetadataValue)
			}
		case string:
			if len(v) > MaxMetadataValue {
				return metadataError(field, "value of %q is longer than %d bytes", k, MaxMetadataValue)
			}
			if err := checkText(v); err != "" {
				return metadataError(field, "value of %q %s", k, err)
			}
		default:
			return metadataError(field, "value of %q must be a string, a number, true, false or null", k)
		}
	}
	return nil
}

// checkKey refuses a key that is empty, too long, not text, or holds
// characters that would hide what it says: controls, and format
// characters such as bidirectional overrides or zero-width spaces.
func checkKey(k string) string {
	switch {
	case strings.TrimSpace(k) == "":
		return "must not be empty or blank"
	case len(k) > maxMetadataKey:
		return fmt.Sprintf("is longer than %d bytes", maxMetadataKey)
	}
	if why := checkText(k); why != "" {
		return why
	}
	for _, r := range k {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return "must not contain control or invisible format characters"
		}
	}
	return ""
}

// checkText refuses what would not survive as text: invalid UTF-8 (and
// U+FFFD, which is what JSON decoding leaves of it and of lone surrogate
// escapes), and control characters other than tab and line breaks.
func checkText(v string) string {
	if !utf8.ValidString(v) {
		return "must be UTF-8"
	}
	for _, r := range v {
		switch {
		case r == utf8.RuneError:
			return "must be UTF-8 (it holds U+FFFD, an invalid byte or a lone surrogate)"
		case r == '\t' || r == '\n' || r == '\r':
		case unicode.IsControl(r):
			return "must not contain control characters"
		}
	}
	return ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// encode is the metadata's stored form: a JSON object with sorted keys,
// or nil for none.
func (m Metadata) encode() *string {
	if len(m) == 0 {
		return nil
	}
	b, _ := json.Marshal(map[string]any(m))
	s := string(b)
	return &s
}

// decodeMetadata reads a stored JSON object; none is an empty Metadata, so
// the API always shows an object.
func decodeMetadata(s *string) Metadata {
	m := Metadata{}
	if s == nil || *s == "" {
		return m
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(*s)))
	dec.UseNumber()
	_ = dec.Decode((*map[string]any)(&m))
	return m
}
