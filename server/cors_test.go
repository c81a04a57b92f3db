package server_test

import (
	"strings"
	"testing"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/server"
	"github.com/ferry-io/ferry/web"
)

const appOrigin = "https://app.example"

// newCORSAPI is an API whose public origin is http://localhost and which
// lists a host app's origin in FERRY_CORS_ORIGINS, with the UI's assets.
func newCORSAPI(t *testing.T, db *testenv.DB) *api {
	return newAPIWith(t, db, func(d *server.Deps) {
		d.PublicURL = "http://localhost"
		d.Origins = []string{"http://localhost", appOrigin}
		d.Web = web.Assets()
	})
}

// The native JSON API answers CORS to ferry's origins, so the JS SDK runs
// on a host app's page with a bearer token or a ticket: preflights are
// answered with the methods and headers the SDK sends, answers expose
// ETag and the problem headers, and credentials are never allowed.
func TestNativeAPICORS(t *testing.T) {
	db := testenv.NewDB(t, "sqlite")
	a := newCORSAPI(t, db)
	for _, tc := range []struct{ method, path, headers string }{
		{"POST", "/uploads", "authorization, content-type"},
		{"POST", "/uploads/upl_x/presign", "authorization, content-type"},
		{"PUT", "/uploads/upl_x/parts/1", "authorization, content-type"},
		{"DELETE", "/uploads/upl_x", "authorization"},
		{"GET", "/files", "authorization"},
		{"DELETE", "/files/fil_x", "authorization"},
		{"POST", "/files/fil_x/grants", "authorization, content-type"},
		{"GET", "/grants/grt_x", "authorization"},
		{"POST", "/exports", "authorization, content-type, idempotency-key"},
		{"GET", "/me", "authorization"},
		{"POST", "/tickets", "authorization, content-type"},
		{"GET", "/download/fil_x", "range, if-range"},
		{"GET", "/assets/ferry.js", ""},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			r := a.do("OPTIONS", tc.path, "", nil, "Origin", appOrigin,
				"Access-Control-Request-Method", tc.method, "Access-Control-Request-Headers", tc.headers)
			h := r.Header
			if r.Status != 204 || h.Get("Access-Control-Allow-Origin") != appOrigin || h.Get("Access-Control-Allow-Credentials") != "" {
				t.Fatalf("preflight: %d %v", r.Status, h)
			}
			if !strings.Contains(h.Get("Access-Control-Allow-Methods"), tc.method) {
				t.Fatalf("methods %q lack %s", h.Get("Access-Control-Allow-Methods"), tc.method)
			}
			allowed := strings.ToLower(h.Get("Access-Control-Allow-Headers"))
			for _, want := range strings.Split(tc.headers, ", ") {
				if want != "" && !strings.Contains(allowed, want) {
					t.Fatalf("headers %q lack %s", allowed, want)
				}
			}
		})
	}

	tok := a.user("alice")
	r := a.do("GET", "/me", tok, nil, "Origin", appOrigin, "Sec-Fetch-Site", "cross-site")
	if r.Status != 200 || r.Header.Get("Access-Control-Allow-Origin") != appOrigin || r.Header.Get("Access-Control-Allow-Credentials") != "" {
		t.Fatalf("GET /me with a bearer: %d %v", r.Status, r.Header)
	}
	exposed := strings.ToLower(r.Header.Get("Access-Control-Expose-Headers"))
	for _, want := range []string{"etag", "location", "retry-after", "x-request-id"} {
		if !strings.Contains(exposed, want) {
			t.Fatalf("exposed headers %q lack %s", exposed, want)
		}
	}
	// A refusal must be readable by the page, with its request id.
	r = a.do("POST", "/uploads", "", map[string]any{}, "Origin", appOrigin)
	if r.Status != 401 || r.Header.Get("Access-Control-Allow-Origin") != appOrigin || r.Header.Get("X-Request-Id") == "" {
		t.Fatalf("a refusal: %d %v", r.Status, r.Header)
	}
	// The SDK, imported by a page elsewhere, and its worker, fetched to
	// start it from a Blob URL.
	for _, p := range []string{"/assets/ferry.js", "/assets/hash-worker.js"} {
		if r := a.do("GET", p, "", nil, "Origin", appOrigin); r.Status != 200 || r.Header.Get("Access-Control-Allow-Origin") != appOrigin {
			t.Fatalf("GET %s: %d %v", p, r.Status, r.Header)
		}
	}
	// Sign-in and sign-out are for ferry's own pages.
	if r := a.do("OPTIONS", "/session", "", nil, "Origin", appOrigin, "Access-Control-Request-Method", "POST"); r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("CORS on /session: %v", r.Header)
	}
}

// An origin ferry does not list gets no CORS header at all: its
// preflights are refused and its pages cannot read any answer.
func TestNativeAPICORSUnknownOrigin(t *testing.T) {
	db := testenv.NewDB(t, "sqlite")
	a := newCORSAPI(t, db)
	tok := a.user("alice")
	noCORS := func(t *testing.T, r reply) {
		t.Helper()
		for k := range r.Header {
			if strings.HasPrefix(strings.ToLower(k), "access-control-") {
				t.Fatalf("%s sent to an unknown origin: %v", k, r.Header)
			}
		}
	}
	for _, p := range []string{"/uploads", "/files", "/me", "/exports", "/assets/ferry.js"} {
		r := a.do("OPTIONS", p, "", nil, "Origin", "https://evil.example", "Access-Control-Request-Method", "POST",
			"Access-Control-Request-Headers", "authorization")
		if r.Status != 403 {
			t.Fatalf("preflight to %s from an unknown origin: %d", p, r.Status)
		}
		noCORS(t, r)
	}
	r := a.do("GET", "/me", tok, nil, "Origin", "https://evil.example")
	noCORS(t, r)
	r = a.do("GET", "/assets/ferry.js", "", nil, "Origin", "https://evil.example")
	noCORS(t, r)
}

// A session cookie is never a credential cross-origin, not even from an
// allowed origin: the request is refused before it has any effect (a
// browser would withhold only the answer), and from ferry's own pages the
// same cookie works.
func TestNativeAPICookieNeverCrossOrigin(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		a := newCORSAPI(t, db)
		tok := a.user("alice")
		r := a.do("POST", "/session", "", map[string]any{"token": tok}, "Origin", "http://localhost", "Sec-Fetch-Site", "same-origin")
		cookie := r.Header.Get("Set-Cookie")
		if r.Status != 200 || cookie == "" {
			t.Fatalf("sign in: %d %s", r.Status, r.Body)
		}
		cookie = cookie[:strings.Index(cookie, ";")]
		create := map[string]any{"file_name": "a.bin", "size": 6 << 20}
		for _, tc := range []struct {
			name   string
			header []string
		}{
			{"allowed origin", []string{"Origin", appOrigin, "Sec-Fetch-Site", "cross-site"}},
			{"allowed origin, old browser", []string{"Origin", appOrigin}},
			{"sibling site", []string{"Origin", "http://evil.localhost", "Sec-Fetch-Site", "same-site"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				h := append([]string{"Cookie", cookie}, tc.header...)
				for _, req := range []struct {
					method, path string
					body         any
				}{{"GET", "/me", nil}, {"GET", "/files", nil}, {"POST", "/uploads", create}} {
					r := a.do(req.method, req.path, "", req.body, h...)
					if r.Status != 403 || r.json(t)["code"] != "cross_origin" || r.Header.Get("Access-Control-Allow-Credentials") != "" {
						t.Fatalf("%s %s with a cookie: %d %v %s", req.method, req.path, r.Status, r.Header, r.Body)
					}
				}
			})
		}
		var n int64
		if err := db.DB.Table("uploads").Count(&n).Error; err != nil || n != 0 {
			t.Fatalf("a cross-origin cookie made %d uploads (%v)", n, err)
		}
		for _, h := range [][]string{{"Sec-Fetch-Site", "same-origin", "Origin", "http://localhost"}, {"Origin", "http://localhost"}, {}} {
			if r := a.do("POST", "/uploads", "", create, append([]string{"Cookie", cookie}, h...)...); r.Status != 201 {
				t.Fatalf("cookie from ferry's page %v: %d %s", h, r.Status, r.Body)
			}
		}
	})
}
