package upload_test

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
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/ferry-io/ferry/download"
	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/presign"
	"github.com/ferry-io/ferry/s3store"
	"github.com/ferry-io/ferry/upload"
)

const mib = 1 << 20

// clock is a settable clock: real time plus an offset tests can move.
type clock struct{ offset atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// newLinks makes download links for files under ferry.test.
func newLinks(t testing.TB) *download.Links {
	s, err := presign.NewSigner([]presign.Key{{ID: "k1", Secret: bytes.Repeat([]byte{7}, 32)}}, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	l, err := download.NewLinks(download.LinksConfig{Signer: s, PublicURL: "http://ferry.test", TTL: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// env is one test's service on a fresh database and bucket.
type env struct {
	t     testing.TB
	db    *testenv.DB
	store *s3store.Store
	queue *jobs.Queue
	svc   *upload.Service
	clock *clock
	cfg   upload.Config
	// release lets held verifications go (newHeldEnv).
	release func()
}

// testConfig is what a test sets up: the service's configuration, and
// the hooks newEnv passes with upload.WithHooks.
type testConfig struct {
	upload.Config
	Hooks upload.Hooks
}

func newEnv(t testing.TB, db *testenv.DB, mod func(*testConfig)) *env {
	t.Helper()
	e := &env{t: t, db: db, store: testenv.Store(t), queue: testenv.Must(jobs.NewQueue(jobs.QueueConfig{DB: db.DB, Now: time.Now})), clock: &clock{}}
	tc := testConfig{Config: upload.Config{
		DB: db.DB, Store: e.store, Queue: e.queue, Links: newLinks(t), Log: testenv.Logger(t), Now: e.clock.Now,
		MergeBackoff: func(int) time.Duration { return 100 * time.Millisecond },
	}}
	if mod != nil {
		mod(&tc)
	}
	e.cfg = tc.Config
	if e.cfg.Checksums {
		// ferry grants checksums only where the probe finds them; on a
		// store without (SeaweedFS lists no part checksums) the paths
		// under test never run.
		caps, err := e.store.Probe(context.Background(), s3store.ProbeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !caps.ChecksumCRC32C {
			t.Skipf("the store lacks checksums (%s); ferry uses Content-MD5 there", caps.Missing[0].Evidence)
		}
	}
	svc, err := upload.New(e.cfg, upload.WithHooks(tc.Hooks))
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	return e
}

// keepsReplacedParts reports whether the store keeps a part sent again
// beside the new one (SeaweedFS lists every PUT and completes with the one
// the ETag names) instead of replacing it (S3). There, a part replaced
// after the client vouched for it does not fail the merge: the part the
// client vouched for is still there, and it is what ferry completes with.
// Listings tell such parts apart by time only to the second.
func (e *env) keepsReplacedParts() bool {
	e.t.Helper()
	ctx := context.Background()
	key := s3store.ScratchPrefix + "replaced-" + testenv.RandomHex(4)
	id, err := e.store.CreateMultipart(ctx, key, s3store.MultipartOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	defer e.store.AbortMultipart(ctx, key, id)
	var etags []string
	for _, body := range [][]byte{randomBytes(100), randomBytes(100)} {
		reqs, err := e.store.PresignParts(ctx, key, id, []s3store.PartSpec{{Number: 1}}, time.Minute)
		if err != nil {
			e.t.Fatal(err)
		}
		req, _ := http.NewRequest(reqs[0].Method, reqs[0].URL, bytes.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			e.t.Fatal(err)
		}
		resp.Body.Close()
		etags = append(etags, resp.Header.Get("ETag"))
	}
	parts, err := e.store.ListPartsPreferring(ctx, key, id, map[int32]s3store.PartPreference{1: {ETag: etags[0]}})
	if err != nil {
		e.t.Fatal(err)
	}
	return len(parts) == 1 && parts[0].ETag == etags[0]
}

// newHeldEnv is newEnv with every verification held until verify is
// called (or the test ends), so a test sees a file that S3 holds and ferry
// has not yet hashed. mods change the configuration as newEnv's mod does.
func newHeldEnv(t testing.TB, db *testenv.DB, mods ...func(*testConfig)) (e *env, verify func()) {
	t.Helper()
	gate := make(chan struct{})
	var once sync.Once
	verify = func() { once.Do(func() { close(gate) }) }
	e = newEnv(t, db, func(c *testConfig) {
		for _, m := range mods {
			m(c)
		}
		c.Hooks.VerifyProgress = func(string, int64) { <-gate }
	})
	e.release = verify
	t.Cleanup(verify)
	return e, verify
}

// run starts a jobs runner with the upload handlers until t ends.
func (e *env) run(t testing.TB, lease time.Duration) {
	t.Helper()
	r := jobs.NewRunner(e.queue, jobs.RunnerConfig{Lease: lease, Poll: 50 * time.Millisecond, Log: testenv.Logger(t)})
	e.svc.Register(r)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx, 5*time.Second); close(done) }()
	t.Cleanup(func() {
		if e.release != nil {
			e.release() // a held verification would keep the runner from stopping
		}
		cancel()
		<-done
	})
}

// count counts rows of table matching where.
func (e *env) count(table, where string, args ...any) int64 {
	e.t.Helper()
	var n int64
	if err := e.db.Table(table).Where(where, args...).Count(&n).Error; err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *env) upload(id string) models.Upload {
	e.t.Helper()
	var u models.Upload
	if err := e.db.Where("id = ?", id).Take(&u).Error; err != nil {
		e.t.Fatal(err)
	}
	return u
}

// waitDone polls the upload until it is success or failed.
func (e *env) waitDone(user, id string, within time.Duration) upload.Status {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		st, err := e.svc.Status(context.Background(), user, id)
		if err != nil {
			e.t.Fatalf("status %s: %v", id, err)
		}
		if st.State == upload.StateSuccess || st.State == upload.StateFailed {
			return st
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("upload %s still %s after %s", id, st.State, within)
		}
		time.Sleep(30 * time.Millisecond)
	}
}

// waitVerified polls the upload until it failed, or succeeded and its
// file's SHA-256 is the one ferry computed (the background verify job has
// run).
func (e *env) waitVerified(user, id string, within time.Duration) upload.Status {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		st, err := e.svc.Status(context.Background(), user, id)
		if err != nil {
			e.t.Fatalf("status %s: %v", id, err)
		}
		if st.State == upload.StateFailed || st.State == upload.StateSuccess && st.SHA256Verified {
			return st
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("upload %s still %s (verified %v) after %s", id, st.State, st.SHA256Verified, within)
		}
		time.Sleep(30 * time.Millisecond)
	}
}

// waitGone polls until key is no longer in the bucket.
func (e *env) waitGone(key string, within time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		_, err := e.store.Head(context.Background(), key)
		if errors.Is(err, s3store.ErrNotFound) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("object %s still there after %s (err %v)", key, within, err)
		}
		time.Sleep(30 * time.Millisecond)
	}
}

// bucket is the independent view of the bucket through minio-go.
type bucket struct {
	Objects map[string]int64  // key → size
	Pending map[string]string // key → multipart upload id
}

func (e *env) bucket() bucket {
	e.t.Helper()
	srv := testenv.S3(e.t)
	u, _ := url.Parse(srv.Endpoint)
	mc, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, ""), Secure: false, Region: "us-east-1"})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx := context.Background()
	b := bucket{Objects: map[string]int64{}, Pending: map[string]string{}}
	for o := range mc.ListObjects(ctx, e.store.Bucket(), minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			e.t.Fatal(o.Err)
		}
		b.Objects[o.Key] = o.Size
	}
	for m := range mc.ListIncompleteUploads(ctx, e.store.Bucket(), "", true) {
		if m.Err != nil {
			e.t.Fatal(m.Err)
		}
		b.Pending[m.Key] = m.UploadID
	}
	return b
}

// client is a minimal native-API client that PUTs parts straight to S3
// through presigned URLs and counts its PUTs. (The real client package
// replaces it later.)
type client struct {
	t    testing.TB
	e    *env
	svc  *upload.Service
	user string
	puts atomic.Int64
}

func newClient(t testing.TB, e *env, user string) *client {
	return &client{t: t, e: e, svc: e.svc, user: user}
}

func sha(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
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

func (c *client) init(name string, data []byte, withSHA bool, partSize int64) upload.InitResult {
	c.t.Helper()
	req := upload.InitRequest{FileName: name, Size: int64(len(data)), PartSize: partSize, ContentType: "application/octet-stream"}
	if withSHA {
		req.SHA256 = sha(data)
	}
	res, err := c.svc.Init(context.Background(), c.user, req)
	if err != nil {
		c.t.Fatalf("init %s: %v", name, err)
	}
	return res
}

func partBytes(st upload.Status, data []byte, n int) []byte {
	start := int64(n-1) * st.PartSize
	return data[start:min(start+st.PartSize, int64(len(data)))]
}

// put PUTs body to a presigned part URL and returns the status and ETag.
func (c *client) put(p upload.PresignedPart, body io.Reader, size int64) (int, string) {
	c.t.Helper()
	req, err := http.NewRequest(p.Method, p.URL, body)
	if err != nil {
		c.t.Fatal(err)
	}
	req.ContentLength = size
	for k, v := range p.Headers {
		req.Header.Set(k, v)
	}
	c.puts.Add(1)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("ETag")
}

// presign signs URLs for parts, in batches of at most 1,000.
func (c *client) presign(id string, parts []int, md5s map[int]string) map[int]upload.PresignedPart {
	c.t.Helper()
	out := map[int]upload.PresignedPart{}
	for start := 0; start < len(parts); start += upload.MaxBatch {
		batch := parts[start:min(start+upload.MaxBatch, len(parts))]
		urls, err := c.svc.Presign(context.Background(), c.user, id, upload.PresignRequest{Parts: batch, ContentMD5: md5s})
		if err != nil {
			c.t.Fatalf("presign: %v", err)
		}
		for n, u := range urls {
			out[n] = u
		}
	}
	return out
}

// send uploads the given parts of data (4 at a time) and reports each one
// when report is set. It returns the ETags S3 answered.
func (c *client) send(st upload.Status, data []byte, parts []int, report bool) map[int]string {
	c.t.Helper()
	urls := c.presign(st.UploadID, parts, nil)
	var mu sync.Mutex
	etags := map[int]string{}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	errs := make(chan error, len(parts))
	for _, n := range parts {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			body := partBytes(st, data, n)
			code, etag := c.put(urls[n], bytes.NewReader(body), int64(len(body)))
			if code != 200 {
				errs <- fmt.Errorf("PUT part %d: %d %s", n, code, etag)
				return
			}
			mu.Lock()
			etags[n] = etag
			mu.Unlock()
			if report {
				if _, err := c.svc.ReportPart(context.Background(), c.user, st.UploadID, n, etag, int64(len(body))); err != nil {
					errs <- fmt.Errorf("report part %d: %w", n, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		c.t.Fatal(err)
	}
	return etags
}

// missing returns the part numbers st lacks.
func missing(st upload.Status) []int {
	have := map[int]bool{}
	for _, p := range st.Parts {
		have[p.Number] = true
	}
	var out []int
	for n := 1; n <= st.PartCount; n++ {
		if !have[n] {
			out = append(out, n)
		}
	}
	return out
}

// todo returns the parts a resuming client must still send: those S3
// lacks, and those it holds with another size or an ETag that is not the
// MD5 of the local part.
func (c *client) todo(st upload.Status, data []byte) []int {
	have := map[int]upload.Part{}
	for _, p := range st.Parts {
		have[p.Number] = p
	}
	var out []int
	for n := 1; n <= st.PartCount; n++ {
		body := partBytes(st, data, n)
		p, ok := have[n]
		sum := md5.Sum(body)
		if !ok || p.Size != int64(len(body)) || strings.Trim(p.ETag, `"`) != hex.EncodeToString(sum[:]) {
			out = append(out, n)
		}
	}
	return out
}

func allParts(st upload.Status) []int {
	out := make([]int, st.PartCount)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

// uploadAll runs a whole upload: init, every part, complete. It returns
// the upload once complete was accepted.
func (c *client) uploadAll(name string, data []byte, withSHA bool) upload.Status {
	c.t.Helper()
	res := c.init(name, data, withSHA, 5*mib)
	if res.Outcome != upload.Created {
		c.t.Fatalf("init %s: outcome %v, want Created", name, res.Outcome)
	}
	c.send(res.Upload, data, allParts(res.Upload), true)
	st, err := c.svc.Complete(context.Background(), c.user, res.Upload.UploadID, upload.CompleteRequest{})
	if err != nil {
		c.t.Fatalf("complete: %v", err)
	}
	return st
}

// objectSHA reads an object back through the store and hashes it.
func (e *env) objectSHA(key string) (string, int64) {
	e.t.Helper()
	rc, err := e.store.Get(context.Background(), key)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rc.Close()
	h := sha256.New()
	n, err := io.Copy(h, rc)
	if err != nil {
		e.t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil)), n
}

// wantKind fails unless err carries kind and code.
func wantKind(t testing.TB, err error, kind *errkind.Kind, code string) *errkind.Error {
	t.Helper()
	var ke *errkind.Error
	if !errors.Is(err, kind) || !errors.As(err, &ke) || ke.Code != code {
		t.Fatalf("err = %v, want %s/%s", err, kind, code)
	}
	return ke
}

func sortedKeys[V any](m map[int]V) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}
