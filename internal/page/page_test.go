package page

import (
	"errors"
	"testing"
	"time"
)

func TestParseLimit(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want int
		err  error
	}{
		{nil, DefaultLimit, nil},
		{[]string{"1"}, 1, nil},
		{[]string{"1000"}, 1000, nil},
		{[]string{"0"}, 0, ErrLimit},
		{[]string{"1001"}, 0, ErrLimit},
		{[]string{"-1"}, 0, ErrLimit},
		{[]string{"+5"}, 0, ErrLimit},
		{[]string{"05"}, 0, ErrLimit},
		{[]string{"5 "}, 0, ErrLimit},
		{[]string{"abc"}, 0, ErrLimit},
		{[]string{""}, 0, ErrLimit},
		{[]string{"99999999999999999999"}, 0, ErrLimit},
		{[]string{"5", "6"}, 0, ErrLimit},
	} {
		got, err := ParseLimit(tc.in)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("ParseLimit(%q) = %d, %v; want %d, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
	if n, err := Limit(0); n != DefaultLimit || err != nil {
		t.Errorf("Limit(0) = %d, %v", n, err)
	}
}

func TestCursors(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 20, 0, 123456000, time.FixedZone("x", 3600))
	c := EncodeTimeID("files", at, "fil_a")
	gotAt, gotID, err := DecodeTimeID("files", c)
	if err != nil || !gotAt.Equal(at) || gotAt.Location() != time.UTC || gotID != "fil_a" {
		t.Fatalf("round trip: %v %q %v", gotAt, gotID, err)
	}
	if _, _, err := DecodeTimeID("exports", c); !errors.Is(err, ErrCursor) {
		t.Fatalf("a files cursor on the exports list: %v, want ErrCursor", err)
	}
	if v, err := DecodeInt("conversations", EncodeInt("conversations", 42)); v != 42 || err != nil {
		t.Fatalf("int round trip: %d %v", v, err)
	}
	for _, bad := range []string{"x", "!!", EncodeInt("files", 1), Encode("files", "not a time", "fil_a"), Encode("files", at.Format(time.RFC3339Nano), "")} {
		if _, _, err := DecodeTimeID("files", bad); !errors.Is(err, ErrCursor) {
			t.Errorf("DecodeTimeID(%q) = %v, want ErrCursor", bad, err)
		}
	}
	if _, err := ParseCursor([]string{"a", "b"}); !errors.Is(err, ErrCursor) {
		t.Errorf("two cursors: %v", err)
	}
}
