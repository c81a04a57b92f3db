package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferry-io/ferry/internal/ratelimit"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/server"
)

// tooMany checks a 429 with Retry-After in seconds, between 1 and max.
func tooMany(t *testing.T, status int, h http.Header, max int) {
	t.Helper()
	secs, err := strconv.Atoi(h.Get("Retry-After"))
	if status != 429 || err != nil || secs < 1 || secs > max {
		t.Fatalf("%d with Retry-After %q; want 429 and 1-%d s", status, h.Get("Retry-After"), max)
	}
}

// Issue 11, item 13: refused credentials (bearer tokens, session cookies,
// tokens posted to /session) are limited per client address. Past the
// limit the address gets 429 with Retry-After before any credential is
// looked at, a right token included; other addresses, and credentials
// that work, are not affected; an IPv6 client is one /64.
func TestFailedAuthenticationLimit(t *testing.T) {
	db := testenv.NewDB(t, "sqlite")
	f := newFixtureWith(t, db, func(d *server.Deps) { d.AuthFailureLimit = ratelimit.Limit{Events: 3, Per: time.Hour} })
	from := func(addr string, kv ...string) map[string]string {
		h := map[string]string{"X-Forwarded-For": addr}
		for i := 0; i+1 < len(kv); i += 2 {
			h[kv[i]] = kv[i+1]
		}
		return h
	}
	good, bad := "Bearer "+f.admin, "Bearer fry_guess"
	const a = "203.0.113.1"
	for i := range 3 {
		if r := f.do(t, "GET", "/me", "", from(a, "Authorization", bad)); r.StatusCode != 401 {
			t.Fatalf("failure %d: %d, want 401", i+1, r.StatusCode)
		}
	}
	for name, hdr := range map[string]map[string]string{
		"a wrong token":        from(a, "Authorization", bad),
		"the right token":      from(a, "Authorization", good),
		"an unknown cookie":    from(a, "Cookie", server.SessionCookie+"=guess"),
		"a token in a sign-in": from(a, "Content-Type", "application/json"),
	} {
		t.Run(name, func(t *testing.T) {
			method, path, body := "GET", "/me", ""
			if name == "a token in a sign-in" {
				method, path, body = "POST", "/session", `{"token":"`+f.admin+`"}`
			}
			r := f.do(t, method, path, body, hdr)
			tooMany(t, r.StatusCode, r.Header, 1200)
			var p struct {
				Code       string
				RetryAfter int `json:"retry_after"`
			}
			json.NewDecoder(r.Body).Decode(&p)
			if p.Code != "rate_limited" || p.RetryAfter < 1 || r.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("429 body %+v", p)
			}
		})
	}
	// Signing out is never refused, and anonymous requests pass.
	if r := f.do(t, "DELETE", "/session", "", from(a, "Cookie", server.SessionCookie+"=stale")); r.StatusCode != 204 {
		t.Fatalf("sign-out from a locked address = %d", r.StatusCode)
	}
	if r := f.do(t, "GET", "/healthz", "", from(a)); r.StatusCode != 200 {
		t.Fatalf("anonymous request from a locked address = %d", r.StatusCode)
	}

	// Another address has its own count; working credentials never count.
	const b = "198.51.100.2"
	for range 20 {
		if r := f.do(t, "GET", "/me", "", from(b, "Authorization", good)); r.StatusCode != 200 {
			t.Fatalf("good token from another address = %d", r.StatusCode)
		}
	}
	// Sign-ins with a wrong token count like any refused credential.
	for range 3 {
		if r := f.do(t, "POST", "/session", `{"token":"fry_guess"}`, from(b, "Content-Type", "application/json")); r.StatusCode != 401 {
			t.Fatalf("wrong sign-in = %d", r.StatusCode)
		}
	}
	if r := f.do(t, "GET", "/me", "", from(b, "Authorization", good)); r.StatusCode != 429 {
		t.Fatalf("after three wrong sign-ins: %d, want 429", r.StatusCode)
	}

	// One IPv6 host is its /64.
	for range 3 {
		f.do(t, "GET", "/me", "", from("2001:db8:7:7::1", "Authorization", bad))
	}
	if r := f.do(t, "GET", "/me", "", from("2001:db8:7:7:abcd::9", "Authorization", good)); r.StatusCode != 429 {
		t.Fatalf("another address of the same /64 = %d, want 429", r.StatusCode)
	}
	if r := f.do(t, "GET", "/me", "", from("2001:db8:7:8::1", "Authorization", good)); r.StatusCode != 200 {
		t.Fatalf("another /64 = %d, want 200", r.StatusCode)
	}

	m := f.do(t, "GET", "/metrics", "", nil)
	body, _ := io.ReadAll(m.Body)
	if want := `ferry_rate_limited_total{limit="auth_failures"} 6`; !strings.Contains(string(body), want) {
		t.Fatalf("metrics lack %s", want)
	}
}

// Issue 11, item 13: creates (POST /uploads, POST /s3/multipart, GET
// /s3/params) are limited per user, across the native and the Companion
// routes; over the limit the answer is 429 with Retry-After (problem+json,
// or Companion's shape on /s3) and nothing is created. Other users and
// other calls go on.
func TestCreateLimit(t *testing.T) {
	db := testenv.NewDB(t, "sqlite")
	a := newAPIWith(t, db, func(d *server.Deps) { d.CreateLimit = ratelimit.Limit{Events: 3, Per: time.Hour} })
	alice, bob := a.user("alice"), a.user("bob")
	r := a.do("POST", "/uploads", alice, map[string]any{"file_name": "1.bin", "size": 10})
	if r.Status != 201 {
		t.Fatalf("first create: %d %s", r.Status, r.Body)
	}
	first := r.json(t)["upload_id"].(string)
	if r := a.do("POST", "/s3/multipart", alice, map[string]any{"filename": "2.bin", "type": "text/plain"}); r.Status != 200 {
		t.Fatalf("second create: %d %s", r.Status, r.Body)
	}
	if r := a.do("GET", "/s3/params?filename=3.txt", alice, nil); r.Status != 200 {
		t.Fatalf("third create: %d %s", r.Status, r.Body)
	}
	var before int64
	db.DB.Model(&models.Upload{}).Count(&before)
	for _, c := range []struct {
		method, path string
		body         any
		companion    bool
	}{
		{"POST", "/uploads", map[string]any{"file_name": "4.bin", "size": 10}, false},
		{"POST", "/s3/multipart", map[string]any{"filename": "4.bin", "type": "text/plain"}, true},
		{"GET", "/s3/params?filename=4.txt", nil, true},
	} {
		r := a.do(c.method, c.path, alice, c.body)
		tooMany(t, r.Status, r.Header, 1200)
		m := r.json(t)
		if m["code"] != "rate_limited" || (c.companion && m["error"] == nil) || (!c.companion && m["retry_after"] == nil) {
			t.Fatalf("%s %s: 429 body %s", c.method, c.path, r.Body)
		}
	}
	var after int64
	db.DB.Model(&models.Upload{}).Count(&after)
	if after != before {
		t.Fatalf("refused creates made %d uploads", after-before)
	}
	if r := a.do("GET", "/uploads/"+first, alice, nil); r.Status != 200 {
		t.Fatalf("status of an upload while limited: %d", r.Status)
	}
	if r := a.do("POST", "/uploads", bob, map[string]any{"file_name": "b.bin", "size": 10}); r.Status != 201 {
		t.Fatalf("another user: %d %s", r.Status, r.Body)
	}
}
