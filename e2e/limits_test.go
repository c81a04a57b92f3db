package e2e

import (
	"strconv"
	"testing"
)

// Issue 11, item 13, through the built binary with its settings: refused
// tokens from one client address (forwarded by the local proxy ferry
// trusts by default) lock that address out with 429 and Retry-After, the
// right token included, while the other addresses go on; and a user who
// started FERRY_RATE_CREATES exports and uploads gets 429 for the next
// one, whichever kind, while another user does not.
func TestRateLimits(t *testing.T) {
	f := Start(t, Options{Env: map[string]string{"FERRY_RATE_AUTH_FAILURES": "3/h", "FERRY_RATE_CREATES": "3/h"}})
	_, alice := f.CreateUser("alice", false)
	_, bob := f.CreateUser("bob", false)
	retryAfter := func(r Response) int {
		t.Helper()
		secs, err := strconv.Atoi(r.Header.Get("Retry-After"))
		if r.Status != 429 || err != nil || secs < 1 || secs > 1200 {
			t.Fatalf("%d Retry-After %q %s; want 429 and 1-1200 s", r.Status, r.Header.Get("Retry-After"), r.Body)
		}
		return secs
	}

	attacker := []string{"X-Forwarded-For", "203.0.113.50"}
	for range 3 {
		if r := f.Do("GET", "/me", "fry_guess", nil, attacker...); r.Status != 401 {
			t.Fatalf("wrong token: %d", r.Status)
		}
	}
	retryAfter(f.Do("GET", "/me", alice, nil, attacker...))
	retryAfter(f.Do("POST", "/session", "", map[string]any{"token": alice}, attacker...))
	if r := f.Do("GET", "/me", alice, nil); r.Status != 200 {
		t.Fatalf("alice from her own address: %d", r.Status)
	}

	for i, key := range []string{"k1", "k2"} {
		if r := f.Do("POST", "/exports", alice, map[string]any{"scope": "all"}, "Idempotency-Key", key); r.Status != 202 {
			t.Fatalf("export %d: %d %s", i+1, r.Status, r.Body)
		}
	}
	if r := f.Do("POST", "/uploads", alice, map[string]any{"file_name": "a.bin", "size": 10}); r.Status != 201 {
		t.Fatalf("upload: %d %s", r.Status, r.Body)
	}
	retryAfter(f.Do("POST", "/exports", alice, map[string]any{"scope": "all"}, "Idempotency-Key", "k3"))
	retryAfter(f.Do("POST", "/uploads", alice, map[string]any{"file_name": "b.bin", "size": 10}))
	retryAfter(f.Do("GET", "/s3/params?filename=c.txt", alice, nil))
	if r := f.Do("POST", "/exports", bob, map[string]any{"scope": "all"}, "Idempotency-Key", "k1"); r.Status != 202 {
		t.Fatalf("bob's export: %d %s", r.Status, r.Body)
	}
	var list struct{ Exports []struct{} }
	f.Do("GET", "/exports", alice, nil).JSON(t, &list)
	if len(list.Exports) != 2 {
		t.Fatalf("alice has %d exports, want the 2 before the limit", len(list.Exports))
	}
}
