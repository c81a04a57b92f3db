package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
)

// The multi-replica suite runs several `ferry serve` processes on one
// MariaDB database and one S3 bucket, the way ferry is deployed behind a
// load balancer, and spreads every flow over them. It is heavy (three
// race-built processes per test), so it runs when FERRY_TEST_REPLICAS=1
// says so: .ci/replicas sets it and points FERRY_TEST_S3_* at a standalone
// VersityGW.

// requireReplicas skips the test unless the multi-replica suite was asked
// for, and then needs MariaDB (failing without it when
// FERRY_TEST_REQUIRE_MYSQL=1).
func requireReplicas(t *testing.T) {
	t.Helper()
	if os.Getenv("FERRY_TEST_REPLICAS") != "1" {
		t.Skip("the multi-replica suite runs with FERRY_TEST_REPLICAS=1 (.ci/replicas)")
	}
	testenv.MySQLServerDSN(t)
}

// cluster is a set of ferry replicas sharing one database, one bucket and
// FERRY_LINK_KEYS, each on its own port.
type cluster struct {
	t      *testing.T
	R      []*Ferry
	S3     testenv.S3Server // the S3 server, as clients reach it
	Bucket string
	Admin  string // an administrator's token, valid on every replica
	// Holds sits between each replica and S3 when the cluster was started
	// with Gated; nil otherwise.
	Holds *s3Holds
}

type clusterOptions struct {
	Replicas int               // default 3
	Env      map[string]string // FERRY_* settings for every replica, over the suite's defaults
	// Gated sends each replica's own S3 calls through an HTTP proxy that
	// can hold chosen requests (s3Holds); presigned URLs still lead
	// clients to S3 directly.
	Gated bool
}

// startCluster starts the replicas together (as a deployment does: they
// migrate under a lock and create the bucket once) and waits until each
// is ready.
func startCluster(t *testing.T, o clusterOptions) *cluster {
	t.Helper()
	n := o.Replicas
	if n == 0 {
		n = 3
	}
	direct := testenv.S3(t)
	c := &cluster{t: t, S3: direct, Bucket: "rep-" + testenv.RandomHex(6)}
	key := make([]byte, 32)
	rand.Read(key)
	env := map[string]string{
		"FERRY_DB_DRIVER":          models.MySQL,
		"FERRY_DB_DSN":             testenv.MySQLDatabase(t),
		"FERRY_S3_BUCKET":          c.Bucket,
		"FERRY_S3_PUBLIC_ENDPOINT": direct.Endpoint,
		"FERRY_LINK_KEYS":          "rep1:" + base64.StdEncoding.EncodeToString(key),
		// A crashed replica's jobs are taken over within a few seconds,
		// and idle replicas look for work often, so takeovers and races
		// between replicas happen within the test's time.
		"FERRY_JOB_LEASE":             "4s",
		"FERRY_JOB_POLL":              "200ms",
		"FERRY_JOB_OUTAGE_BACKOFF":    "2s",
		"FERRY_WEBHOOK_ALLOW_PRIVATE": "true",
	}
	maps.Copy(env, o.Env)
	if o.Gated {
		c.Holds = newS3Holds(t, direct.Endpoint)
	}
	for i := range n {
		srv := direct
		if o.Gated {
			srv.Endpoint = c.Holds.listen(t, i)
		}
		f := Start(t, Options{S3: &srv, Env: env, NoWait: true})
		// The tests' own look into the bucket (minio-go) goes straight to
		// S3; f.Env keeps the replica's endpoint for Restart.
		f.S3 = &c.S3
		c.R = append(c.R, f)
	}
	for _, f := range c.R {
		f.WaitReady(120 * time.Second)
	}
	c.Admin = cliCreateAdmin(t, c.R[0])
	for _, f := range c.R {
		f.Token = c.Admin
	}
	return c
}

// owner is the replica's name in lease_owner (host-pid-suffix).
func (f *Ferry) owner() string { return "-" + strconv.Itoa(f.cmd.Process.Pid) + "-" }

// replicaOf says which replica's runner holds a lease owner name, or -1.
func (c *cluster) replicaOf(leaseOwner *string) int {
	if leaseOwner == nil {
		return -1
	}
	for i, f := range c.R {
		if strings.Contains(*leaseOwner, f.owner()) {
			return i
		}
	}
	return -1
}

// others are the replicas except those listed.
func (c *cluster) others(except ...int) []*Ferry {
	var out []*Ferry
	for i, f := range c.R {
		skip := false
		for _, e := range except {
			skip = skip || e == i
		}
		if !skip {
			out = append(out, f)
		}
	}
	return out
}

// spreadUpload sends one file through the native API with its calls on
// different replicas: init on init, the part URLs from presign (one
// replica per part, in turn), the parts straight to S3, and complete on
// complete (202). It returns the upload id.
func spreadUpload(t *testing.T, tok string, data []byte, init *Ferry, presign []*Ferry, complete *Ferry) string {
	t.Helper()
	id := spreadParts(t, tok, data, init, presign)
	completeUpload(t, complete, tok, id, data)
	return id
}

// spreadParts is spreadUpload up to the complete.
func spreadParts(t *testing.T, tok string, data []byte, init *Ferry, presign []*Ferry) string {
	t.Helper()
	const ps = 5 * mib
	count := max(1, (len(data)+ps-1)/ps)
	part := func(n int) []byte { return data[(n-1)*ps : min(n*ps, len(data))] }
	r := init.Do("POST", "/uploads", tok, map[string]any{"file_name": "r.bin", "size": len(data), "part_size": ps,
		"checksum_algorithm": "CRC32C", "first_part_crc32c": crc32c(part(1))})
	want(t, r, 201, "")
	var up uploadJSON
	r.JSON(t, &up)
	for n := 1; n <= count; n++ {
		f := presign[(n-1)%len(presign)]
		urls := f.presignChecked(tok, up.UploadID, map[int][]byte{n: part(n)})
		if code, _, err := putPart(urls[strconv.Itoa(n)], bytes.NewReader(part(n)), int64(len(part(n)))); err != nil || code != 200 {
			t.Fatalf("PUT part %d of %s: %d %v", n, up.UploadID, code, err)
		}
	}
	// The replica that started the upload sees every part, from S3's
	// own list, whichever replica signed them.
	var progress uploadJSON
	init.Do("GET", "/uploads/"+up.UploadID, tok, nil).JSON(t, &progress)
	if len(progress.Parts) != count {
		t.Fatalf("upload %s on its first replica lists %d parts, want %d", up.UploadID, len(progress.Parts), count)
	}
	return up.UploadID
}

// completeUpload completes an upload of data on f with its SHA-256 and,
// when the upload was granted checksum_algorithm CRC32C, the file's CRC32C
// (202), as a client following the contract does.
func completeUpload(t *testing.T, f *Ferry, tok, id string, data []byte) {
	t.Helper()
	var up struct {
		Checksum string `json:"checksum_algorithm"`
	}
	f.Do("GET", "/uploads/"+id, tok, nil).JSON(t, &up)
	sum := sha256.Sum256(data)
	body := map[string]any{"sha256": hex.EncodeToString(sum[:])}
	if up.Checksum != "" {
		body["checksum_crc32c"] = crc32c(data)
	}
	want(t, f.Do("POST", "/uploads/"+id+"/complete", tok, body), 202, "")
}

// allVerified waits until every upload is verified, as seen from the
// replica at=(i+1)%len; downloads each file through another replica's
// proxy and reads its object with minio-go, both hashing to the SHA-256
// of the bytes sent; and checks that ferry holds exactly one file and one
// upload.completed event per upload.
func (c *cluster) allVerified(tok string, ids []string, data [][]byte, via []*Ferry, within time.Duration) {
	t := c.t
	t.Helper()
	deadline := time.Now().Add(within)
	for i, id := range ids {
		f := via[i%len(via)]
		var up uploadJSON
		for up.SHA256Verified == nil || !*up.SHA256Verified {
			// Back to uploading after its complete means the merge lost
			// the multipart upload.
			if up.State == "failed" || up.State == "aborted" || up.State == "uploading" || time.Now().After(deadline) {
				t.Fatalf("upload %d (%s) not verified: %+v", i, id, up)
			}
			f.Do("GET", "/uploads/"+id+"?wait=5s", tok, nil).JSON(t, &up)
			if up.State == "success" && (up.SHA256Verified == nil || !*up.SHA256Verified) {
				time.Sleep(100 * time.Millisecond)
			}
		}
		sum := sha256.Sum256(data[i])
		if up.SHA256 != hex.EncodeToString(sum[:]) {
			t.Fatalf("upload %d verified as %s, the bytes sent hash to %x", i, up.SHA256, sum)
		}
		if got := objectSHA256(t, f, "uploads/"+id); got != up.SHA256 {
			t.Fatalf("upload %d: the object in the bucket hashes to %s (minio-go), want %s", i, got, up.SHA256)
		}
		var file struct {
			DownloadURL string `json:"download_url"`
		}
		f.Do("GET", "/files/"+up.FileID, tok, nil).JSON(t, &file)
		dl := via[(i+1)%len(via)]
		got, _ := download(t, dl.URL+linkPath(t, file.DownloadURL))
		if sha256.Sum256(got) != sum {
			t.Fatalf("upload %d: the download through %s is not the file", i, dl.URL)
		}
	}
	db := ferryDB(t, via[0])
	var files, events int64
	db.Model(&models.File{}).Where("upload_id IN ?", ids).Count(&files)
	db.Model(&models.OutboxEvent{}).Where("type = ? AND subject IN ?", "upload.completed", ids).Count(&events)
	if files != int64(len(ids)) || events != int64(len(ids)) {
		t.Fatalf("%d uploads made %d files and %d upload.completed events: something was lost or duplicated", len(ids), files, events)
	}
}

// linkPath is a download link's path and query, so that a link one
// replica signed can be sent to any other.
func linkPath(t *testing.T, link string) string {
	t.Helper()
	u, err := url.Parse(link)
	if err != nil {
		t.Fatalf("download link %q: %v", link, err)
	}
	return u.RequestURI()
}

// s3Holds is an HTTP proxy in front of S3, one listener per replica,
// that can hold chosen requests: the replica's call waits as if S3 were
// slow to answer, until the test forwards it (even after the replica
// died, as S3 would finish a request that reached it) or drops it (as if
// the replica died before its request reached S3). Everything else passes
// straight through; SigV4 still verifies, since the Host header is kept.
type s3Holds struct {
	rp      *httputil.ReverseProxy
	mu      sync.Mutex
	match   func(replica int, r *http.Request) bool
	pending []*heldRequest
	changed chan struct{} // closed and replaced when a request is held
}

// heldRequest is one S3 request a replica sent and s3Holds holds.
type heldRequest struct {
	Replica      int
	Method, Path string
	decide       chan bool // true: forward it, false: drop it
	finished     chan struct{}
	status       int // S3's answer to a forwarded request
}

func newS3Holds(t *testing.T, endpoint string) *s3Holds {
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	// A replica killed mid-request makes the proxy log a broken pipe.
	rp.ErrorLog = log.New(io.Discard, "", 0)
	h := &s3Holds{rp: rp, changed: make(chan struct{})}
	t.Cleanup(h.Open)
	return h
}

// listen serves replica i on a new loopback port and returns the endpoint
// the replica should use.
func (h *s3Holds) listen(t *testing.T, replica int) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.serve(replica, w, r) })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

func (h *s3Holds) serve(replica int, w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	hold := h.match != nil && h.match(replica, r)
	h.mu.Unlock()
	if !hold {
		h.rp.ServeHTTP(w, r)
		return
	}
	// Reading the whole body lets the server notice the replica hanging
	// up, and keeps it for a forward after the replica is gone.
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	hr := &heldRequest{Replica: replica, Method: r.Method, Path: r.URL.Path, decide: make(chan bool, 1), finished: make(chan struct{})}
	h.mu.Lock()
	h.pending = append(h.pending, hr)
	close(h.changed)
	h.changed = make(chan struct{})
	h.mu.Unlock()
	forward := <-hr.decide
	defer close(hr.finished)
	if !forward {
		panic(http.ErrAbortHandler) // cut the connection, as if S3 never saw it
	}
	out := r.Clone(context.WithoutCancel(r.Context()))
	out.Body = io.NopCloser(bytes.NewReader(body))
	// The writer hides http.CloseNotifier, which ReverseProxy would
	// otherwise watch to cancel the request when the replica is gone.
	sw := &statusWriter{ResponseWriter: w}
	h.rp.ServeHTTP(struct{ http.ResponseWriter }{sw}, out)
	hr.status = sw.status
}

// Hold holds every request for which match answers true, from now on.
// match runs under a lock, so it may keep counts.
func (h *s3Holds) Hold(match func(replica int, r *http.Request) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.match = match
}

// Locked runs fn under the lock match runs under, to read what a match
// counted.
func (h *s3Holds) Locked(fn func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	fn()
}

// WaitHeld waits until at least n requests are held and returns them.
func (h *s3Holds) WaitHeld(t *testing.T, n int, within time.Duration) []*heldRequest {
	t.Helper()
	deadline := time.After(within)
	for {
		h.mu.Lock()
		got, changed := append([]*heldRequest(nil), h.pending...), h.changed
		h.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("%d S3 requests held after %s, want %d", len(got), within, n)
		}
	}
}

// Forward sends the held request on to S3 and returns S3's status.
func (h *s3Holds) Forward(hr *heldRequest) int {
	h.decide(hr, true)
	return hr.status
}

// Drop cuts the held request off; S3 never sees it.
func (h *s3Holds) Drop(hr *heldRequest) { h.decide(hr, false) }

func (h *s3Holds) decide(hr *heldRequest, forward bool) {
	h.mu.Lock()
	for i, p := range h.pending {
		if p == hr {
			h.pending = append(h.pending[:i], h.pending[i+1:]...)
			hr.decide <- forward
			break
		}
	}
	h.mu.Unlock()
	<-hr.finished
}

// Open stops holding and forwards whatever is still held.
func (h *s3Holds) Open() {
	h.mu.Lock()
	h.match = nil
	rest := h.pending
	h.pending = nil
	for _, hr := range rest {
		hr.decide <- true
	}
	h.mu.Unlock()
	for _, hr := range rest {
		<-hr.finished
	}
}

// String names a held request in failure messages.
func (hr *heldRequest) String() string {
	return fmt.Sprintf("%s %s from replica %d", hr.Method, hr.Path, hr.Replica)
}
