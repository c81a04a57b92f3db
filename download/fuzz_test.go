package download

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// spanChecker is content that fails the fuzz test when ServeContent reads
// a byte outside the spans the pre-filter announced: the S3 reader would
// have issued a GET for bytes nobody asked for.
type spanChecker struct {
	*bytes.Reader
	spans [][2]int64
	bad   error
}

func (c *spanChecker) Expect(start, length int64) {
	c.spans = append(c.spans, [2]int64{start, start + length})
}

func (c *spanChecker) Read(p []byte) (int, error) {
	off := c.Size() - int64(c.Len())
	n, err := c.Reader.Read(p)
	if n > 0 && len(c.spans) > 0 && c.bad == nil {
		ok := false
		for _, sp := range c.spans {
			if off >= sp[0] && off+int64(n) <= sp[1] {
				ok = true
			}
		}
		if !ok {
			c.bad = fmt.Errorf("read [%d,%d) outside the expected spans %v", off, off+int64(n), c.spans)
		}
	}
	return n, err
}

var contentRangePattern = regexp.MustCompile(`^bytes (\d+)-(\d+)/(\d+)$`)

// FuzzRange throws arbitrary Range and If-Range fields (and sizes, methods
// and ETag choices) at the pre-filter plus http.ServeContent. It must never
// panic, never answer 206 with a Content-Range outside the object or with
// bytes that are not the object's, and every 416 must say bytes */size.
//
// `go test` runs the seeds below and testdata/fuzz/FuzzRange; CI also runs
// `go test -run=^$ -fuzz=FuzzRange -fuzztime=50000x ./download`.
func FuzzRange(f *testing.F) {
	for _, s := range []struct {
		rng, ifRange string
		size         uint16
		head         bool
	}{
		{"bytes=0-", "", 100, false},
		{"bytes=-0", "", 100, false},
		{"bytes=-5", "", 0, false},
		{"bytes=0-0,-1", "", 1, false},
		{"bytes=0-,0-", "", 10, false},
		{"Bytes=1-2", "", 10, false},
		{"items=1-2", "", 10, false},
		{"bytes=0-99999999999999999999", "", 10, false},
		{"bytes=+1-+2", "", 10, false},
		{"bytes= 1-2 ,\t4-5", "", 10, false},
		{"bytes=5-1", "", 10, false},
		{"bytes=,", "", 10, false},
		{"bytes=1-2", `"etag"`, 10, false},
		{"bytes=1-2", `W/"etag"`, 10, false},
		{"bytes=1-2", "Mon, 02 Jan 2006 15:04:05 GMT", 10, false},
		{"bytes=1-2", "", 10, true},
		{"bytes=0-0,2-2,4-4,6-6,8-8,10-10,12-12,14-14,16-16,18-18,20-20,22-22,24-24,26-26,28-28,30-30,32-32", "", 40, false},
	} {
		f.Add(s.rng, s.ifRange, s.size, s.head)
	}
	modtime := time.Date(2006, 1, 2, 15, 4, 5, 0, time.UTC)
	f.Fuzz(func(t *testing.T, rng, ifRange string, size uint16, head bool) {
		n := int64(size % 4096)
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(i*7 + i>>8)
		}
		sum := sha256.Sum256(data)
		res := Resource{Key: "k", Size: n, SHA256: hex.EncodeToString(sum[:]), Name: "f.bin", ModTime: modtime}
		if ifRange == `"etag"` {
			ifRange = `"` + res.SHA256 + `"` // let the fuzzer reach the matching branch
		}
		method := http.MethodGet
		if head {
			method = http.MethodHead
		}
		r := httptest.NewRequest(method, "/download/x", nil)
		if rng != "" {
			r.Header["Range"] = []string{rng}
		}
		if ifRange != "" {
			r.Header["If-Range"] = []string{ifRange}
		}
		w := httptest.NewRecorder()
		rec := &recorder{w: w}
		obj := &spanChecker{Reader: bytes.NewReader(data)}
		if code := serveObject(rec, r, res, obj); code != 0 {
			if code != http.StatusRequestedRangeNotSatisfiable {
				t.Fatalf("held back status %d", code)
			}
			if got := w.Header().Get("Content-Range"); got != "bytes */"+strconv.FormatInt(n, 10) {
				t.Fatalf("416 with Content-Range %q", got)
			}
			return
		}
		if obj.bad != nil {
			t.Fatal(obj.bad)
		}
		body := w.Body.Bytes()
		if head {
			if len(body) != 0 || w.Code != http.StatusOK {
				t.Fatalf("HEAD: %d with %d body bytes", w.Code, len(body))
			}
			return
		}
		switch w.Code {
		case http.StatusOK:
			if !bytes.Equal(body, data) {
				t.Fatalf("200 body is not the object")
			}
		case http.StatusPartialContent:
			checkPartial(t, w.Result().Header, body, data)
		default:
			t.Fatalf("unexpected status %d", w.Code)
		}
	})
}

// checkPartial verifies a 206: every Content-Range lies inside the object
// and every part carries exactly the object's bytes for it.
func checkPartial(t *testing.T, h http.Header, body, data []byte) {
	t.Helper()
	n := int64(len(data))
	inside := func(cr string) (int64, int64) {
		m := contentRangePattern.FindStringSubmatch(cr)
		if m == nil {
			t.Fatalf("Content-Range %q", cr)
		}
		a, _ := strconv.ParseInt(m[1], 10, 64)
		b, _ := strconv.ParseInt(m[2], 10, 64)
		total, _ := strconv.ParseInt(m[3], 10, 64)
		if a < 0 || a > b || b >= n || total != n {
			t.Fatalf("Content-Range %q outside an object of %d bytes", cr, n)
		}
		return a, b
	}
	mt, params, err := mime.ParseMediaType(h.Get("Content-Type"))
	if err != nil {
		t.Fatal(err)
	}
	if mt != "multipart/byteranges" {
		a, b := inside(h.Get("Content-Range"))
		if !bytes.Equal(body, data[a:b+1]) {
			t.Fatalf("206 body is not bytes %d-%d", a, b)
		}
		return
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	parts := 0
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		a, b := inside(p.Header.Get("Content-Range"))
		got, _ := io.ReadAll(p)
		if !bytes.Equal(got, data[a:b+1]) {
			t.Fatalf("part %s has the wrong bytes", p.Header.Get("Content-Range"))
		}
		parts++
	}
	if parts < 2 || parts > maxRanges {
		t.Fatalf("multipart answer with %d parts", parts)
	}
}
