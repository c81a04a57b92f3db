package server

import (
	"strings"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/export"
)

// The answers to an Idempotency-Key header that is not one key.
var (
	errMissingKey = errkind.Invalidf("missing_idempotency_key", "send an Idempotency-Key header (an RFC 8941 token or quoted string of at most %d characters)", export.MaxKeyLen)
	errInvalidKey = errkind.Invalidf("invalid_idempotency_key", `the Idempotency-Key must be one RFC 8941 token (a letter or "*", then letters, digits and !#$%%&'*+-.^_`+"`"+`|~:/) or one non-empty quoted string such as "8e03978e-40d5-43e8-bc93-6894a57f9324"`)
)

// parseIdempotencyKey reads the Idempotency-Key header values. The field
// is an RFC 8941 item that is exactly a token or a string, without
// parameters: a token starts with a letter or "*" and goes on with token
// characters, ":" and "/"; a string is quoted, of printable ASCII, with \"
// and \\ as its only escapes. Its key is at most export.MaxKeyLen characters and
// not empty; "abc" and abc are the same key. Integers (123), decimals,
// byte sequences (:YWJj:), booleans (?1), lists (a,b, which a proxy makes
// of two header lines) and parameters (a;p=1) are not keys. No header, or
// an empty one, is errMissingKey; the empty string "" is errInvalidKey.
func parseIdempotencyKey(values []string) (string, error) {
	if len(values) > 1 {
		return "", errInvalidKey // two header lines
	}
	if len(values) == 0 {
		return "", errMissingKey
	}
	v := strings.Trim(values[0], " \t")
	switch {
	case v == "":
		return "", errMissingKey
	case v[0] == '"':
		return parseKeyString(v)
	case !isAlpha(v[0]) && v[0] != '*':
		return "", errInvalidKey
	}
	for i := 1; i < len(v); i++ {
		if c := v[i]; !isTchar(c) && c != ':' && c != '/' {
			return "", errInvalidKey
		}
	}
	if len(v) > export.MaxKeyLen {
		return "", export.ErrKeyTooLong
	}
	return v, nil
}

// parseKeyString reads an RFC 8941 sf-string that makes up the whole
// field value v.
func parseKeyString(v string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\':
			if i+1 == len(v) || (v[i+1] != '"' && v[i+1] != '\\') {
				return "", errInvalidKey
			}
			i++
			b.WriteByte(v[i])
		case c == '"':
			switch {
			case i != len(v)-1:
				return "", errInvalidKey // parameters or anything else after it
			case b.Len() == 0:
				return "", errInvalidKey
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", errInvalidKey
		default:
			b.WriteByte(c)
		}
		if b.Len() > export.MaxKeyLen {
			return "", export.ErrKeyTooLong
		}
	}
	return "", errInvalidKey // never closed
}

func isAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// isTchar reports an RFC 9110 token character.
func isTchar(c byte) bool {
	return isAlpha(c) || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
