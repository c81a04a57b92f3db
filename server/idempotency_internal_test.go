package server

import (
	"errors"
	"strings"
	"testing"

	"github.com/ferry-io/ferry/export"
)

// The Idempotency-Key is exactly an RFC 8941 token or string. It used to
// accept a,b (two header lines joined by a proxy, though two lines are
// refused), integers and byte sequences as bare keys, and to call ""
// missing rather than invalid.
func TestParseIdempotencyKey(t *testing.T) {
	long := strings.Repeat("k", export.MaxKeyLen)
	for _, tc := range []struct {
		in   []string
		want string
		err  error
	}{
		{[]string{"abc"}, "abc", nil},
		{[]string{`"abc"`}, "abc", nil},
		{[]string{`  "8e03978e-40d5-43e8-bc93-6894a57f9324" `}, "8e03978e-40d5-43e8-bc93-6894a57f9324", nil},
		{[]string{"ferry-cli-0a1b"}, "ferry-cli-0a1b", nil},
		{[]string{"*tok:en/x!#$%&'*+-.^_`|~9"}, "*tok:en/x!#$%&'*+-.^_`|~9", nil},
		{[]string{"\tabc\t"}, "abc", nil},
		{[]string{`"with space and \"quote\" and \\"`}, `with space and "quote" and \`, nil},
		{[]string{`"abc "`}, "abc ", nil},
		{[]string{`"a,b"`}, "a,b", nil},
		{[]string{long}, long, nil},
		{[]string{`"` + long + `"`}, long, nil},
		{[]string{long + "k"}, "", export.ErrKeyTooLong},
		{[]string{`"` + long + `k"`}, "", export.ErrKeyTooLong},
		{nil, "", errMissingKey},
		{[]string{""}, "", errMissingKey},
		{[]string{"  "}, "", errMissingKey},
		{[]string{`""`}, "", errInvalidKey},
		{[]string{"a", "b"}, "", errInvalidKey},
		{[]string{"a,b"}, "", errInvalidKey},
		{[]string{"a, b"}, "", errInvalidKey},
		{[]string{"123"}, "", errInvalidKey},
		{[]string{"-5"}, "", errInvalidKey},
		{[]string{"1.5"}, "", errInvalidKey},
		{[]string{"8e03978e-40d5-43e8-bc93-6894a57f9324"}, "", errInvalidKey}, // an integer, then junk
		{[]string{":YWJj:"}, "", errInvalidKey},
		{[]string{"?1"}, "", errInvalidKey},
		{[]string{"abc;p=1"}, "", errInvalidKey},
		{[]string{`"abc";p=1`}, "", errInvalidKey},
		{[]string{"(abc)"}, "", errInvalidKey},
		{[]string{"a b"}, "", errInvalidKey},
		{[]string{`"abc`}, "", errInvalidKey},
		{[]string{`"abc"x`}, "", errInvalidKey},
		{[]string{`"a\x"`}, "", errInvalidKey},
		{[]string{"caf\xc3\xa9"}, "", errInvalidKey},
		{[]string{"\"tab\there\""}, "", errInvalidKey},
	} {
		got, err := parseIdempotencyKey(tc.in)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("ParseIdempotencyKey(%q) = %q, %v; want %q, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}
