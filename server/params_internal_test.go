package server

import "testing"

// TestOneSpellingPerNumber holds the one integer parser to canonical
// decimals: every other spelling of a number is refused, so "+5", "05" and
// "5" cannot name three different things or one thing three ways.
func TestOneSpellingPerNumber(t *testing.T) {
	for _, tc := range []struct {
		in   string
		min  int64
		want int64
		ok   bool
	}{
		{"0", 0, 0, true},
		{"7", 1, 7, true},
		{"10000", 1, 10000, true},
		{"999999999999999999", 1, 999999999999999999, true},
		{"0", 1, 0, false},
		{"+5", 1, 0, false},
		{"-1", 0, 0, false},
		{"007", 1, 0, false},
		{"00", 0, 0, false},
		{" 5", 1, 0, false},
		{"5 ", 1, 0, false},
		{"1e3", 1, 0, false},
		{"0x10", 1, 0, false},
		{"5.0", 1, 0, false},
		{"", 0, 0, false},
		{"1000000000000000000", 1, 0, false}, // 19 digits
		{"٣", 1, 0, false},                   // a non-ASCII digit
	} {
		n, ok := parseWhole(tc.in, tc.min)
		if ok != tc.ok || (ok && n != tc.want) {
			t.Errorf("parseWhole(%q, %d) = %d, %v; want %d, %v", tc.in, tc.min, n, ok, tc.want, tc.ok)
		}
	}
}
