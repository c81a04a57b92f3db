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
	us := users.New(db.DB, time.Now, time.Hour)
	reg := prometheus.NewRegistry()
	s := server.New(server.Deps{
		Log: testenv.Logger(t), Users: us, Gatherer: reg, Registerer: reg, Ready: ready,
		MaxBodyBytes: 1 << 10, Origins: []string{"http://ferry.test"}, SessionTTL: time.Hour,
	})
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
		resp := f.do(t, "POST", "/session", `{"token":"`+f.admin+`"}`, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("POST /session = %d", resp.StatusCode)
		}
		var ck *http.Cookie
		for _, c := range resp.Cookies() {
			if c.Name == server.SessionCookie {
				ck = c
			}
		}
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
		if r := f.do(t, "POST", "/session", `{"token":"fry_wrong"}`, nil); r.StatusCode != 401 {
			t.Fatalf("POST /session with a bad token = %d, want 401", r.StatusCode)
		}
	})
}

func TestProblemsAndLimits(t *testing.T) {
	db := testenv.NewDB(t, "sqlite")
	f := newFixture(t, db)
	auth := map[string]string{"Authorization": "Bearer " + f.admin}
	for _, c := range []struct {
		name, method, path, body string
		hdr                      map[string]string
		status                   int
		code                     string
	}{
		{"no credentials", "GET", "/me", "", nil, 401, "unauthenticated"},
		{"bad scheme", "GET", "/me", "", map[string]string{"Authorization": "Basic Zm9vOmJhcg=="}, 401, "unauthenticated"},
		{"too large", "POST", "/admin/users", `{"name":"` + strings.Repeat("a", 2000) + `"}`, auth, 413, "body_too_large"},
		{"wrong media type", "POST", "/admin/users", `name=x`, map[string]string{"Authorization": "Bearer " + f.admin, "Content-Type": "application/x-www-form-urlencoded"}, 400, "unsupported_media_type"},
		{"trailing data", "POST", "/admin/users", `{"name":"a"} {}`, auth, 400, "invalid_json"},
		{"wrong type", "POST", "/admin/users", `{"name":5}`, auth, 400, "invalid_json"},
		{"empty body", "POST", "/admin/users", ``, auth, 400, "invalid_json"},
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
