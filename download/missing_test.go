package download_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
)

// s3Counter puts a reverse proxy in front of the test S3 server that
// counts the GETs of objects under prefix, and points e's store at it.
func s3Counter(t *testing.T, e *env, prefix string) *atomic.Int32 {
	t.Helper()
	srv := testenv.S3(t)
	target, _ := url.Parse(srv.Endpoint)
	var gets atomic.Int32
	rp := httputil.NewSingleHostReverseProxy(target) // keeps the Host that was signed
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, prefix) {
			gets.Add(1)
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	e.store = testenv.StoreFor(t, testenv.S3Server{Endpoint: proxy.URL, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}, e.store.Bucket())
	e.svc, e.reg, e.srv = e.serve(keyK1)
	return &gets
}

// An object missing from the bucket answers a 500 problem, counted and
// logged as one, not a 200 with Content-Length 318 that closes after no
// bytes. The S3 GET that finds it missing is the one that would have sent
// the body: a present object still costs one GET per range, HEAD none.
func TestMissingObjectIsAnError(t *testing.T) {
	e := newEnv(t, testenv.NewDB(t, models.SQLite))
	gets := s3Counter(t, e, "objects/")
	owner, _ := e.user("alice")
	data := randomData(t, 318)
	e.put("exp_here", owner, data, "here.gz")
	e.put("exp_gone", owner, data, "gone.gz")
	if _, err := e.store.DeletePrefix(context.Background(), "objects/exp_gone"); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name, id string
		hdr      []string
		status   int
		gets     int32
	}{
		{"present, whole", "exp_here", nil, 200, 1},
		{"present, one range", "exp_here", []string{"Range", "bytes=10-19"}, 206, 1},
		{"present, two ranges", "exp_here", []string{"Range", "bytes=0-9,100-109"}, 206, 2},
		{"present, HEAD", "exp_here", nil, 200, 0},
		{"missing, whole", "exp_gone", nil, 500, 1},
		{"missing, one range", "exp_gone", []string{"Range", "bytes=10-19"}, 500, 1},
		{"missing, two ranges", "exp_gone", []string{"Range", "bytes=0-9,100-109"}, 500, 1},
		{"missing, HEAD", "exp_gone", nil, 200, 0}, // HEAD never asks S3
		{"missing, not modified", "exp_gone", []string{"If-None-Match", `"` + e.res.items["exp_gone"].res.SHA256 + `"`}, 304, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			method := "GET"
			if strings.HasSuffix(c.name, "HEAD") {
				method = "HEAD"
			}
			before := gets.Load()
			r := do(t, method, e.link(e.svc, e.srv, c.id, owner), c.hdr...)
			if r.status != c.status {
				t.Fatalf("status %d, want %d: %s", r.status, c.status, r.body)
			}
			if got := gets.Load() - before; got != c.gets {
				t.Fatalf("%d S3 GETs, want %d", got, c.gets)
			}
			if c.status != 500 {
				return
			}
			var p struct{ Code, Detail string }
			if err := json.Unmarshal(r.body, &p); err != nil || r.header.Get("Content-Type") != "application/problem+json" ||
				r.header.Get("Content-Length") != strconv.Itoa(len(r.body)) || p.Code != "internal" {
				t.Fatalf("answer %v %s: want a whole 500 problem (%v)", r.header, r.body, err)
			}
			if strings.Contains(p.Detail, "objects/") || r.header.Get("ETag") != "" || r.header.Get("Content-Disposition") != "" {
				t.Fatalf("the problem carries the object's headers or internal text: %v %s", r.header, r.body)
			}
		})
	}
	if got := testenv.Counter(t, e.reg, "ferry_downloads_total", "status", "500"); got != 3 {
		t.Errorf("ferry_downloads_total{status=500} = %v, want 3", got)
	}
	var logged int64
	e.db.Model(&models.DownloadLog{}).Where("resource_id = ? AND status = ? AND code = ? AND bytes_sent = 0", "exp_gone", 500, "internal").Count(&logged)
	if logged != 3 {
		t.Errorf("%d download-log rows of 500 for the missing object, want 3", logged)
	}
	if !strings.Contains(e.logs.warnings(), "download failed") {
		t.Errorf("no error logged: %s", e.logs.warnings())
	}
}
