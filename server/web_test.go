package server_test

import (
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
	"github.com/ferry-io/ferry/web"
)

// The UI is served from the binary: the page with its security policy,
// the bundles with their types, nothing outside the embedded files.
func TestWebUI(t *testing.T) {
	db := testenv.NewDB(t, "sqlite")
	reg := prometheus.NewRegistry()
	s, err := server.New(server.Deps{
		Log: testenv.Logger(t), Users: testenv.Must(users.New(users.Config{DB: db.DB, Now: time.Now, SessionTTL: time.Hour})), Gatherer: reg, Registerer: reg,
		MaxBodyBytes: 1 << 10, Web: web.Assets(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	tests := []struct {
		method, path string
		status       int
		ctype, body  string
	}{
		{"GET", "/", 200, "text/html", `src="/assets/app.js"`},
		{"HEAD", "/", 200, "text/html", ""},
		{"GET", "/assets/app.js", 200, "text/javascript", "hash-worker.js"},
		{"GET", "/assets/ferry.js", 200, "text/javascript", "export"},
		{"GET", "/assets/hash-worker.js", 200, "text/javascript", ""},
		{"GET", "/assets/style.css", 200, "text/css", ".meter"},
		{"GET", "/assets/nope.js", 404, "application/problem+json", "asset_not_found"},
		{"GET", "/assets/../embed.go", 404, "", ""},
		{"GET", "/assets/%2e%2e/embed.go", 404, "", ""},
		{"GET", "/assets/", 404, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, ts.URL+tc.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || !strings.HasPrefix(resp.Header.Get("Content-Type"), tc.ctype) || !strings.Contains(string(b), tc.body) {
				t.Fatalf("%d %q %.200s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
			}
			if tc.status == 200 && !strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") {
				t.Fatalf("no CSP: %v", resp.Header)
			}
		})
	}
}
