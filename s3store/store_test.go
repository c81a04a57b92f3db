package s3store_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
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

// readBack reads a whole object.
func readBack(t *testing.T, st *s3store.Store, key string) []byte {
	t.Helper()
	rc, err := st.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return got
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
		req, err := st.PresignPut(ctx, "ok", s3store.PutOptions{}, time.Minute)
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
		req, _ := st.PresignPut(ctx, "tampered", s3store.PutOptions{}, time.Minute)
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
		req, _ := st.PresignPut(ctx, "expired", s3store.PutOptions{}, time.Second)
		time.Sleep(2100 * time.Millisecond)
		if code, _ := put(t, req, body, nil); code != 403 {
			t.Fatalf("expired PUT = %d, want 403", code)
		}
	})
	t.Run("content-md5 mismatch", func(t *testing.T) {
		req, err := st.PresignPut(ctx, "md5", s3store.PutOptions{ContentMD5: md5b64(body)}, time.Minute)
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
	id, err := st.CreateMultipart(ctx, key, s3store.MultipartOptions{ContentType: "application/octet-stream"})
	if err != nil {
		t.Fatal(err)
	}
	p1, p2 := randomBytes(5<<20), randomBytes(1234)
	var parts []s3store.CompletedPart
	for i, data := range [][]byte{p1, p2} {
		req, err := st.PresignPart(ctx, key, id, s3store.PartSpec{Number: int32(i + 1), ContentMD5: md5b64(data)}, time.Minute)
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
	if _, err := st.CompleteMultipart(ctx, key, id, parts, ""); err != nil {
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
	id, _ := st.CreateMultipart(ctx, "small", s3store.MultipartOptions{})
	var parts []s3store.CompletedPart
	for i := 1; i <= 2; i++ {
		req, _ := st.PresignPart(ctx, "small", id, s3store.PartSpec{Number: int32(i)}, time.Minute)
		put(t, req, []byte("tiny"), nil)
	}
	listed, _ := st.ListParts(ctx, "small", id)
	for _, p := range listed {
		parts = append(parts, s3store.CompletedPart{Number: p.Number, ETag: p.ETag})
	}
	if _, err := st.CompleteMultipart(ctx, "small", id, parts, ""); !errors.Is(err, s3store.ErrInvalidParts) {
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
	id, err := st.CreateMultipart(ctx, "many", s3store.MultipartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 1050
	parallel(t, n, func(i int) error {
		req, err := st.PresignPart(ctx, "many", id, s3store.PartSpec{Number: int32(i + 1)}, time.Minute)
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
		_, err := st.CreateMultipart(ctx, fmt.Sprintf("orphans/%04d", i), s3store.MultipartOptions{})
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

func parallel(t testing.TB, n int, fn func(i int) error) {
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
	r := st.Open(ctx, "obj", int64(len(data)), "").(*s3store.ObjectReader)
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
	long := st.Open(ctx, "obj", int64(len(data))+10, "")
	if _, err := io.ReadAll(long); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short object: %v, want ErrUnexpectedEOF", err)
	}
}

func TestWriteObjectStreamsMultipart(t *testing.T) {
	st := testenv.Store(t)
	ctx := context.Background()
	for _, size := range []int{0, 1000, 5 << 20, 12<<20 + 3} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			data := randomBytes(size)
			key := fmt.Sprintf("w/%d", size)
			n, err := st.WriteObject(ctx, key, "application/gzip", 5<<20, func(w io.Writer) error {
				// Odd-sized writes cross part boundaries.
				for off := 0; off < len(data); off += 777_777 {
					end := min(off+777_777, len(data))
					if _, err := w.Write(data[off:end]); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil || n != int64(len(data)) {
				t.Fatalf("WriteObject wrote %d bytes: %v", n, err)
			}
			if got := readBack(t, st, key); !bytes.Equal(got, data) {
				t.Fatalf("read back %d bytes, want %d identical", len(got), len(data))
			}
		})
	}
	t.Run("a failed fill leaves nothing", func(t *testing.T) {
		stop := errors.New("the producer failed")
		_, err := st.WriteObject(ctx, "w/aborted", "", 5<<20, func(w io.Writer) error {
			w.Write(randomBytes(11 << 20)) // two parts sent, a third buffered
			return stop
		})
		if !errors.Is(err, stop) {
			t.Fatalf("WriteObject: %v, want the fill's error", err)
		}
		if _, err := st.Head(ctx, "w/aborted"); !errors.Is(err, s3store.ErrNotFound) {
			t.Fatalf("aborted object: %v", err)
		}
		if ups, _ := st.ListMultipartUploads(ctx, "w/aborted"); len(ups) != 0 {
			t.Fatalf("aborted writer left %d multipart uploads", len(ups))
		}
	})
}

// TestPutSHA256SignsTheCallersHash: the hash the caller gives is the one
// the request is signed with, and S3 stores the body only if it hashes to
// it.
func TestPutSHA256SignsTheCallersHash(t *testing.T) {
	st := testenv.Store(t)
	ctx := context.Background()
	body := randomBytes(300_000)
	sum := sha256.Sum256(body)
	if err := st.PutSHA256(ctx, "sha/right", body, hex.EncodeToString(sum[:]), "application/x-ndjson"); err != nil {
		t.Fatalf("PutSHA256 with the body's hash: %v", err)
	}
	if got := readBack(t, st, "sha/right"); !bytes.Equal(got, body) {
		t.Fatalf("read back %d bytes, want the %d put", len(got), len(body))
	}

	// The hash of other bytes: were it not what the request is signed
	// with, the SDK would hash the body itself and S3 would take it.
	other := sha256.Sum256(append([]byte("x"), body...))
	err := st.PutSHA256(ctx, "sha/wrong", body, hex.EncodeToString(other[:]), "application/x-ndjson")
	if err == nil {
		t.Fatal("PutSHA256 with another body's hash succeeded")
	}
	if _, err := st.Head(ctx, "sha/wrong"); !errors.Is(err, s3store.ErrNotFound) {
		t.Fatalf("the refused object: %v, want not found", err)
	}
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
	h := preflight(t, srv.Endpoint, bucket, "http://app.test:8080")
	if got := h.Get("Access-Control-Allow-Origin"); got != "http://app.test:8080" {
		t.Errorf("Allow-Origin = %q", got)
	}
	if got := strings.ToLower(h.Get("Access-Control-Expose-Headers")); !strings.Contains(got, "etag") {
		t.Errorf("Expose-Headers = %q, want ETag", got)
	}
	if got := strings.ToLower(h.Get("Access-Control-Allow-Headers")); !strings.Contains(got, "content-md5") {
		t.Errorf("Allow-Headers = %q, want content-md5", got)
	}
	// Another origin is not allowed.
	if got := preflight(t, srv.Endpoint, bucket, "http://evil.test").Get("Access-Control-Allow-Origin"); got == "http://evil.test" || got == "*" {
		t.Errorf("foreign origin allowed: %q", got)
	}
	// Bootstrapping again is harmless.
	if _, err := st.Bootstrap(ctx, s3store.BootstrapOptions{Create: true, CORSOrigins: []string{"http://app.test:8080"}}); err != nil {
		t.Fatalf("second bootstrap: %v", err)
	}
}

// preflight sends the CORS preflight a browser sends before PUTting a part
// with a pinned Content-MD5 from origin, and returns the answer's headers.
func preflight(t *testing.T, endpoint, bucket, origin string) http.Header {
	t.Helper()
	req, _ := http.NewRequest(http.MethodOptions, endpoint+"/"+bucket+"/some/key?partNumber=1&uploadId=x", nil)
	req.Header.Set("Origin", origin)
	req.Header.Set("Access-Control-Request-Method", "PUT")
	req.Header.Set("Access-Control-Request-Headers", "content-md5")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.Header
}

// A part sent again is the part: the newest when the listing can tell,
// and always the one whose ETag the caller names, which completes into
// the object, on stores that replace a part and on stores that list
// every PUT of it (SeaweedFS).
func TestPartSentTwice(t *testing.T) {
	st := testenv.Store(t)
	ctx := context.Background()
	send := func(key, id string, body []byte) string {
		req, err := st.PresignPart(ctx, key, id, s3store.PartSpec{Number: 1}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if code, msg := put(t, req, body, nil); code != 200 {
			t.Fatalf("PUT: %d %s", code, msg)
		}
		return fmt.Sprintf("%x", md5.Sum(body))
	}
	complete := func(key, id string, p s3store.Part, want []byte) {
		t.Helper()
		if _, err := st.CompleteMultipart(ctx, key, id, []s3store.CompletedPart{{Number: 1, ETag: p.ETag}}, ""); err != nil {
			t.Fatal(err)
		}
		if got := readBack(t, st, key); !bytes.Equal(got, want) {
			t.Fatalf("%s holds %d bytes, not the part sent last (%d)", key, len(got), len(want))
		}
	}
	first, second := randomBytes(1000), randomBytes(2000)

	// Within one second: the caller's ETag decides.
	id, _ := st.CreateMultipart(ctx, "twice/fast", s3store.MultipartOptions{})
	send("twice/fast", id, first)
	etag := send("twice/fast", id, second)
	parts, err := st.ListPartsPreferring(ctx, "twice/fast", id, map[int32]s3store.PartPreference{1: {ETag: `"` + etag + `"`}})
	if err != nil || len(parts) != 1 || parts[0].Size != 2000 || strings.Trim(parts[0].ETag, `"`) != etag {
		t.Fatalf("listed preferring the second PUT's ETag: %+v %v", parts, err)
	}
	bySize, err := st.ListPartsPreferring(ctx, "twice/fast", id, map[int32]s3store.PartPreference{1: {Size: 2000}})
	if err != nil || len(bySize) != 1 || strings.Trim(bySize[0].ETag, `"`) != etag {
		t.Fatalf("listed preferring the size the part must have: %+v %v", bySize, err)
	}
	complete("twice/fast", id, parts[0], second)

	// Seconds apart: the newest, with nothing to prefer.
	id, _ = st.CreateMultipart(ctx, "twice/slow", s3store.MultipartOptions{})
	send("twice/slow", id, first)
	time.Sleep(1100 * time.Millisecond)
	etag = send("twice/slow", id, second)
	parts, err = st.ListParts(ctx, "twice/slow", id)
	if err != nil || len(parts) != 1 || strings.Trim(parts[0].ETag, `"`) != etag {
		t.Fatalf("listed a second apart: %+v %v, want the second PUT", parts, err)
	}
	complete("twice/slow", id, parts[0], second)
}

// PresignParts signs a batch like PresignPart does one by one: every URL
// works for its own part only, pinned Content-MD5s are enforced, and the
// lifetime is kept.
func TestPresignPartsBatch(t *testing.T) {
	st := testenv.Store(t)
	ctx := context.Background()
	id, err := st.CreateMultipart(ctx, "batch", s3store.MultipartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	data := map[int32][]byte{1: randomBytes(5 << 20), 2: randomBytes(5 << 20), 3: randomBytes(1000)}
	order := []int32{3, 1, 2}
	reqs, err := st.PresignParts(ctx, "batch", id, []s3store.PartSpec{{Number: 3}, {Number: 1}, {Number: 2, ContentMD5: md5b64(data[2])}}, time.Minute)
	if err != nil || len(reqs) != 3 {
		t.Fatalf("PresignParts = %d, %v", len(reqs), err)
	}
	single, _ := st.PresignPart(ctx, "batch", id, s3store.PartSpec{Number: 1}, time.Minute)
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
	// Part 1 was sent twice within a second: a store that lists every PUT
	// (SeaweedFS) cannot order them by time, so the ETag the client got
	// for its PUT picks the part.
	prefer := map[int32]s3store.PartPreference{}
	for n, b := range data {
		prefer[n] = s3store.PartPreference{ETag: fmt.Sprintf("%x", md5.Sum(b))}
	}
	parts, err := st.ListPartsPreferring(ctx, "batch", id, prefer)
	if err != nil || len(parts) != 3 {
		t.Fatalf("ListParts = %+v %v", parts, err)
	}
	for _, p := range parts {
		if p.Size != int64(len(data[p.Number])) || strings.Trim(p.ETag, `"`) != fmt.Sprintf("%x", md5.Sum(data[p.Number])) {
			t.Fatalf("part %d holds other bytes: %+v", p.Number, p)
		}
	}
	short, err := st.PresignParts(ctx, "batch", id, []s3store.PartSpec{{Number: 1}, {Number: 2}}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2100 * time.Millisecond)
	if code, _ := put(t, short[1], []byte("late"), nil); code != 403 {
		t.Fatalf("expired derived URL: %d, want 403", code)
	}
}

// A part URL signed with a size stores exactly that many bytes: a longer
// body (gigabytes into a part of megabytes) or a shorter one is refused by
// S3's signature check, for the SDK-presigned first URL of a batch and for
// the ones re-signed from it alike; the right size goes through.
func TestPresignedPartSizeIsEnforced(t *testing.T) {
	st := testenv.Store(t)
	ctx := context.Background()
	id, err := st.CreateMultipart(ctx, "sized", s3store.MultipartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := st.PresignParts(ctx, "sized", id, []s3store.PartSpec{{Number: 1, Size: 5 << 20}, {Number: 2, Size: 1000}}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i, size := range []int{5 << 20, 1000} {
		if _, listed := reqs[i].Headers["Content-Length"]; listed {
			t.Fatalf("URL %d lists Content-Length among the headers to send: %v", i, reqs[i].Headers)
		}
		for _, bad := range []int{size + 2<<20, size + 1, size - 1} {
			// S3 answers 403 as soon as the headers fail the signature, and
			// may reset the connection under a body still being sent.
			r, _ := http.NewRequest(reqs[i].Method, reqs[i].URL, bytes.NewReader(randomBytes(bad)))
			resp, err := http.DefaultClient.Do(r)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 403 {
					t.Fatalf("part %d: %d bytes into a URL signed for %d: %d, want 403", i+1, bad, size, resp.StatusCode)
				}
			}
		}
		if parts, _ := st.ListParts(ctx, "sized", id); len(parts) != i {
			t.Fatalf("after the refused bodies of part %d, S3 holds %+v", i+1, parts)
		}
		if code, msg := put(t, reqs[i], randomBytes(size), nil); code != 200 {
			t.Fatalf("part %d of the signed size: %d %s", i+1, code, msg)
		}
	}
	parts, err := st.ListParts(ctx, "sized", id)
	if err != nil || len(parts) != 2 || parts[0].Size != 5<<20 || parts[1].Size != 1000 {
		t.Fatalf("parts = %+v %v", parts, err)
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
	r := st.Open(ctx, "obj", int64(len(data)), "").(*s3store.ObjectReader)
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

// A store with checksums (VersityGW) verifies CRC32C the way S3
// documents: the probe finds them, and a presigned part URL pinning a
// CRC32C refuses other bytes, while a full-object checksum is checked at
// complete. On a store the compatibility table lists without them
// (SeaweedFS) the probe must say so, and ferry uses Content-MD5 instead.
func TestChecksumsAreEnforced(t *testing.T) {
	st := testenv.Store(t)
	ctx := context.Background()
	caps, err := st.Probe(ctx, s3store.ProbeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if objs, _ := st.ListObjects(ctx, s3store.ScratchPrefix, 10); len(objs) != 0 {
		t.Fatalf("the probe left %v", objs)
	}
	want, listed := capabilities[s3Impl()][string(s3store.CapChecksums)]
	if listed && !want {
		if caps.ChecksumCRC32C {
			t.Fatalf("probe = %+v, but %s has no checksums in the table", caps, s3Impl())
		}
		t.Skipf("%s lacks checksums (%+v): ferry falls back to Content-MD5 (TestProbeFindsWhatAStoreLacks, e2e TestStoreWithoutOptionalFeatures)", s3Impl(), caps.Missing)
	}
	if !caps.ChecksumCRC32C {
		t.Fatalf("probe = %+v, want CRC32C", caps)
	}
	id, err := st.CreateMultipart(ctx, "crc", s3store.MultipartOptions{Checksum: s3store.ChecksumCRC32C})
	if err != nil {
		t.Fatal(err)
	}
	p1, p2 := randomBytes(5<<20), randomBytes(1234)
	reqs, err := st.PresignParts(ctx, "crc", id, []s3store.PartSpec{
		{Number: 1, Size: int64(len(p1)), CRC32C: s3store.CRC32C(p1)},
		{Number: 2, Size: int64(len(p2)), CRC32C: s3store.CRC32C(p2)},
	}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte{}, p2...)
	bad[0] ^= 1
	if code, msg := put(t, reqs[1], bad, nil); code != 400 || !strings.Contains(msg, "BadDigest") {
		t.Fatalf("a part with other bytes than its signed CRC32C: %d %s, want 400 BadDigest", code, msg)
	}
	for i, b := range [][]byte{p1, p2} {
		if code, msg := put(t, reqs[i], b, nil); code != 200 {
			t.Fatalf("part %d: %d %s", i+1, code, msg)
		}
	}
	parts, err := st.ListParts(ctx, "crc", id)
	if err != nil || len(parts) != 2 || parts[0].CRC32C != s3store.CRC32C(p1) || parts[1].CRC32C != s3store.CRC32C(p2) {
		t.Fatalf("listed parts = %+v %v", parts, err)
	}
	cp := []s3store.CompletedPart{{Number: 1, ETag: parts[0].ETag, CRC32C: parts[0].CRC32C}, {Number: 2, ETag: parts[1].ETag, CRC32C: parts[1].CRC32C}}
	whole := append(append([]byte{}, p1...), p2...)
	if _, err := st.CompleteMultipart(ctx, "crc", id, cp, s3store.CRC32C(append(whole, 0))); !errors.Is(err, s3store.ErrBadDigest) {
		t.Fatalf("complete with a wrong full-object CRC32C: %v, want ErrBadDigest", err)
	}
	if _, err := st.CompleteMultipart(ctx, "crc", id, cp, s3store.CRC32C(whole)); err != nil {
		t.Fatalf("complete with the right one: %v", err)
	}
	got, _ := st.Get(ctx, "crc")
	b, _ := io.ReadAll(got)
	if !bytes.Equal(b, whole) {
		t.Fatal("the object is not the parts")
	}
}

// Probe finds each capability a store lacks, one at a time, on a store
// that otherwise has what the test server has (a proxy answers as stores
// without it do: testenv.S3Lacking), and leaves nothing behind. A CORS
// rule that does not name the origin counts as no CORS, and a store that
// does not answer is an error, not a store without capabilities.
func TestProbeFindsWhatAStoreLacks(t *testing.T) {
	ctx := context.Background()
	const origin = "http://app.test"
	srv := testenv.S3(t)
	bucket := "t-lack" + testenv.RandomHex(4)
	bootstrapped := func(t *testing.T, srv testenv.S3Server) *s3store.Store {
		st := testenv.StoreFor(t, srv, bucket)
		if _, err := st.Bootstrap(ctx, s3store.BootstrapOptions{CORSOrigins: []string{origin}, AbortIncompleteAfterDays: 1}); err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := bootstrapped(t, srv)
	base, err := st.Probe(ctx, s3store.ProbeOptions{Origin: origin})
	if err != nil {
		t.Fatal(err)
	}
	all := []s3store.Capability{s3store.CapChecksums, s3store.CapPostPolicy, s3store.CapCORS, s3store.CapLifecycle, s3store.CapCopyObject}
	t.Logf("the server itself: %+v", base)
	for _, k := range all {
		t.Run("without "+string(k), func(t *testing.T) {
			caps, err := bootstrapped(t, testenv.S3Lacking(t, srv, k)).Probe(ctx, s3store.ProbeOptions{Origin: origin})
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range all {
				if want := base.Has(j) && j != k; caps.Has(j) != want {
					t.Errorf("%s = %v, want %v (%+v)", j, caps.Has(j), want, caps.Missing)
				}
			}
			found := false
			for _, m := range caps.Missing {
				found = found || m.Capability == k && m.Evidence != ""
			}
			if !found {
				t.Errorf("no evidence for the missing %s: %+v", k, caps.Missing)
			}
		})
	}
	t.Run("another origin", func(t *testing.T) {
		caps, err := st.Probe(ctx, s3store.ProbeOptions{Origin: "http://elsewhere.test"})
		if err != nil || caps.CORS || caps.Has(s3store.CapCORS) {
			t.Fatalf("CORS for an origin the rule does not name: %+v %v", caps, err)
		}
	})
	if objs, err := st.ListObjects(ctx, s3store.ScratchPrefix, 10); err != nil || len(objs) != 0 {
		t.Fatalf("the probes left objects %v (%v)", objs, err)
	}
	if ups, err := st.ListMultipartUploads(ctx, s3store.ScratchPrefix); err != nil || len(ups) != 0 {
		t.Fatalf("the probes left multipart uploads %v (%v)", ups, err)
	}
	t.Run("store down", func(t *testing.T) {
		down, err := s3store.New(ctx, s3store.Config{Endpoint: "http://" + testenv.FreeAddr(t), Region: "us-east-1", Bucket: bucket,
			AccessKey: "k", SecretKey: "s", PathStyle: true, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := down.Probe(ctx, s3store.ProbeOptions{Origin: origin}); !errors.Is(err, s3store.ErrUnavailable) {
			t.Fatalf("Probe of a store nobody answers: %v, want ErrUnavailable", err)
		}
	})
}

// The probe's scratch objects share no folder, and probes run at once
// (replicas starting together; the five probes of one run write and delete
// side by side) agree with one probe alone. On a store on a file system
// (VersityGW's posix backend) a delete that empties a folder removes it,
// and a PUT landing in it at that moment fails (409
// ExistingObjectIsDirectory): with the probes' objects in one folder
// (probe/<random>/…) a CI run once saw the CORS probe fail so, and a
// replica could run without CORS or checksums while its peers had them.
func TestProbeScratchKeysShareNoFolder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const origin = "http://app.test"
	srv := testenv.S3(t)
	target, _ := url.Parse(srv.Endpoint)
	var (
		mu      sync.Mutex
		written = map[string]bool{}
	)
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Host = r.In.Host // the requests are signed for this host
		if r.In.Method == http.MethodPut || r.In.Method == http.MethodPost {
			mu.Lock()
			written[r.In.URL.Path] = true
			mu.Unlock()
		}
	}}
	proxy := httptest.NewServer(rp)
	t.Cleanup(proxy.Close)
	bucket := "t-twins" + testenv.RandomHex(4)
	st := testenv.StoreFor(t, testenv.S3Server{Endpoint: proxy.URL, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}, bucket)
	if _, err := st.Bootstrap(ctx, s3store.BootstrapOptions{CORSOrigins: []string{origin}, AbortIncompleteAfterDays: 1}); err != nil {
		t.Fatal(err)
	}
	opts := s3store.ProbeOptions{Origin: origin}
	base, err := st.Probe(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	base.Missing = nil
	const together = 5
	got := make([]s3store.Capabilities, together)
	errs := make([]error, together)
	var wg sync.WaitGroup
	for i := range together {
		wg.Go(func() { got[i], errs[i] = st.Probe(ctx, opts) })
	}
	wg.Wait()
	for i, c := range got {
		missing := c.Missing
		c.Missing = nil
		if errs[i] != nil || !reflect.DeepEqual(c, base) {
			t.Fatalf("probe %d of %d at once: %+v %v (missing %+v); alone: %+v", i+1, together, c, errs[i], missing, base)
		}
	}
	keys := 0
	for p := range written {
		key, ok := strings.CutPrefix(p, "/"+bucket+"/")
		if !ok || key == "" {
			continue // the bucket's own configuration
		}
		keys++
		if !strings.HasPrefix(key, s3store.ScratchPrefix) || strings.Contains(key, "/") {
			t.Errorf("the probe wrote %q: want a key at the bucket's root beginning %q", key, s3store.ScratchPrefix)
		}
	}
	if keys == 0 {
		t.Fatal("the proxy saw no object written")
	}
	if objs, err := st.ListObjects(ctx, s3store.ScratchPrefix, 10); err != nil || len(objs) != 0 {
		t.Fatalf("the probes left objects %v (%v)", objs, err)
	}
}

// storeThrough is a store on the test server's bucket whose S3 calls go
// through the API wrap makes of a plain SDK client (Config.API).
func storeThrough(t testing.TB, wrap func(s3store.API) s3store.API) *s3store.Store {
	t.Helper()
	srv := testenv.S3(t)
	client := s3.New(s3.Options{
		BaseEndpoint: aws.String(srv.Endpoint), Region: "us-east-1", UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey, ""),
	})
	st, err := s3store.New(context.Background(), s3store.Config{
		Endpoint: srv.Endpoint, Region: "us-east-1", Bucket: testenv.Store(t).Bucket(),
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PathStyle: true, API: wrap(client),
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// countingAPI passes every S3 call on and counts the PUTs of objects.
type countingAPI struct {
	s3store.API
	puts atomic.Int64
}

func (c *countingAPI) PutObject(ctx context.Context, in *s3.PutObjectInput, o ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	c.puts.Add(1)
	return c.API.PutObject(ctx, in, o...)
}

// Config.API carries the store's S3 calls: a wrapper sees them.
func TestInjectedAPICarriesTheCalls(t *testing.T) {
	api := &countingAPI{}
	st := storeThrough(t, func(client s3store.API) s3store.API { api.API = client; return api })
	if err := st.Put(context.Background(), "through/api", strings.NewReader("hello"), 5, "text/plain"); err != nil {
		t.Fatal(err)
	}
	if api.puts.Load() != 1 {
		t.Fatalf("%d PutObject calls through the injected API, want 1", api.puts.Load())
	}
	if got := readBack(t, st, "through/api"); string(got) != "hello" {
		t.Fatalf("read back %q", got)
	}
}

// busyAPI answers the first n UploadPart calls with SlowDown, as a store
// does while replicas that start together all probe it.
type busyAPI struct {
	s3store.API
	n     atomic.Int64
	calls atomic.Int64
}

func (b *busyAPI) UploadPart(ctx context.Context, in *s3.UploadPartInput, o ...func(*s3.Options)) (*s3.UploadPartOutput, error) {
	b.calls.Add(1)
	if b.n.Add(-1) >= 0 {
		return nil, &smithy.GenericAPIError{Code: "SlowDown", Message: "please reduce your request rate"}
	}
	return b.API.UploadPart(ctx, in, o...)
}

// A store that is busy while ferry probes it (SlowDown, timeouts) is
// probed again, a few times: the finding is what the store supports (as a
// probe of it when it is not busy finds), not an error that leaves every
// fallback, so replicas that start together agree on checksums.
func TestProbeRetriesABusyStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	want, err := testenv.Store(t).Probe(ctx, s3store.ProbeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	api := &busyAPI{}
	api.n.Store(3)
	st := storeThrough(t, func(client s3store.API) s3store.API { api.API = client; return api })
	caps, err := st.Probe(ctx, s3store.ProbeOptions{})
	if err != nil || caps.ChecksumCRC32C != want.ChecksumCRC32C {
		t.Fatalf("Probe after 3 SlowDown answers: %+v %v; want checksum_crc32c %v, as without them", caps, err, want.ChecksumCRC32C)
	}
	if api.calls.Load() < 4 {
		t.Fatalf("%d UploadPart calls; the busy answers were not retried", api.calls.Load())
	}
}
