package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/server"
	"github.com/ferry-io/ferry/users"
)

type fixture struct {
	srv   *httptest.Server
	users *users.Service
	admin string
}

func newFixture(t *testing.T, db *testenv.DB, ready ...server.ReadyCheck) *fixture {
	t.Helper()
	return newFixtureWith(t, db, func(d *server.Deps) { d.Ready = ready })
}

// newFixtureWith is newFixture with the server's Deps adjusted by edit.
func newFixtureWith(t *testing.T, db *testenv.DB, edit func(*server.Deps)) *fixture {
	t.Helper()
	us := testenv.Must(users.New(users.Config{DB: db.DB, Now: time.Now, SessionTTL: time.Hour}))
	reg := prometheus.NewRegistry()
	d := server.Deps{
		Log: testenv.Logger(t), Users: us, Gatherer: reg, Registerer: reg,
		MaxBodyBytes: 1 << 10, Origins: []string{"http://ferry.test"}, PublicURL: "http://ferry.test",
	}
	edit(&d)
	s, err := server.New(d)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	tok, err := us.Bootstrap(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{srv: ts, users: us, admin: tok}
}

func (f *fixture) do(t *testing.T, method, path string, body string, hdr map[string]string) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, f.srv.URL+path, rd)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestSessionCookie(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		f := newFixture(t, db)
		resp := f.do(t, "POST", "/session", `{"token":"`+f.admin+`"}`, jsonType)
		if resp.StatusCode != 200 {
			t.Fatalf("POST /session = %d", resp.StatusCode)
		}
		ck := sessionCookie(resp)
		if ck == nil || !ck.HttpOnly || ck.SameSite != http.SameSiteLaxMode || ck.Path != "/" || ck.MaxAge <= 0 {
			t.Fatalf("cookie = %+v; want HttpOnly, SameSite=Lax, Path=/", ck)
		}
		cookie := map[string]string{"Cookie": ck.Name + "=" + ck.Value}
		if r := f.do(t, "GET", "/me", "", cookie); r.StatusCode != 200 {
			t.Fatalf("GET /me with cookie = %d", r.StatusCode)
		}
		// A cookie-authenticated write from a foreign origin is refused;
		// the same from ferry's origin goes through.
		withOrigin := func(o string) map[string]string {
			return map[string]string{"Cookie": ck.Name + "=" + ck.Value, "Origin": o, "Content-Type": "application/json"}
		}
		if r := f.do(t, "POST", "/admin/users", `{"name":"x1"}`, withOrigin("http://evil.test")); r.StatusCode != 403 {
			t.Fatalf("cross-origin cookie POST = %d, want 403", r.StatusCode)
		}
		if r := f.do(t, "POST", "/admin/users", `{"name":"x2"}`, withOrigin("http://ferry.test")); r.StatusCode != 201 {
			t.Fatalf("same-origin cookie POST = %d, want 201", r.StatusCode)
		}
		if r := f.do(t, "DELETE", "/session", "", withOrigin("http://ferry.test")); r.StatusCode != 204 {
			t.Fatalf("DELETE /session = %d", r.StatusCode)
		}
		if r := f.do(t, "GET", "/me", "", cookie); r.StatusCode != 401 {
			t.Fatalf("GET /me after sign-out = %d, want 401", r.StatusCode)
		}
		if r := f.do(t, "POST", "/session", `{"token":"fry_wrong"}`, jsonType); r.StatusCode != 401 {
			t.Fatalf("POST /session with a bad token = %d, want 401", r.StatusCode)
		}
	})
}

var jsonType = map[string]string{"Content-Type": "application/json"}

// sessionCookie returns the session cookie resp sets, or nil.
func sessionCookie(resp *http.Response) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == server.SessionCookie {
			return c
		}
	}
	return nil
}

// Issue 11, item 3: a page elsewhere cannot sign a visitor's browser in,
// with or without a cookie. The attack is a cross-site HTML form with
// enctype=text/plain whose one field, named {"token":"=","token":" with
// the value fry_ATTACKER"}, makes a text/plain body that is valid JSON.
// Only ferry's origins (Sec-Fetch-Site same-origin, or a trusted Origin)
// may sign in, and only with an application/json body; tools that send
// neither header (curl, the Go client) still can.
func TestLoginCSRF(t *testing.T) {
	db := testenv.NewDB(t, "sqlite")
	f := newFixture(t, db)
	attack := `{"token":"=","token":"` + f.admin + `"}`
	valid := `{"token":"` + f.admin + `"}`
	for _, c := range []struct {
		name   string
		body   string
		hdr    map[string]string
		status int
		code   string
	}{
		{"text/plain form from another site", attack, map[string]string{"Content-Type": "text/plain", "Origin": "http://evil.test", "Sec-Fetch-Site": "cross-site"}, 403, "cross_origin"},
		{"text/plain form from an old browser", attack, map[string]string{"Content-Type": "text/plain", "Origin": "http://evil.test"}, 403, "cross_origin"},
		{"text/plain body without browser headers", attack, map[string]string{"Content-Type": "text/plain"}, 415, "unsupported_media_type"},
		{"urlencoded form, same origin", "token=" + f.admin, map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Sec-Fetch-Site": "same-origin"}, 415, "unsupported_media_type"},
		{"no content type", valid, nil, 415, "unsupported_media_type"},
		{"JSON from another site", valid, map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site", "Origin": "http://evil.test"}, 403, "cross_origin"},
		{"JSON from a sibling subdomain", valid, map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "same-site", "Origin": "http://evil.ferry.test"}, 403, "cross_origin"},
		{"JSON from another origin, old browser", valid, map[string]string{"Content-Type": "application/json", "Origin": "http://evil.test"}, 403, "cross_origin"},
		{"JSON from ferry's page", valid, map[string]string{"Content-Type": "application/json; charset=utf-8", "Sec-Fetch-Site": "same-origin", "Origin": f.srv.URL}, 200, ""},
		{"JSON from a trusted origin", valid, map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site", "Origin": "http://ferry.test"}, 200, ""},
		{"JSON from curl", valid, jsonType, 200, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := f.do(t, "POST", "/session", c.body, c.hdr)
			var p struct{ Code, Detail string }
			json.NewDecoder(r.Body).Decode(&p)
			if r.StatusCode != c.status || p.Code != c.code {
				t.Fatalf("%d %+v, want %d %s", r.StatusCode, p, c.status, c.code)
			}
			if ck := sessionCookie(r); (ck != nil && ck.MaxAge > 0) != (c.status == 200) {
				t.Fatalf("status %d with session cookie %v", r.StatusCode, ck)
			}
			if c.status == 415 && !strings.Contains(p.Detail, "Content-Type: application/json") {
				t.Fatalf("415 detail %q does not say what to send", p.Detail)
			}
		})
	}
	// A stale cookie does not change the rule.
	r := f.do(t, "POST", "/session", attack, map[string]string{"Content-Type": "text/plain", "Origin": "http://evil.test",
		"Sec-Fetch-Site": "cross-site", "Cookie": server.SessionCookie + "=stale"})
	if r.StatusCode != 403 || sessionCookie(r) != nil {
		t.Fatalf("cross-site sign-in over a stale cookie = %d", r.StatusCode)
	}
}

// Issue 11, item 9: signing out with a cookie whose session expired, was
// already ended, or never existed clears the cookie and answers 204.
func TestSignOutWithStaleCookie(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		f := newFixture(t, db)
		signIn := func() string {
			r := f.do(t, "POST", "/session", `{"token":"`+f.admin+`"}`, jsonType)
			if r.StatusCode != 200 || sessionCookie(r) == nil {
				t.Fatalf("sign-in = %d", r.StatusCode)
			}
			return sessionCookie(r).Value
		}
		ended := signIn()
		if r := f.do(t, "DELETE", "/session", "", map[string]string{"Cookie": server.SessionCookie + "=" + ended}); r.StatusCode != 204 {
			t.Fatalf("first sign-out = %d", r.StatusCode)
		}
		expired := signIn()
		if err := db.DB.Exec("UPDATE sessions SET expires_at = ? WHERE expires_at > ?", time.Now().Add(-time.Minute).UTC(), time.Now().UTC()).Error; err != nil {
			t.Fatal(err)
		}
		for name, v := range map[string]string{"ended": ended, "expired": expired, "unknown": "bm90LWEtc2Vzc2lvbg", "oversized": strings.Repeat("x", 200)} {
			t.Run(name, func(t *testing.T) {
				r := f.do(t, "DELETE", "/session", "", map[string]string{"Cookie": server.SessionCookie + "=" + v})
				ck := sessionCookie(r)
				if r.StatusCode != 204 || ck == nil || ck.MaxAge >= 0 || ck.Value != "" {
					t.Fatalf("DELETE /session = %d, cookie %v; want 204 and the cookie cleared", r.StatusCode, ck)
				}
			})
		}
		var left int64
		db.DB.Table("sessions").Count(&left)
		if left != 0 {
			t.Fatalf("%d sessions left after signing out of them", left)
		}
		// Elsewhere a stale cookie is still refused, not taken as anonymous.
		if r := f.do(t, "GET", "/me", "", map[string]string{"Cookie": server.SessionCookie + "=" + expired}); r.StatusCode != 401 {
			t.Fatalf("GET /me with an expired cookie = %d, want 401", r.StatusCode)
		}
	})
}

func TestProblemsAndLimits(t *testing.T) {
	db := testenv.NewDB(t, "sqlite")
	f := newFixture(t, db)
	auth := map[string]string{"Authorization": "Bearer " + f.admin}
	authJSON := map[string]string{"Authorization": "Bearer " + f.admin, "Content-Type": "application/json"}
	for _, c := range []struct {
		name, method, path, body string
		hdr                      map[string]string
		status                   int
		code                     string
	}{
		{"no credentials", "GET", "/me", "", nil, 401, "unauthenticated"},
		{"bad scheme", "GET", "/me", "", map[string]string{"Authorization": "Basic Zm9vOmJhcg=="}, 401, "unauthenticated"},
		{"too large", "POST", "/admin/users", `{"name":"` + strings.Repeat("a", 2000) + `"}`, authJSON, 413, "body_too_large"},
		{"wrong media type", "POST", "/admin/users", `name=x`, map[string]string{"Authorization": "Bearer " + f.admin, "Content-Type": "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"},
		{"trailing data", "POST", "/admin/users", `{"name":"a"} {}`, authJSON, 400, "invalid_json"},
		{"wrong type", "POST", "/admin/users", `{"name":5}`, authJSON, 400, "invalid_json"},
		{"empty body", "POST", "/admin/users", ``, authJSON, 400, "invalid_json"},
		{"not found", "GET", "/nope", "", auth, 404, "route_not_found"},
		{"method", "PUT", "/me", "", auth, 405, "method_not_allowed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := f.do(t, c.method, c.path, c.body, c.hdr)
			var p map[string]any
			json.NewDecoder(r.Body).Decode(&p)
			if r.StatusCode != c.status || p["code"] != c.code || r.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("got %d %v (%s), want %d %s", r.StatusCode, p, r.Header.Get("Content-Type"), c.status, c.code)
			}
			if p["request_id"] == "" || p["request_id"] != r.Header.Get("X-Request-Id") {
				t.Fatalf("request_id %v does not match header %q", p["request_id"], r.Header.Get("X-Request-Id"))
			}
		})
	}
	// Nothing was created by the refused requests.
	list, _ := f.users.List(context.Background())
	if len(list) != 1 {
		t.Fatalf("%d users after refused requests, want 1", len(list))
	}
}

func TestReadyzNamesTheFailingCheck(t *testing.T) {
	db := testenv.NewDB(t, "sqlite")
	f := newFixture(t, db,
		server.ReadyCheck{Name: "database", Check: func(context.Context) error { return nil }},
		server.ReadyCheck{Name: "bucket", Check: func(context.Context) error { return errors.New("secret internal detail") }})
	r := f.do(t, "GET", "/readyz", "", nil)
	b, _ := io.ReadAll(r.Body)
	if r.StatusCode != 503 || !strings.Contains(string(b), `"bucket":"fail"`) || !strings.Contains(string(b), `"database":"ok"`) {
		t.Fatalf("readyz = %d %s", r.StatusCode, b)
	}
	if strings.Contains(string(b), "secret internal detail") {
		t.Fatal("readyz leaks the error text")
	}
	if r := f.do(t, "HEAD", "/healthz", "", nil); r.StatusCode != 200 {
		t.Fatalf("HEAD /healthz = %d", r.StatusCode)
	}
}

func TestMetricsByRouteTemplate(t *testing.T) {
	db := testenv.NewDB(t, "sqlite")
	f := newFixture(t, db)
	auth := map[string]string{"Authorization": "Bearer " + f.admin}
	f.do(t, "POST", "/admin/users/usr_abc/deactivate", "", auth)
	r := f.do(t, "GET", "/metrics", "", nil)
	b, _ := io.ReadAll(r.Body)
	if !strings.Contains(string(b), `ferry_http_requests_total{method="POST",route="/admin/users/:id/deactivate",status="404"} 1`) {
		t.Fatalf("metrics lack the templated route:\n%s", b)
	}
	if strings.Contains(string(b), "usr_abc") {
		t.Fatal("metrics carry a raw path")
	}
}
