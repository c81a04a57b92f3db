package page

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"time"

	"github.com/ferry-io/ferry/errkind"
)

// Limits of a page.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// Errors of bad paging input; both are 400s.
var (
	ErrLimit  = errkind.Invalidf("invalid_limit", "limit must be an integer from 1 to %d", MaxLimit)
	ErrCursor = errkind.Invalidf("invalid_cursor", "cursor must be the next value of an earlier page of the same list")
)

// ParseLimit reads the limit query parameter's values: none gives
// DefaultLimit; otherwise exactly one canonical decimal from 1 to MaxLimit.
func ParseLimit(values []string) (int, error) {
	if len(values) == 0 {
		return DefaultLimit, nil
	}
	if len(values) > 1 || values[0] == "" || values[0][0] == '0' || values[0][0] == '+' {
		return 0, ErrLimit
	}
	n, err := strconv.Atoi(values[0])
	if err != nil {
		return 0, ErrLimit
	}
	return Limit(n)
}

// Limit checks a limit given in code: 0 means DefaultLimit.
func Limit(n int) (int, error) {
	switch {
	case n == 0:
		return DefaultLimit, nil
	case n < 0 || n > MaxLimit:
		return 0, ErrLimit
	}
	return n, nil
}

// ParseCursor reads the cursor query parameter's values: none or an empty
// one is the first page, more than one is an error.
func ParseCursor(values []string) (string, error) {
	switch {
	case len(values) == 0:
		return "", nil
	case len(values) > 1:
		return "", ErrCursor
	}
	return values[0], nil
}

// cursor is what a cursor encodes: its list and the last item's key.
type cursor struct {
	List string   `json:"l"`
	Key  []string `json:"k"`
}

// Encode returns the cursor of list that continues after the item whose
// sort key is key.
func Encode(list string, key ...string) string {
	b, _ := json.Marshal(cursor{List: list, Key: key})
	return base64.RawURLEncoding.EncodeToString(b)
}

// Decode reads a cursor of list with a key of n parts. A cursor of
// another list, or one ferry did not make, is ErrCursor.
func Decode(list, c string, n int) ([]string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return nil, ErrCursor
	}
	var v cursor
	if err := json.Unmarshal(b, &v); err != nil || v.List != list || len(v.Key) != n {
		return nil, ErrCursor
	}
	return v.Key, nil
}

// EncodeTimeID is Encode for the key (at, id) of a list ordered by time
// and id. Times keep their full precision.
func EncodeTimeID(list string, at time.Time, id string) string {
	return Encode(list, at.UTC().Format(time.RFC3339Nano), id)
}

// DecodeTimeID reads a cursor made by EncodeTimeID.
func DecodeTimeID(list, c string) (time.Time, string, error) {
	k, err := Decode(list, c, 2)
	if err != nil {
		return time.Time{}, "", err
	}
	at, err := time.Parse(time.RFC3339Nano, k[0])
	if err != nil || k[1] == "" {
		return time.Time{}, "", ErrCursor
	}
	return at.UTC(), k[1], nil
}

// EncodeInt is Encode for a list ordered by one integer.
func EncodeInt(list string, v int64) string { return Encode(list, strconv.FormatInt(v, 10)) }

// DecodeInt reads a cursor made by EncodeInt.
func DecodeInt(list, c string) (int64, error) {
	k, err := Decode(list, c, 1)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(k[0], 10, 64)
	if err != nil {
		return 0, ErrCursor
	}
	return v, nil
}
