package s3store_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/s3store"
)

func put(t *testing.T, req s3store.PresignedRequest, body []byte, extra map[string]string) (int, string) {
	t.Helper()
	r, err := http.NewRequest(req.Method, req.URL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range req.Headers {
		r.Header.Set(k, v)
	}
	for k, v := range extra {
		r.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func md5b64(b []byte) string {
	s := md5.Sum(b)
	return base64.StdEncoding.EncodeToString(s[:])
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// The embedded S3 server is real: it honours presigned URLs and refuses
// tampered, expired and corrupted ones, as AWS S3 does.
func TestPresignedPutIsEnforced(t *testing.T) {
	st := testenv.Store(t)
	ctx := context.Background()
	body := []byte("hello, ferry")

	t.Run("valid", func(t *testing.T) {
		req, err := st.PresignPut(ctx, "ok", "", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if code, msg := put(t, req, body, nil); code != 200 {
			t.Fatalf("PUT = %d %s, want 200", code, msg)
		}
		info, err := st.Head(ctx, "ok")
		if err != nil || info.Size != int64(len(body)) {
			t.Fatalf("head: %+v %v", info, err)
		}
	})
	t.Run("tampered signature", func(t *testing.T) {
		req, _ := st.PresignPut(ctx, "tampered", "", time.Minute)
		i := strings.Index(req.URL, "X-Amz-Signature=") + len("X-Amz-Signature=")
		flip := byte('0')
		if req.URL[i] == '0' {
			flip = '1'
		}
		req.URL = req.URL[:i] + string(flip) + req.URL[i+1:]
		if code, _ := put(t, req, body, nil); code != 403 {
			t.Fatalf("tampered PUT = %d, want 403", code)
		}
		if _, err := st.Head(ctx, "tampered"); !errors.Is(err, s3store.ErrNotFound) {
			t.Fatalf("tampered object exists: %v", err)
		}
	})
	t.Run("expired", func(t *testing.T) {
		req, _ := st.PresignPut(ctx, "expired", "", time.Second)
		time.Sleep(2100 * time.Millisecond)
		if code, _ := put(t, req, body, nil); code != 403 {
			t.Fatalf("expired PUT = %d, want 403", code)
		}
	})
	t.Run("content-md5 mismatch", func(t *testing.T) {
		req, err := st.PresignPut(ctx, "md5", md5b64(body), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := req.Headers["Content-Md5"]; !ok {
			t.Fatalf("signed headers %v lack Content-MD5", req.Headers)
		}
		corrupt := append([]byte{}, body...)
		corrupt[0] ^= 1
		code, msg := put(t, req, corrupt, nil)
		if code != 400 || !strings.Contains(msg, "BadDigest") {
			t.Fatalf("corrupt PUT = %d %s, want 400 BadDigest", code, msg)
		}
		// Dropping the pinned header breaks the signature instead.
		if code, _ := put(t, req, body, map[string]string{"Content-Md5": md5b64([]byte("other"))}); code != 400 && code != 403 {
			t.Fatalf("PUT with another Content-MD5 = %d, want 400 or 403", code)
		}
		if code, msg := put(t, req, body, nil); code != 200 {
			t.Fatalf("matching PUT = %d %s", code, msg)
		}
	})
}

func TestMultipartLifecycle(t *testing.T) {
	st := testenv.Store(t)
	ctx := context.Background()
	key := "mp/object"
	id, err := st.CreateMultipart(ctx, key, "application/octet-stream")
	if err != nil {
		t.Fatal(err)
	}
	p1, p2 := randomBytes(5<<20), randomBytes(1234)
	var parts []s3store.CompletedPart
	for i, data := range [][]byte{p1, p2} {
		req, err := st.PresignPart(ctx, key, id, int32(i+1), md5b64(data), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if code, msg := put(t, req, data, nil); code != 200 {
			t.Fatalf("part %d: %d %s", i+1, code, msg)
		}
	}
	listed, err := st.ListParts(ctx, key, id)
	if err != nil || len(listed) != 2 || listed[0].Size != 5<<20 || listed[1].Size != 1234 {
		t.Fatalf("ListParts = %+v, %v", listed, err)
	}
	for _, p := range listed {
		parts = append(parts, s3store.CompletedPart{Number: p.Number, ETag: p.ETag})
	}
	ups, err := st.ListMultipartUploads(ctx, "mp/")
	if err != nil || len(ups) != 1 || ups[0].UploadID != id {
		t.Fatalf("ListMultipartUploads = %+v, %v", ups, err)
	}
	if _, err := st.CompleteMultipart(ctx, key, id, parts); err != nil {
		t.Fatal(err)
	}
	rc, err := st.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	io.Copy(h, rc)
	rc.Close()
	want := sha256.Sum256(append(append([]byte{}, p1...), p2...))
	if !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatal("merged object differs from its parts")
	}
	if _, err := st.ListParts(ctx, key, id); !errors.Is(err, s3store.ErrNoSuchUpload) {
		t.Fatalf("ListParts after complete: %v, want ErrNoSuchUpload", err)
	}
	if err := st.AbortMultipart(ctx, key, id); err != nil {
		t.Fatalf("abort of a finished upload should be a no-op: %v", err)
	}
}

func TestCompleteRejectsSmallParts(t *testing.T) {
	st := testenv.Store(t)
	ctx := context.Background()
	id, _ := st.CreateMultipart(ctx, "small", "")
	var parts []s3store.CompletedPart
	for i := 1; i <= 2; i++ {
		req, _ := st.PresignPart(ctx, "small", id, int32(i), "", time.Minute)
		put(t, req, []byte("tiny"), nil)
	}
	listed, _ := st.ListParts(ctx, "small", id)
	for _, p := range listed {
		parts = append(parts, s3store.CompletedPart{Number: p.Number, ETag: p.ETag})
	}
	if _, err := st.CompleteMultipart(ctx, "small", id, parts); !errors.Is(err, s3store.ErrInvalidParts) {
		t.Fatalf("complete with 4-byte parts: %v, want ErrInvalidParts", err)
	}
}

// ListParts and ListMultipartUploads follow pagination past 1,000 entries.
func TestListingsPaginate(t *testing.T) {
	if testing.Short() {
		t.Skip("uploads 1,050 parts")
	}
	st := testenv.Store(t)
	ctx := context.Background()
	id, err := st.CreateMultipart(ctx, "many", "")
	if err != nil {
		t.Fatal(err)
	}
	const n = 1050
	parallel(t, n, func(i int) error {
		req, err := st.PresignPart(ctx, "many", id, int32(i+1), "", time.Minute)
		if err != nil {
			return err
		}
		r, _ := http.NewRequest(http.MethodPut, req.URL, strings.NewReader("x"))
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("part %d: %d", i+1, resp.StatusCode)
		}
		return nil
	})
	parts, err := st.ListParts(ctx, "many", id)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != n || parts[0].Number != 1 || parts[n-1].Number != n {
		t.Fatalf("ListParts returned %d parts, want %d", len(parts), n)
	}

	parallel(t, n, func(i int) error {
		_, err := st.CreateMultipart(ctx, fmt.Sprintf("orphans/%04d", i), "")
		return err
	})
	ups, err := st.ListMultipartUploads(ctx, "orphans/")
	if err != nil {
		t.Fatal(err)
	}
	if len(ups) != n {
		t.Fatalf("ListMultipartUploads returned %d, want %d", len(ups), n)
	}
}

func parallel(t *testing.T, n int, fn func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(i); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestObjectReaderIsLazyAndExact(t *testing.T) {
	st := testenv.Store(t)
	ctx := context.Background()
	data := randomBytes(3<<20 + 17)
	if err := st.Put(ctx, "obj", bytes.NewReader(data), int64(len(data)), ""); err != nil {
		t.Fatal(err)
	}
	r := st.Open(ctx, "obj", int64(len(data)))
	defer r.Close()
	if end, _ := r.Seek(0, io.SeekEnd); end != int64(len(data)) || r.GETs() != 0 {
		t.Fatalf("SeekEnd = %d after %d GETs; want size and no GET", end, r.GETs())
	}
	for _, rg := range [][2]int64{{0, 10}, {1 << 20, 4096}, {int64(len(data)) - 5, 5}, {100, 1}} {
		r.Seek(rg[0], io.SeekStart)
		got := make([]byte, rg[1])
		if _, err := io.ReadFull(r, got); err != nil {
			t.Fatalf("range %v: %v", rg, err)
		}
		if !bytes.Equal(got, data[rg[0]:rg[0]+rg[1]]) {
			t.Fatalf("range %v: wrong bytes", rg)
		}
	}
	if r.GETs() != 4 {
		t.Fatalf("GETs = %d, want one per range (4)", r.GETs())
	}
	// Sequential reads continue the same GET.
	r.Seek(0, io.SeekStart)
	all, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(all, data) || r.GETs() != 5 {
		t.Fatalf("full read: %d bytes, %v, %d GETs", len(all), err, r.GETs())
	}
	// A database that claims more bytes than the object has must not pass.
	long := st.Open(ctx, "obj", int64(len(data))+10)
	if _, err := io.ReadAll(long); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short object: %v, want ErrUnexpectedEOF", err)
	}
}

func TestWriterStreamsMultipart(t *testing.T) {
	st := testenv.Store(t)
	ctx := context.Background()
	for _, size := range []int{0, 1000, 5 << 20, 12<<20 + 3} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			data := randomBytes(size)
			key := fmt.Sprintf("w/%d", size)
			w := st.NewWriter(ctx, key, "application/gzip", 5<<20)
			// Odd-sized writes cross part boundaries.
			for off := 0; off < len(data); off += 777_777 {
				end := min(off+777_777, len(data))
				if _, err := w.Write(data[off:end]); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			rc, err := st.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(rc)
			rc.Close()
			if !bytes.Equal(got, data) {
				t.Fatalf("read back %d bytes, want %d identical", len(got), len(data))
			}
		})
	}
	t.Run("abort leaves nothing", func(t *testing.T) {
		w := st.NewWriter(ctx, "w/aborted", "", 5<<20)
		w.Write(randomBytes(11 << 20))
		if err := w.Abort(); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Head(ctx, "w/aborted"); !errors.Is(err, s3store.ErrNotFound) {
			t.Fatalf("aborted object: %v", err)
		}
		if ups, _ := st.ListMultipartUploads(ctx, "w/aborted"); len(ups) != 0 {
			t.Fatalf("aborted writer left %d multipart uploads", len(ups))
		}
	})
}

func TestErrorsAreTranslated(t *testing.T) {
	st := testenv.Store(t)
	ctx := context.Background()
	if _, err := st.Head(ctx, "missing"); !errors.Is(err, s3store.ErrNotFound) {
		t.Errorf("Head missing: %v", err)
	}
	if _, err := st.Get(ctx, "missing"); !errors.Is(err, s3store.ErrNotFound) {
		t.Errorf("Get missing: %v", err)
	}
	if _, err := st.ListParts(ctx, "k", "bogus-upload"); !errors.Is(err, s3store.ErrNoSuchUpload) {
		t.Errorf("ListParts bogus: %v", err)
	}
	if err := st.Delete(ctx, "missing"); err != nil {
		t.Errorf("Delete missing: %v", err)
	}
	srv := testenv.S3(t)
	wrong := testenv.StoreFor(t, srv, "t-"+testenv.RandomHex(4))
	_ = wrong
	bad, _ := s3store.New(ctx, s3store.Config{Endpoint: srv.Endpoint, Region: "us-east-1", Bucket: "t-nosuch" + testenv.RandomHex(4),
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PathStyle: true})
	if err := bad.Ready(ctx); !errors.Is(err, s3store.ErrNoSuchBucket) {
		t.Errorf("Ready on a missing bucket: %v", err)
	}
	denied, _ := s3store.New(ctx, s3store.Config{Endpoint: srv.Endpoint, Region: "us-east-1", Bucket: st.Bucket(),
		AccessKey: srv.AccessKey, SecretKey: "wrong-secret", PathStyle: true})
	if _, err := denied.Head(ctx, "x"); !errors.Is(err, s3store.ErrAccessDenied) {
		t.Errorf("wrong secret: %v", err)
	}
	down, _ := s3store.New(ctx, s3store.Config{Endpoint: "http://127.0.0.1:1", Region: "us-east-1", Bucket: "any",
		AccessKey: "a", SecretKey: "b", PathStyle: true, Timeout: 5 * time.Second})
	if err := down.Ready(ctx); !errors.Is(err, s3store.ErrUnavailable) {
		t.Errorf("unreachable endpoint: %v", err)
	}
}

// Bootstrap sets a CORS rule that lets ferry's origin PUT parts with a
// pinned Content-MD5 and read the ETag.
func TestBootstrapCORS(t *testing.T) {
	srv := testenv.S3(t)
	ctx := context.Background()
	bucket := "t-cors" + testenv.RandomHex(4)
	st, _ := s3store.New(ctx, s3store.Config{Endpoint: srv.Endpoint, Region: "us-east-1", Bucket: bucket,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PathStyle: true})
	rep, err := st.Bootstrap(ctx, s3store.BootstrapOptions{Create: true, Region: "us-east-1",
		CORSOrigins: []string{"http://app.test:8080"}, AbortIncompleteAfterDays: 2})
	if err != nil || !rep.Created || !rep.CORS {
		t.Fatalf("bootstrap: %+v %v", rep, err)
	}
	t.Logf("bootstrap warnings: %v", rep.Warnings)
	req, _ := http.NewRequest(http.MethodOptions, srv.Endpoint+"/"+bucket+"/some/key?partNumber=1&uploadId=x", nil)
	req.Header.Set("Origin", "http://app.test:8080")
	req.Header.Set("Access-Control-Request-Method", "PUT")
	req.Header.Set("Access-Control-Request-Headers", "content-md5")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("Access-Control-Allow-Origin"); got != "http://app.test:8080" {
		t.Errorf("Allow-Origin = %q", got)
	}
	if got := strings.ToLower(resp.Header.Get("Access-Control-Expose-Headers")); !strings.Contains(got, "etag") {
		t.Errorf("Expose-Headers = %q, want ETag", got)
	}
	if got := strings.ToLower(resp.Header.Get("Access-Control-Allow-Headers")); !strings.Contains(got, "content-md5") {
		t.Errorf("Allow-Headers = %q, want content-md5", got)
	}
	// Another origin is not allowed.
	req.Header.Set("Origin", "http://evil.test")
	resp, _ = http.DefaultClient.Do(req)
	resp.Body.Close()
	if got := resp.Header.Get("Access-Control-Allow-Origin"); got == "http://evil.test" || got == "*" {
		t.Errorf("foreign origin allowed: %q", got)
	}
	// Bootstrapping again is harmless.
	if _, err := st.Bootstrap(ctx, s3store.BootstrapOptions{Create: true, CORSOrigins: []string{"http://app.test:8080"}}); err != nil {
		t.Fatalf("second bootstrap: %v", err)
	}
}

// PresignParts signs a batch like PresignPart does one by one: every URL
// works for its own part only, pinned Content-MD5s are enforced, and the
// lifetime is kept.
func TestPresignPartsBatch(t *testing.T) {
	st := testenv.Store(t)
	ctx := context.Background()
	id, err := st.CreateMultipart(ctx, "batch", "")
	if err != nil {
		t.Fatal(err)
	}
	data := map[int32][]byte{1: randomBytes(5 << 20), 2: randomBytes(5 << 20), 3: randomBytes(1000)}
	order := []int32{3, 1, 2}
	reqs, err := st.PresignParts(ctx, "batch", id, order, map[int32]string{2: md5b64(data[2])}, time.Minute)
	if err != nil || len(reqs) != 3 {
		t.Fatalf("PresignParts = %d, %v", len(reqs), err)
	}
	single, _ := st.PresignPart(ctx, "batch", id, 1, "", time.Minute)
	want, _ := url.Parse(single.URL)
	for i, req := range reqs {
		got, _ := url.Parse(req.URL)
		if got.Path != want.Path || len(got.Query()) != len(want.Query()) || got.Query().Get("partNumber") != fmt.Sprint(order[i]) {
			t.Fatalf("URL %d = %s, want the shape of %s", i, req.URL, single.URL)
		}
	}
	if reqs[2].Headers["Content-Md5"] != md5b64(data[2]) {
		t.Fatalf("headers of the pinned part = %v", reqs[2].Headers)
	}
	// Part 1's URL cannot upload part 3.
	if code, _ := put(t, reqs[1], data[3], nil); code != 200 {
		t.Fatalf("PUT part 1: %d", code)
	}
	corrupt := append([]byte{}, data[2]...)
	corrupt[7] ^= 1
	if code, msg := put(t, reqs[2], corrupt, nil); code != 400 || !strings.Contains(msg, "BadDigest") {
		t.Fatalf("corrupt pinned part: %d %s", code, msg)
	}
	for i, n := range order {
		if code, msg := put(t, reqs[i], data[n], nil); code != 200 {
			t.Fatalf("PUT part %d: %d %s", n, code, msg)
		}
	}
	parts, err := st.ListParts(ctx, "batch", id)
	if err != nil || len(parts) != 3 {
		t.Fatalf("ListParts = %+v %v", parts, err)
	}
	for _, p := range parts {
		if p.Size != int64(len(data[p.Number])) || strings.Trim(p.ETag, `"`) != fmt.Sprintf("%x", md5.Sum(data[p.Number])) {
			t.Fatalf("part %d holds other bytes: %+v", p.Number, p)
		}
	}
	short, err := st.PresignParts(ctx, "batch", id, []int32{1, 2}, nil, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2100 * time.Millisecond)
	if code, _ := put(t, short[1], []byte("late"), nil); code != 403 {
		t.Fatalf("expired derived URL: %d, want 403", code)
	}
}

// A reader told which spans will be read asks S3 for exactly those bytes, one
// GET per span, and still reads on past a span's end when asked to.
func TestObjectReaderExpectedSpans(t *testing.T) {
	st := testenv.Store(t)
	ctx := context.Background()
	data := randomBytes(1<<20 + 3)
	if err := st.Put(ctx, "obj", bytes.NewReader(data), int64(len(data)), ""); err != nil {
		t.Fatal(err)
	}
	r := st.Open(ctx, "obj", int64(len(data)))
	defer r.Close()
	spans := [][2]int64{{10, 100}, {500_000, 70_000}, {int64(len(data)) - 9, 50}}
	for _, sp := range spans {
		r.Expect(sp[0], sp[1])
	}
	for _, sp := range spans {
		want := data[sp[0]:min(sp[0]+sp[1], int64(len(data)))]
		r.Seek(sp[0], io.SeekStart)
		got := make([]byte, len(want))
		if _, err := io.ReadFull(r, got); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("span %v: %v, equal=%v", sp, err, bytes.Equal(got, want))
		}
	}
	if r.GETs() != len(spans) {
		t.Fatalf("GETs = %d, want one per span (%d)", r.GETs(), len(spans))
	}
	// Reading across a span's end continues with a GET for the rest.
	r.Seek(20, io.SeekStart)
	all, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(all, data[20:]) {
		t.Fatalf("read across span end: %d bytes, %v", len(all), err)
	}
	if r.GETs() != len(spans)+2 {
		t.Fatalf("GETs = %d, want %d", r.GETs(), len(spans)+2)
	}
}

func postForm(t *testing.T, pol s3store.PostPolicy, fields map[string]string, file []byte) (int, string) {
	t.Helper()
	return testenv.PostForm(t, pol.URL, fields, file)
}

// A signed POST policy lets a browser form upload exactly the object it
// names and nothing else: the embedded S3 checks the SigV4 signature over
// the policy, every pinned field and the size range.
func TestPresignPost(t *testing.T) {
	st := testenv.Store(t)
	ctx := context.Background()
	pol, err := st.PresignPost(ctx, "uploads/post-1", s3store.PostOptions{
		ContentType: "image/jpeg", MinSize: 1, MaxSize: 1 << 20,
		Fields: map[string]string{"success_action_status": "201", "x-amz-meta-origin": "uppy"},
	}, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"key", "policy", "x-amz-algorithm", "x-amz-credential", "x-amz-date", "x-amz-signature", "Content-Type", "success_action_status"} {
		if pol.Fields[f] == "" {
			t.Fatalf("field %s missing from %v", f, pol.Fields)
		}
	}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for f, x := range pol.Fields {
			m[f] = x
		}
		m[k] = v
		return m
	}
	tests := []struct {
		name   string
		fields map[string]string
		file   []byte
		want   int
	}{
		{"another key", with("key", "uploads/other"), []byte("x"), 403},
		{"another content type", with("Content-Type", "text/html"), []byte("x"), 403},
		{"tampered signature", with("x-amz-signature", strings.Repeat("0", 64)), []byte("x"), 403},
		{"too large", pol.Fields, make([]byte, 1<<20+1), 400},
		{"empty", pol.Fields, nil, 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if code, body := postForm(t, pol, tc.fields, tc.file); code != tc.want {
				t.Fatalf("POST = %d %s, want %d", code, body, tc.want)
			}
		})
	}
	body := randomBytes(300 << 10)
	if code, resp := postForm(t, pol, pol.Fields, body); code != 201 {
		t.Fatalf("POST = %d %s", code, resp)
	}
	got, err := st.Get(ctx, "uploads/post-1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(got)
	got.Close()
	info, _ := st.Head(ctx, "uploads/post-1")
	if !bytes.Equal(b, body) || info.ContentType != "image/jpeg" {
		t.Fatalf("object: %d bytes, type %q", len(b), info.ContentType)
	}
	if _, err := st.Head(ctx, "uploads/other"); !errors.Is(err, s3store.ErrNotFound) {
		t.Fatalf("refused POSTs left an object: %v", err)
	}
}
