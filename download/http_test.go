package download_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferry-io/ferry/download"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/s3store"
)

// want describes an expected answer. spans are the byte ranges of the body
// ([start, end] inclusive): none for a full 200 body, one for a single-part
// 206, several for multipart/byteranges.
type want struct {
	status       int
	contentRange string // "" means absent (ignored for multipart)
	spans        [][2]int64
	noBody       bool
}

func check(t *testing.T, r reply, data []byte, w want) {
	t.Helper()
	if r.status != w.status {
		t.Fatalf("status %d, want %d; body %.200s", r.status, w.status, r.body)
	}
	n := int64(len(data))
	mt, params, _ := mime.ParseMediaType(r.header.Get("Content-Type"))
	switch {
	case w.noBody:
		if len(r.body) != 0 {
			t.Fatalf("%d body bytes, want none", len(r.body))
		}
	case w.status == http.StatusOK:
		if !bytes.Equal(r.body, data) {
			t.Fatalf("200 body of %d bytes is not the object (%d bytes)", len(r.body), n)
		}
	case w.status == http.StatusPartialContent && len(w.spans) == 1:
		sp := w.spans[0]
		if !bytes.Equal(r.body, data[sp[0]:sp[1]+1]) {
			t.Fatalf("206 body is not bytes %d-%d", sp[0], sp[1])
		}
	case w.status == http.StatusPartialContent:
		if mt != "multipart/byteranges" {
			t.Fatalf("Content-Type %q, want multipart/byteranges", mt)
		}
		mr := multipart.NewReader(bytes.NewReader(r.body), params["boundary"])
		for i, sp := range w.spans {
			p, err := mr.NextPart()
			if err != nil {
				t.Fatalf("part %d: %v", i, err)
			}
			if got, exp := p.Header.Get("Content-Range"), fmt.Sprintf("bytes %d-%d/%d", sp[0], sp[1], n); got != exp {
				t.Fatalf("part %d Content-Range %q, want %q", i, got, exp)
			}
			body, _ := io.ReadAll(p)
			if !bytes.Equal(body, data[sp[0]:sp[1]+1]) {
				t.Fatalf("part %d has the wrong bytes", i)
			}
		}
		if _, err := mr.NextPart(); err != io.EOF {
			t.Fatalf("more parts than %d: %v", len(w.spans), err)
		}
		return
	}
	if got := r.header.Get("Content-Range"); got != w.contentRange {
		t.Fatalf("Content-Range %q, want %q", got, w.contentRange)
	}
	if w.status >= 400 {
		if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
			t.Fatalf("error Content-Type %q, want application/problem+json", ct)
		}
	}
}

func single(a, b int64, n int) want {
	return want{status: 206, contentRange: fmt.Sprintf("bytes %d-%d/%d", a, b, n), spans: [][2]int64{{a, b}}}
}

// TestRanges is the RFC 9110 behaviour a resuming client relies on, against
// the real router, service, database and S3.
func TestRanges(t *testing.T) {
	e := newEnv(t, testenv.NewDB(t, models.SQLite))
	owner, _ := e.user("alice")
	const n = 100_000
	data := randomData(t, n)
	sum := e.put("exp_ranges", owner, data, "chat export.jsonl.gz")
	etag := `"` + sum + `"`
	url := e.link(e.svc, e.srv, "exp_ranges", owner)
	lastMod := "Fri, 30 Oct 2026 08:00:00 GMT"
	unsat := want{status: 416, contentRange: "bytes */100000"}

	for _, c := range []struct {
		name   string
		method string
		hdr    []string
		want   want
	}{
		{"full", "GET", nil, want{status: 200}},
		{"open range N-", "GET", []string{"Range", "bytes=99000-"}, single(99000, n-1, n)},
		{"closed range N-M", "GET", []string{"Range", "bytes=10-19"}, single(10, 19, n)},
		{"suffix -N", "GET", []string{"Range", "bytes=-500"}, single(n-500, n-1, n)},
		{"suffix longer than the object", "GET", []string{"Range", "bytes=-200000"}, single(0, n-1, n)},
		{"last-pos past the end", "GET", []string{"Range", "bytes=99990-200000"}, single(99990, n-1, n)},
		{"multi-range in request order", "GET", []string{"Range", "bytes=500-599,0-9,-10"}, want{status: 206, spans: [][2]int64{{500, 599}, {0, 9}, {n - 10, n - 1}}}},
		{"multi-range drops an unsatisfiable member", "GET", []string{"Range", "bytes=0-9,200000-"}, single(0, 9, n)},
		{"start at the size is 416", "GET", []string{"Range", "bytes=100000-"}, unsat},
		{"start past the size is 416", "GET", []string{"Range", "bytes=123456-123457"}, unsat},
		{"If-Range current ETag", "GET", []string{"Range", "bytes=1000-", "If-Range", etag}, single(1000, n-1, n)},
		{"If-Range stale ETag", "GET", []string{"Range", "bytes=1000-", "If-Range", `"` + strings.Repeat("0", 64) + `"`}, want{status: 200}},
		{"If-Range weak ETag", "GET", []string{"Range", "bytes=1000-", "If-Range", "W/" + etag}, want{status: 200}},
		{"If-Range exact date", "GET", []string{"Range", "bytes=1000-", "If-Range", lastMod}, single(1000, n-1, n)},
		{"If-Range other date", "GET", []string{"Range", "bytes=1000-", "If-Range", "Fri, 30 Oct 2026 08:00:01 GMT"}, want{status: 200}},
		{"If-Range without Range is ignored", "GET", []string{"If-Range", `"stale"`}, want{status: 200}},
		{"If-None-Match current ETag", "GET", []string{"If-None-Match", etag}, want{status: 304, noBody: true}},
		{"If-None-Match weak form matches too", "GET", []string{"If-None-Match", `"x", W/` + etag}, want{status: 304, noBody: true}},
		{"If-None-Match other", "GET", []string{"If-None-Match", `"x"`}, want{status: 200}},
		{"304 wins over an unsatisfiable Range", "GET", []string{"If-None-Match", etag, "Range", "bytes=999999-"}, want{status: 304, noBody: true}},
		{"If-Modified-Since later", "GET", []string{"If-Modified-Since", "Sat, 31 Oct 2026 00:00:00 GMT"}, want{status: 304, noBody: true}},
		{"If-Match other is 412", "GET", []string{"If-Match", `"x"`}, want{status: 412}},
		{"If-Match current", "GET", []string{"If-Match", etag, "Range", "bytes=0-0"}, single(0, 0, n)},
		{"HEAD", "HEAD", nil, want{status: 200, noBody: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := do(t, c.method, url, c.hdr...)
			check(t, r, data, c.want)
			if r.status == 200 || r.status == 206 || r.status == 304 {
				if r.header.Get("ETag") != etag || r.header.Get("Cache-Control") != "private, no-store" {
					t.Fatalf("ETag %q, Cache-Control %q", r.header.Get("ETag"), r.header.Get("Cache-Control"))
				}
			}
			if r.status == 200 || r.status == 206 {
				if r.header.Get("Accept-Ranges") != "bytes" || r.header.Get("Last-Modified") != lastMod {
					t.Fatalf("Accept-Ranges %q, Last-Modified %q", r.header.Get("Accept-Ranges"), r.header.Get("Last-Modified"))
				}
				if cd := r.header.Get("Content-Disposition"); cd != `attachment; filename="chat export.jsonl.gz"` {
					t.Fatalf("Content-Disposition %q", cd)
				}
			}
			if c.method == "HEAD" {
				if r.header.Get("Content-Length") != strconv.Itoa(n) || r.header.Get("Content-Type") != "application/gzip" {
					t.Fatalf("HEAD headers %v", r.header)
				}
			}
		})
	}
}

// TestRFC9110Deviations covers every place where net/http's ServeContent
// (Go 1.26) answers differently from RFC 9110 and ferry follows the RFC;
// ranges.go numbers and explains them. Each case also runs plain
// http.ServeContent and logs when it no longer deviates, so a Go upgrade
// that fixes one shows up in -v output.
func TestRFC9110Deviations(t *testing.T) {
	e := newEnv(t, testenv.NewDB(t, models.SQLite))
	owner, _ := e.user("alice")
	const n = 1000
	data := randomData(t, n)
	sum := e.put("exp_dev", owner, data, "a.bin")
	etag := `"` + sum + `"`
	url := e.link(e.svc, e.srv, "exp_dev", owner)
	e.put("exp_empty", owner, nil, "empty.bin")
	emptyURL := e.link(e.svc, e.srv, "exp_empty", owner)
	unsat := want{status: 416, contentRange: "bytes */1000"}

	many := make([]string, 20)
	for i := range many {
		many[i] = fmt.Sprintf("%d-%d", i*10, i*10)
	}
	for _, c := range []struct {
		name   string
		empty  bool
		method string
		hdr    []string
		want   want
	}{
		{"1 §14.1.1 zero suffix is unsatisfiable", false, "GET", []string{"Range", "bytes=-0"}, unsat},
		{"1 §14.1.1 zero suffix beside a good range", false, "GET", []string{"Range", "bytes=-0,0-4"}, single(0, 4, n)},
		{"2 §14.2 Range on an empty representation is ignored", true, "GET", []string{"Range", "bytes=-5"}, want{status: 200}},
		{"3 §14.1 range unit is case-insensitive", false, "GET", []string{"Range", "Bytes=0-4"}, single(0, 4, n)},
		{"3 §14.1 upper-case unit", false, "GET", []string{"Range", "BYTES=-4"}, single(n-4, n-1, n)},
		{"4 §14.2 unknown unit is ignored", false, "GET", []string{"Range", "items=0-4"}, want{status: 200}},
		{"5 §14.2 Range is ignored on HEAD", false, "HEAD", []string{"Range", "bytes=0-4"}, want{status: 200, noBody: true}},
		{"6 §14.1.2 huge last-pos means to the end", false, "GET", []string{"Range", "bytes=10-99999999999999999999"}, single(10, n-1, n)},
		{"6 §14.1.2 huge suffix means all", false, "GET", []string{"Range", "bytes=-99999999999999999999"}, single(0, n-1, n)},
		{"6 §14.1.2 huge first-pos is unsatisfiable", false, "GET", []string{"Range", "bytes=99999999999999999999-"}, unsat},
		{"7 §14.1.1 signed positions are invalid", false, "GET", []string{"Range", "bytes=+0-+4"}, unsat},
		{"7 §14.1.1 whitespace inside a range is invalid", false, "GET", []string{"Range", "bytes=0 - 4"}, unsat},
		{"8 §15.5.17 malformed set is 416 with bytes */size", false, "GET", []string{"Range", "bytes=5-1"}, unsat},
		{"8 §15.5.17 garbage is 416 with bytes */size", false, "GET", []string{"Range", "bytes=x"}, unsat},
		{"9 §15.3.7.2 overlapping ranges are coalesced, not ignored", false, "GET", []string{"Range", "bytes=0-,0-"}, single(0, n-1, n)},
		{"9 §15.3.7.2 partly overlapping pair", false, "GET", []string{"Range", "bytes=0-599,500-999"}, single(0, n-1, n)},
		{"10 §17.15 too many ranges are ignored", false, "GET", []string{"Range", "bytes=" + strings.Join(many, ",")}, want{status: 200}},
		{"11 §13.1.5 If-Range list is not a validator", false, "GET", []string{"Range", "bytes=0-4", "If-Range", etag + `, "other"`}, want{status: 200}},
		{"11 §13.1.5 If-Range with trailing junk", false, "GET", []string{"Range", "bytes=0-4", "If-Range", etag + " junk"}, want{status: 200}},
		{"12 §14.1.1 empty range set is invalid", false, "GET", []string{"Range", "bytes=,"}, unsat},
	} {
		t.Run(c.name, func(t *testing.T) {
			u, d := url, data
			if c.empty {
				u, d = emptyURL, nil
			}
			r := do(t, c.method, u, c.hdr...)
			check(t, r, d, c.want)

			// What plain net/http does with the same request.
			req := httptest.NewRequest(c.method, "/", nil)
			for i := 0; i+1 < len(c.hdr); i += 2 {
				req.Header.Add(c.hdr[i], c.hdr[i+1])
			}
			rec := httptest.NewRecorder()
			rec.Header().Set("ETag", etag)
			rec.Header().Set("Content-Type", "application/octet-stream")
			http.ServeContent(rec, req, "", time.Time{}, bytes.NewReader(d))
			if rec.Code == r.status && rec.Header().Get("Content-Range") == r.header.Get("Content-Range") {
				t.Logf("net/http no longer deviates here: %d %q", rec.Code, rec.Header().Get("Content-Range"))
			} else {
				t.Logf("net/http: %d %q; ferry: %d %q", rec.Code, rec.Header().Get("Content-Range"), r.status, r.header.Get("Content-Range"))
			}
		})
	}
}

// problemCode returns the code of a problem+json body.
func problemCode(t *testing.T, r reply) string {
	t.Helper()
	var p struct {
		Code   string `json:"code"`
		Status int    `json:"status"`
	}
	if err := json.Unmarshal(r.body, &p); err != nil || p.Status != r.status {
		t.Fatalf("not a problem document (%v): %s", err, r.body)
	}
	return p.Code
}

// TestReprDigest: a verified resource whose CRC32C ferry computed carries
// it as Repr-Digest (RFC 9530) on every answer that describes the whole
// representation (200, 206 and HEAD), so a client can check its bytes
// without a SHA-256 of its own. A resource without both (a file not
// verified yet, tagged by its S3 ETag) gets none, and a malformed value is
// never passed on.
func TestReprDigest(t *testing.T) {
	e := newEnv(t, testenv.NewDB(t, models.SQLite))
	owner, _ := e.user("alice")
	data := randomData(t, 70_000)
	e.put("exp_digest", owner, data, "d.bin")
	crc := s3store.CRC32C(data)
	setRes := func(f func(*download.Resource)) {
		e.res.mu.Lock()
		defer e.res.mu.Unlock()
		f(&e.res.items["exp_digest"].res)
	}
	url := e.link(e.svc, e.srv, "exp_digest", owner)

	if r := do(t, "GET", url); r.header.Get("Repr-Digest") != "" {
		t.Fatalf("Repr-Digest %q for a resource without a CRC32C", r.header.Get("Repr-Digest"))
	}
	setRes(func(r *download.Resource) { r.CRC32C = crc })
	for _, c := range []struct {
		method string
		hdr    []string
		status int
	}{{"GET", nil, 200}, {"GET", []string{"Range", "bytes=1000-"}, 206}, {"HEAD", nil, 200}} {
		r := do(t, c.method, url, c.hdr...)
		if r.status != c.status || r.header.Get("Repr-Digest") != "crc32c=:"+crc+":" {
			t.Fatalf("%s %v: status %d, Repr-Digest %q, want %d and crc32c=:%s:", c.method, c.hdr, r.status, r.header.Get("Repr-Digest"), c.status, crc)
		}
	}
	setRes(func(r *download.Resource) { r.CRC32C = "not base64!" })
	if r := do(t, "GET", url); r.status != 200 || r.header.Get("Repr-Digest") != "" {
		t.Fatalf("malformed CRC32C: status %d, Repr-Digest %q", r.status, r.header.Get("Repr-Digest"))
	}
	info, err := e.store.Head(context.Background(), "objects/exp_digest")
	if err != nil {
		t.Fatal(err)
	}
	setRes(func(r *download.Resource) { r.CRC32C, r.SHA256, r.StoreETag = crc, "", info.ETag })
	if r := do(t, "GET", url); r.status != 200 || r.header.Get("Repr-Digest") != "" {
		t.Fatalf("unverified resource: status %d, Repr-Digest %q", r.status, r.header.Get("Repr-Digest"))
	}
}
