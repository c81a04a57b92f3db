package e2e

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/ferry-io/ferry/client"
	"github.com/ferry-io/ferry/s3store"
)

const mib = 1 << 20

type partJSON struct {
	PartNumber int    `json:"part_number"`
	Size       int64  `json:"size"`
	ETag       string `json:"etag"`
}

type uploadJSON struct {
	UploadID  string     `json:"upload_id"`
	State     string     `json:"state"`
	PartCount int        `json:"part_count"`
	PartSize  int64      `json:"part_size"`
	Parts     []partJSON `json:"parts"`
	FileID    string     `json:"file_id"`
	SHA256    string     `json:"sha256"`
	// SHA256Verified is set on success: false until ferry has hashed the
	// stored bytes.
	SHA256Verified *bool `json:"sha256_verified"`
}

type presigned struct {
	URL     string            `json:"url"`
	Method  string            `json:"method"`
	Headers map[string]string `json:"headers"`
}

func (f *Ferry) presign(tok, id string, parts ...int) map[string]presigned {
	f.t.Helper()
	r := f.Do("POST", "/uploads/"+id+"/presign", tok, map[string]any{"part_numbers": parts})
	if r.Status != 200 {
		f.t.Fatalf("presign: %d %s", r.Status, r.Body)
	}
	var out struct{ URLs map[string]presigned }
	r.JSON(f.t, &out)
	return out.URLs
}

// presignChecked presigns parts of an upload with checksums, each URL
// pinning its part's CRC32C, or its Content-MD5 where ferry did not grant
// the upload checksums (a store without them, such as SeaweedFS).
func (f *Ferry) presignChecked(tok, id string, parts map[int][]byte) map[string]presigned {
	f.t.Helper()
	var up struct {
		Checksum string `json:"checksum_algorithm"`
	}
	f.Do("GET", "/uploads/"+id, tok, nil).JSON(f.t, &up)
	field, sum := "checksum_crc32c", crc32c
	if up.Checksum == "" {
		field, sum = "content_md5", func(b []byte) string { h := md5.Sum(b); return base64.StdEncoding.EncodeToString(h[:]) }
	}
	nums, sums := []int{}, map[string]string{}
	for n, b := range parts {
		nums = append(nums, n)
		sums[fmt.Sprint(n)] = sum(b)
	}
	r := f.Do("POST", "/uploads/"+id+"/presign", tok, map[string]any{"part_numbers": nums, field: sums})
	if r.Status != 200 {
		f.t.Fatalf("presign: %d %s", r.Status, r.Body)
	}
	var out struct{ URLs map[string]presigned }
	r.JSON(f.t, &out)
	return out.URLs
}

// crc32c is the x-amz-checksum-crc32c form of b's CRC32C.
func crc32c(b []byte) string { return s3store.CRC32C(b) }

// putPart PUTs body to a presigned URL.
func putPart(p presigned, body io.Reader, size int64) (int, string, error) {
	req, err := http.NewRequest(p.Method, p.URL, body)
	if err != nil {
		return 0, "", err
	}
	req.ContentLength = size
	for k, v := range p.Headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("ETag"), nil
}

// bucketView is an independent minio-go view of the bucket ferry uses.
type bucketView struct {
	*minio.Core
	Name string
}

// ferryBucket opens the bucket ferry uses, on its embedded S3 (with the
// credentials it generated in its data dir) or on the external S3 it was
// started on.
func ferryBucket(t *testing.T, f *Ferry) bucketView {
	t.Helper()
	var endpoint, access, secret string
	if f.S3 != nil {
		u, err := url.Parse(f.S3.Endpoint)
		if err != nil {
			t.Fatal(err)
		}
		endpoint, access, secret = u.Host, f.S3.AccessKey, f.S3.SecretKey
	} else {
		var creds struct {
			AccessKey string `json:"access_key"`
			SecretKey string `json:"secret_key"`
		}
		b, err := os.ReadFile(filepath.Join(f.Dir, "ferry-data", "s3-credentials.json"))
		if err != nil {
			t.Fatal(err)
		}
		json.Unmarshal(b, &creds)
		endpoint, access, secret = strings.TrimPrefix(s3Addr(f), "http://"), creds.AccessKey, creds.SecretKey
	}
	c, err := minio.NewCore(endpoint, &minio.Options{Creds: credentials.NewStaticV4(access, secret, ""), Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	return bucketView{Core: c, Name: f.Bucket}
}

// s3Parts lists an upload's parts as S3 holds them, through minio-go.
func s3Parts(t *testing.T, mc bucketView, key string) []partJSON {
	t.Helper()
	ctx := context.Background()
	var uploadID string
	for u := range mc.ListIncompleteUploads(ctx, mc.Name, key, false) {
		if u.Err != nil {
			t.Fatal(u.Err)
		}
		uploadID = u.UploadID
	}
	if uploadID == "" {
		t.Fatalf("no multipart upload for %s", key)
	}
	res, err := mc.ListObjectParts(ctx, mc.Name, key, uploadID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []partJSON
	for _, p := range res.ObjectParts {
		out = append(out, partJSON{PartNumber: p.PartNumber, Size: p.Size, ETag: p.ETag})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PartNumber < out[j].PartNumber })
	return out
}

func sameParts(a, b []partJSON) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].PartNumber != b[i].PartNumber || a[i].Size != b[i].Size || normETag(a[i].ETag) != normETag(b[i].ETag) {
			return false
		}
	}
	return true
}

func normETag(e string) string { return strings.Trim(e, `"`) }

// Done-when 2: ferry (with its embedded S3, or beside an external one) is SIGKILLed in the middle of
// an upload, with a part PUT in flight, and restarted. The progress query
// still answers exactly what S3 holds, and the upload finishes.
func TestUploadSurvivesServerKill(t *testing.T) {
	forEachDriver(t, func(t *testing.T, mysql bool) {
		f := Start(t, Options{MySQL: mysql})
		if mysql {
			f.Token = cliCreateAdmin(t, f)
		}
		_, tok := f.CreateUser("alice", false)
		data := make([]byte, 3*5*mib+77) // 4 parts
		rand.Read(data)
		sum := sha256.Sum256(data)
		digest := hex.EncodeToString(sum[:])
		part := func(n int) []byte { return data[(n-1)*5*mib : min(n*5*mib, len(data))] }

		// The client this replays checksums its parts and gives the first
		// part's CRC32C, by which a client with only the file finds the
		// upload again; it declared the SHA-256 once it had read the file.
		r := f.Do("POST", "/uploads", tok, map[string]any{"file_name": "big.bin", "size": len(data), "part_size": 5 * mib,
			"checksum_algorithm": "CRC32C", "first_part_crc32c": crc32c(part(1))})
		if r.Status != 201 {
			t.Fatalf("init: %d %s", r.Status, r.Body)
		}
		var up uploadJSON
		r.JSON(t, &up)
		if r := f.Do("POST", "/uploads/"+up.UploadID+"/sha256", tok, map[string]any{"sha256": digest}); r.Status != 200 {
			t.Fatalf("declare: %d %s", r.Status, r.Body)
		}
		urls := f.presignChecked(tok, up.UploadID, map[int][]byte{1: part(1), 2: part(2), 3: part(3), 4: part(4)})
		for _, n := range []int{1, 3} {
			code, etag, err := putPart(urls[fmt.Sprint(n)], bytes.NewReader(part(n)), int64(len(part(n))))
			if err != nil || code != 200 {
				t.Fatalf("PUT part %d: %d %v", n, code, err)
			}
			if n == 1 {
				f.Do("PUT", "/uploads/"+up.UploadID+"/parts/1", tok, map[string]any{"etag": etag, "size": 5 * mib})
			}
		}
		// Part 2 is half-way through its PUT when ferry dies.
		pr, pw := io.Pipe()
		putDone := make(chan error, 1)
		go func() {
			_, _, err := putPart(urls["2"], pr, 5*mib)
			putDone <- err
		}()
		pw.Write(part(2)[:2*mib])
		f.Kill()
		pw.CloseWithError(io.ErrClosedPipe)
		if err := <-putDone; err == nil {
			t.Log("the in-flight PUT returned without error")
		}

		f.Restart()
		mc := ferryBucket(t, f)
		var after uploadJSON
		r = f.Do("GET", "/uploads/"+up.UploadID, tok, nil)
		if r.Status != 200 {
			t.Fatalf("status after restart: %d %s", r.Status, r.Body)
		}
		r.JSON(t, &after)
		truth := s3Parts(t, mc, "uploads/"+up.UploadID)
		if after.State != "uploading" || !sameParts(after.Parts, truth) {
			t.Fatalf("progress after restart = %+v\nS3 holds %+v", after.Parts, truth)
		}
		have := map[int]bool{}
		for _, p := range after.Parts {
			have[p.PartNumber] = true
		}
		if !have[1] || !have[3] {
			t.Fatalf("finished parts lost across the restart: %+v", after.Parts)
		}
		t.Logf("after restart S3 and ferry agree on parts %+v", after.Parts)
		r = f.Do("GET", fmt.Sprintf("/uploads?sha256=%s&size=%d", digest, len(data)), tok, nil)
		var found uploadJSON
		r.JSON(t, &found)
		if r.Status != 200 || found.UploadID != up.UploadID || !sameParts(found.Parts, truth) {
			t.Fatalf("find after restart: %d %s", r.Status, r.Body)
		}

		// A client that has only the file finishes the upload: it is
		// offered the same upload and sends just the parts S3 lacks (part
		// 2, cut mid-PUT, and part 4).
		res, err := f.Client(tok).Upload(context.Background(), bytes.NewReader(data), int64(len(data)), client.UploadOptions{Name: "big.bin", PartSize: 5 * mib})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Resumed || res.UploadID != up.UploadID || res.PartsSent != 2 || res.PartsSkipped != 2 {
			t.Fatalf("resume after restart: %+v; want the same upload, 2 parts sent and 2 skipped", res)
		}
		var done uploadJSON
		f.Do("GET", "/uploads/"+up.UploadID, tok, nil).JSON(t, &done)
		if done.State != "success" || done.SHA256 != digest || done.FileID != res.FileID {
			t.Fatalf("final = %+v", done)
		}
		obj, _, _, err := mc.GetObject(context.Background(), mc.Name, "uploads/"+up.UploadID, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		io.Copy(h, obj)
		obj.Close()
		if hex.EncodeToString(h.Sum(nil)) != digest {
			t.Fatal("the object in the bucket is not the file")
		}
		var list struct {
			Files []struct {
				FileID      string `json:"file_id"`
				SHA256      string `json:"sha256"`
				DownloadURL string `json:"download_url"`
			} `json:"files"`
		}
		f.Do("GET", "/files", tok, nil).JSON(t, &list)
		if len(list.Files) != 1 || list.Files[0].FileID != done.FileID || list.Files[0].SHA256 != digest {
			t.Fatalf("files = %+v", list.Files)
		}
		if u, err := url.Parse(list.Files[0].DownloadURL); err != nil || u.Query().Get("sig") == "" {
			t.Fatalf("download_url = %q", list.Files[0].DownloadURL)
		}
	})
}

// The Go client signs part URLs in batches, not one call per part read:
// each batch once it has read as many parts as it sends at once, with
// every part it read meanwhile. The read here is slower than the PUTs
// (30 ms a part, as a slow disk or a busy core makes it), where signing
// what had been read when a sender was free made a call per part.
func TestClientSignsPartsInBatches(t *testing.T) {
	f := Start(t, Options{})
	_, alice := f.CreateUser("alice", false)
	const parts, concurrency = 16, 4
	data := make([]byte, parts*5*mib)
	rand.Read(data)
	rec := &presignRecorder{rt: f.HTTP.Transport}
	c := client.New(f.URL, alice, client.WithHTTPClient(&http.Client{Timeout: 60 * time.Second, Transport: rec}))
	src := &slowFirstRead{r: bytes.NewReader(data), pause: 30 * time.Millisecond, seen: map[int64]bool{}}
	res, err := c.Upload(context.Background(), src, int64(len(data)),
		client.UploadOptions{Name: "batches.bin", PartSize: 5 * mib, Concurrency: concurrency})
	if err != nil || res.PartsSent != parts {
		t.Fatalf("upload = %+v, %v; want %d parts sent", res, err, parts)
	}
	batches := rec.batches()
	signed := 0
	for _, b := range batches {
		signed += len(b)
	}
	if len(batches) == 0 || len(batches[0]) != concurrency || signed != parts {
		t.Fatalf("presign batches %v: want the first of %d parts and each of the %d parts signed once", batches, concurrency, parts)
	}
	if len(batches) > parts/2 {
		t.Fatalf("%d presign calls for %d parts (%v): the client signs parts one by one", len(batches), parts, batches)
	}
	if v := f.waitVerified(alice, res.UploadID); v.SHA256 != fmt.Sprintf("%x", sha256.Sum256(data)) {
		t.Fatalf("ferry verified %s, not the file", v.SHA256)
	}
}

// slowFirstRead pauses the first read at each offset: the client's
// checksum read, not the senders' reads of the same parts after it.
type slowFirstRead struct {
	r     io.ReaderAt
	pause time.Duration
	mu    sync.Mutex
	seen  map[int64]bool
}

func (s *slowFirstRead) ReadAt(p []byte, off int64) (int, error) {
	s.mu.Lock()
	first := !s.seen[off]
	s.seen[off] = true
	s.mu.Unlock()
	if first {
		time.Sleep(s.pause)
	}
	return s.r.ReadAt(p, off)
}

// presignRecorder records the part numbers of each presign call a client
// makes through it.
type presignRecorder struct {
	rt    http.RoundTripper
	mu    sync.Mutex
	calls [][]int
}

func (r *presignRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/presign") && req.Body != nil {
		body, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		var b struct {
			PartNumbers []int `json:"part_numbers"`
		}
		if err := json.Unmarshal(body, &b); err != nil {
			return nil, err
		}
		r.mu.Lock()
		r.calls = append(r.calls, b.PartNumbers)
		r.mu.Unlock()
	}
	return r.rt.RoundTrip(req)
}

func (r *presignRecorder) batches() [][]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// The Go client hashes a file only when ferry says it may hold the
// content (instant_candidate, from the size and the CRC32C of the first
// 8 MiB): uploading again a file the caller holds is instant before any
// part is sent, a file someone else holds is proved, a file that shares
// only its size and head is hashed and then sent, and new content is sent
// without hashing, its SHA-256 computed by ferry.
func TestClientHashesOnlyWhenContentMayBeHeld(t *testing.T) {
	f := Start(t, Options{})
	_, alice := f.CreateUser("alice", false)
	_, bob := f.CreateUser("bob", false)
	ctx := context.Background()
	data := make([]byte, 20*mib+11) // a head of 8 MiB and more after it
	rand.Read(data)
	sum := sha256.Sum256(data)
	var phases, running sync.Map // name/phase seen; name → the upload its progress named
	upload := func(tok, name string, b []byte) *client.UploadResult {
		t.Helper()
		res, err := f.Client(tok).Upload(ctx, bytes.NewReader(b), int64(len(b)), client.UploadOptions{Name: name,
			Progress: func(p client.Progress) {
				phases.Store(name+"/"+p.Phase, true)
				running.LoadOrStore(name, p.UploadID)
			}})
		if err != nil {
			t.Fatalf("upload %s: %v", name, err)
		}
		return res
	}
	hashed := func(name string) bool { _, ok := phases.Load(name + "/hash"); return ok }

	first := upload(alice, "first.bin", data)
	if first.Instant || first.PartsSent != 3 || hashed("first.bin") {
		t.Fatalf("new content: %+v, hashed %v; want 3 parts sent and no hash", first, hashed("first.bin"))
	}
	if v := f.waitVerified(alice, first.UploadID); v.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("ferry verified %s, want %x", v.SHA256, sum)
	}

	again := upload(alice, "again.bin", data)
	if !again.Instant || again.PartsSent != 0 || !hashed("again.bin") || again.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("upload again: %+v, want instant with no part sent", again)
	}
	var st uploadJSON
	f.Do("GET", "/uploads/"+again.UploadID, alice, nil).JSON(t, &st)
	if st.State != "success" || st.FileID != again.FileID {
		t.Fatalf("the result's upload %s is %s with file %s, want the instant upload of %s", again.UploadID, st.State, st.FileID, again.FileID)
	}
	if id, _ := running.Load("again.bin"); id == again.UploadID {
		t.Fatal("the instant answer's upload is the one the hash ran for")
	} else {
		f.Do("GET", "/uploads/"+id.(string), alice, nil).JSON(t, &st)
		if st.State != "aborted" {
			t.Fatalf("the upload made useless by the instant answer is %s, want aborted", st.State)
		}
	}
	proved := upload(bob, "b.bin", data)
	if !proved.Instant || proved.PartsSent != 0 {
		t.Fatalf("bob's upload: %+v, want instant after a proof, no part sent", proved)
	}
	if v := f.waitVerified(bob, proved.UploadID); v.FileID != proved.FileID {
		t.Fatalf("bob's result names upload %s of file %s; the proof gave file %s", proved.UploadID, v.FileID, proved.FileID)
	}

	// Same size and head, other bytes after it: hashed (the hint cannot
	// tell), then sent in full.
	twin := append(append([]byte{}, data[:8*mib]...), make([]byte, len(data)-8*mib)...)
	rand.Read(twin[8*mib:])
	tw := upload(bob, "twin.bin", twin)
	if tw.Instant || tw.PartsSent != 3 || !hashed("twin.bin") {
		t.Fatalf("twin: %+v, hashed %v; want hashed, then 3 parts sent", tw, hashed("twin.bin"))
	}
	ts := sha256.Sum256(twin)
	if v := f.waitVerified(bob, tw.UploadID); v.SHA256 != hex.EncodeToString(ts[:]) {
		t.Fatalf("twin verified as %s, want %x", v.SHA256, ts)
	}
}

// A file that changes between the read that checksums a part and the send
// of that part is refused by S3 (the URL pins the first checksum), and the
// client says what happened instead of retrying: nothing mixed is stored.
func TestClientRefusesAFileChangedMidUpload(t *testing.T) {
	f := Start(t, Options{})
	_, alice := f.CreateUser("alice", false)
	data := make([]byte, 2*8*mib+5)
	rand.Read(data)
	r := &changingReader{data: data}
	_, err := f.Client(alice).Upload(context.Background(), r, int64(len(data)), client.UploadOptions{Name: "moving.bin"})
	if err == nil || !strings.Contains(err.Error(), "changed while it was being uploaded") {
		t.Fatalf("a file changed mid-upload: %v, want the change reported", err)
	}
	var files struct{ Files []any }
	f.Do("GET", "/files", alice, nil).JSON(t, &files)
	if len(files.Files) != 0 {
		t.Fatalf("alice has %d files after a refused upload", len(files.Files))
	}
}

// changingReader flips a byte of part 1 just before its third read at
// offset 0: the first is the client's look at the head for POST /uploads,
// the second the checksum read, the third the read that sends the part.
type changingReader struct {
	mu    sync.Mutex
	data  []byte
	reads int
}

func (c *changingReader) ReadAt(p []byte, off int64) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if off == 0 {
		if c.reads++; c.reads == 3 {
			c.data[1234] ^= 0xff
		}
	}
	if off >= int64(len(c.data)) {
		return 0, io.EOF
	}
	n := copy(p, c.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
