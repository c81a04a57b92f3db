package ratelimit

import (
	"fmt"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time      { return c.t }
func (c *clock) add(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock               { return &clock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)} }
func must(t *testing.T, ok bool, format string, args ...any) {
	t.Helper()
	if !ok {
		t.Fatalf(format, args...)
	}
}

func TestParseLimit(t *testing.T) {
	for v, want := range map[string]Limit{
		"10/min":     {10, time.Minute},
		"600/h":      {600, time.Hour},
		"5/30s":      {5, 30 * time.Second},
		" 3 / hour ": {3, time.Hour},
		"1/s":        {1, time.Second},
		"0":          {},
		"0/min":      {},
	} {
		got, err := ParseLimit(v)
		if err != nil || got != want {
			t.Errorf("%q: %v %v, want %v", v, got, err, want)
		}
		if back, err := ParseLimit(got.String()); err != nil || back != got {
			t.Errorf("%v does not read back: %v %v", got, back, err)
		}
	}
	for _, v := range []string{"", "10", "ten/min", "-1/min", "10/fortnight", "10/10ms", "10/", "/min", "10/min/h"} {
		if l, err := ParseLimit(v); err == nil {
			t.Errorf("%q accepted as %v", v, l)
		}
	}
}

// N per period: N at once, then one every period/N; keys are separate; the
// wait is rounded up to whole seconds.
func TestKeyedLimit(t *testing.T) {
	c := newClock()
	k := New(Limit{3, time.Minute}, 0, c.now)
	for i := range 3 {
		ok, _ := k.Allow("a")
		must(t, ok, "event %d refused", i+1)
	}
	ok, wait := k.Allow("a")
	must(t, !ok && wait == 20*time.Second, "4th event: %v, wait %s; want refused for 20s", ok, wait)
	blocked, wait := k.Blocked("a")
	must(t, blocked && wait == 20*time.Second, "Blocked = %v %s", blocked, wait)
	ok, _ = k.Allow("b")
	must(t, ok, "another key is limited by a's events")

	c.add(19*time.Second + 500*time.Millisecond)
	ok, wait = k.Allow("a")
	must(t, !ok && wait == time.Second, "after 19.5s: %v, wait %s; want refused for 1s", ok, wait)
	c.add(500 * time.Millisecond)
	ok, _ = k.Allow("a")
	must(t, ok, "a token refilled after 20s was refused")
	ok, _ = k.Allow("a")
	must(t, !ok, "a second token after 20s was given")
}

// Blocked never takes a token and never makes a bucket.
func TestBlockedTakesNothing(t *testing.T) {
	c := newClock()
	k := New(Limit{2, time.Minute}, 0, c.now)
	for range 10 {
		blocked, _ := k.Blocked("x")
		must(t, !blocked, "an unseen key is blocked")
	}
	must(t, k.Len() == 0, "Blocked made %d buckets", k.Len())
	k.Allow("x")
	for range 10 {
		k.Blocked("x")
	}
	ok, _ := k.Allow("x")
	must(t, ok, "Blocked took tokens")
}

func TestZeroLimitAllowsEverything(t *testing.T) {
	k := New(Limit{}, 0, newClock().now)
	for range 1000 {
		ok, _ := k.Allow("a")
		blocked, _ := k.Blocked("a")
		must(t, ok && !blocked, "the zero limit refused")
	}
	must(t, k.Len() == 0, "the zero limit keeps %d buckets", k.Len())
}

// However many keys come, at most maxKeys buckets are kept; a sweep drops
// the buckets that have refilled (idle keys) and keeps the busy ones, so a
// limited key is not forgotten because many others came and went.
func TestMemoryIsBounded(t *testing.T) {
	c := newClock()
	k := New(Limit{3, time.Hour}, 10, c.now)
	for range 3 {
		k.Allow("attacker")
	}
	for i := range 9 {
		k.Allow(fmt.Sprint("idle", i))
	}
	must(t, k.Len() == 10, "%d buckets", k.Len())
	// 20 minutes refill the idle keys' one token; the attacker has one of
	// three back.
	c.add(20 * time.Minute)
	k.Allow("newcomer")
	must(t, k.Len() == 2, "after the sweep %d buckets, want the attacker's and the newcomer's", k.Len())
	ok, _ := k.Allow("attacker")
	must(t, ok, "the attacker's refilled token was lost")
	ok, _ = k.Allow("attacker")
	must(t, !ok, "the attacker's bucket was reset by the sweep")

	// A flood of keys that never go idle still stays within the bound.
	for i := range 10_000 {
		k.Allow(fmt.Sprint("flood", i))
		if i%1000 == 0 {
			c.add(time.Second) // sweeps find nothing idle
		}
	}
	must(t, k.Len() <= 10, "%d buckets after a flood, want at most 10", k.Len())
}

func TestAddrKey(t *testing.T) {
	for in, want := range map[string]string{
		"203.0.113.7":                "203.0.113.7",
		"::ffff:203.0.113.7":         "203.0.113.7",
		"2001:db8:1:2:aaaa:bbbb:c:d": "2001:db8:1:2::/64",
		"2001:db8:1:2::1":            "2001:db8:1:2::/64",
		"fe80::1%eth0":               "fe80::/64",
		"not an address":             "not an address",
	} {
		if got := AddrKey(in); got != want {
			t.Errorf("AddrKey(%q) = %q, want %q", in, got, want)
		}
	}
}
