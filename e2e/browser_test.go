package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/ferry-io/ferry/client"
	"github.com/ferry-io/ferry/internal/faultproxy"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
)

// The browser tests drive Debian's Chromium with playwright-core from Node
// (e2e/browser/run.mjs). Locally they skip when Chromium or the npm
// packages are missing; with FERRY_TEST_REQUIRE_BROWSER=1 (CI) that is a
// failure.

const chromiumPath = "/usr/bin/chromium"

func e2eDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// requireBrowser skips (or, in CI, fails) the test when the browser
// tooling is missing.
func requireBrowser(t testing.TB) {
	t.Helper()
	var missing []string
	if _, err := os.Stat(chromiumPath); err != nil {
		missing = append(missing, chromiumPath)
	}
	if _, err := exec.LookPath("node"); err != nil {
		missing = append(missing, "node")
	}
	for _, d := range []string{"browser/node_modules/playwright-core", "browser/uppy5/node_modules/@uppy/aws-s3"} {
		if _, err := os.Stat(filepath.Join(e2eDir(), d)); err != nil {
			missing = append(missing, "e2e/"+d+" (npm ci)")
		}
	}
	if len(missing) == 0 {
		return
	}
	if os.Getenv("FERRY_TEST_REQUIRE_BROWSER") == "1" {
		t.Fatalf("browser tests are required but these are missing: %s", strings.Join(missing, ", "))
	}
	t.Skipf("browser tooling missing (%s); set FERRY_TEST_REQUIRE_BROWSER=1 to make this a failure", strings.Join(missing, ", "))
}

// runBrowser runs one scenario of run.mjs and decodes its result into out.
func runBrowser(t testing.TB, cfg map[string]any, out any) {
	t.Helper()
	cfg["chromium"] = chromiumPath
	cfg["artifacts"] = filepath.Join(e2eDir(), "artifacts")
	b, _ := json.Marshal(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "run.mjs")
	cmd.Dir = filepath.Join(e2eDir(), "browser")
	cmd.Env = append(os.Environ(), "FERRY_E2E="+string(b))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("browser scenario %s took %s", cfg["scenario"], time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("browser scenario %s: %v\n%s", cfg["scenario"], err, stderr.String())
	}
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "EXCHANGES "); ok {
			checkBrowserExchanges(t, line)
		}
		if line, ok := strings.CutPrefix(sc.Text(), "RESULT "); ok {
			if err := json.Unmarshal([]byte(line), out); err != nil {
				t.Fatalf("result %s: %v", line, err)
			}
			return
		}
	}
	t.Fatalf("browser scenario %s printed no result\n%s", cfg["scenario"], stderr.String())
}

// browserSetup starts ferry for a browser test, with a user and a random
// file of size bytes: it returns ferry, the user's token, and the file's
// path and SHA-256.
func browserSetup(t *testing.T, env map[string]string, name string, size int) (*Ferry, string, string, string) {
	t.Helper()
	requireBrowser(t)
	f := Start(t, Options{Env: env})
	_, tok := f.CreateUser("alice", false)
	path, sum := randomFile(t, name, size)
	return f, tok, path, sum
}

// randomFile writes size random bytes under the test's temp dir and
// returns the path and the hex SHA-256.
func randomFile(t testing.TB, name string, size int) (string, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	if _, err := io.CopyN(io.MultiWriter(f, h), rand.Reader, int64(size)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path, hex.EncodeToString(h.Sum(nil))
}

// s3Addr is the URL of the S3 server ferry uses.
func s3Addr(f *Ferry) string {
	if f.S3 != nil {
		return f.S3.Endpoint
	}
	for _, kv := range f.Env {
		if v, ok := strings.CutPrefix(kv, "FERRY_S3_EMBEDDED_ADDR="); ok {
			return "http://" + v
		}
	}
	return ""
}

// objectSHA256 hashes an object in ferry's bucket through minio-go, an
// independent client.
func objectSHA256(t *testing.T, f *Ferry, key string) string {
	t.Helper()
	b := ferryBucket(t, f)
	obj, _, _, err := b.GetObject(context.Background(), b.Name, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer obj.Close()
	h := sha256.New()
	if _, err := io.Copy(h, obj); err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// waitUpload polls the native API until the upload fails, or succeeds and
// ferry has hashed the stored bytes (its sha256 is then ferry's own).
func waitUpload(t *testing.T, f *Ferry, tok, id string) uploadJSON {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var u uploadJSON
		r := f.Do("GET", "/uploads/"+id, tok, nil)
		r.JSON(t, &u)
		hashed := u.State == "success" && u.SHA256Verified != nil && *u.SHA256Verified
		if r.Status != 200 || hashed || u.State == "failed" {
			if r.Status != 200 || u.State != "success" {
				t.Fatalf("upload %s: %d %s", id, r.Status, r.Body)
			}
			return u
		}
		if time.Now().After(deadline) {
			t.Fatalf("upload %s still %s", id, u.State)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// outboxEvents counts outbox rows of a type for a subject in ferry's
// SQLite database (read while ferry runs; WAL allows it).
func outboxEvents(t *testing.T, f *Ferry, typ, subject string) int64 {
	t.Helper()
	db, err := models.Open(context.Background(), models.SQLite, filepath.Join(f.Dir, "ferry-data", "ferry.db"), testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if s, err := db.DB(); err == nil {
			s.Close()
		}
	}()
	var n int64
	if err := db.Model(&models.OutboxEvent{}).Where("type = ? AND subject = ?", typ, subject).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// verified checks that an upload ended success with the file's SHA-256,
// that the object in the bucket hashes to it (minio-go), and that its
// upload.completed event is in the outbox.
func verified(t *testing.T, f *Ferry, tok, id, sum string) {
	t.Helper()
	u := waitUpload(t, f, tok, id)
	if u.SHA256 != sum {
		t.Fatalf("upload %s verified as %s, the file is %s", id, u.SHA256, sum)
	}
	if got := objectSHA256(t, f, "uploads/"+id); got != sum {
		t.Fatalf("the object in the bucket hashes to %s, the file to %s", got, sum)
	}
	if n := outboxEvents(t, f, "upload.completed", id); n != 1 {
		t.Fatalf("upload.completed events for %s = %d, want 1", id, n)
	}
}

// Done-when 1 and 6: a 64 MiB file uploaded through ferry's UI in Chromium
// ends success, and its SHA-256 read back with minio-go matches; the files
// list's link downloads it. The test saves screenshots of the upload in
// progress and of the files list. Signed in, the UI has started its
// hashing worker before the file is chosen (one: with WebCrypto the SDK
// needs no second for SHA-256s), and the SDK's warm() resolves once it is
// ready.
func TestBrowserUploadThroughUI(t *testing.T) {
	f, tok, path, sum := browserSetup(t, nil, "holiday-video.bin", 64*mib)
	var res struct {
		UploadID          string `json:"uploadId"`
		Puts              int    `json:"puts"`
		DownloadURL       string `json:"downloadURL"`
		WorkersBeforeFile int    `json:"workersBeforeFile"`
		Warmed            bool   `json:"warmed"`
		Download          struct {
			Name   string `json:"name"`
			SHA256 string `json:"sha256"`
		} `json:"download"`
	}
	runBrowser(t, map[string]any{"scenario": "ui-upload", "url": f.URL, "token": tok, "file": path, "s3": s3Addr(f)}, &res)
	verified(t, f, tok, res.UploadID, sum)
	if res.Puts != 8 {
		t.Fatalf("the UI sent %d part PUTs for 8 parts", res.Puts)
	}
	if res.WorkersBeforeFile != 1 {
		t.Errorf("signed in, before a file was chosen, the page ran %d hashing workers, want 1", res.WorkersBeforeFile)
	}
	if !res.Warmed {
		t.Errorf("Ferry.warm() resolved with false, want true")
	}
	if !strings.HasPrefix(res.DownloadURL, f.URL+"/download/fil_") || res.Download.SHA256 != sum || res.Download.Name != "holiday-video.bin" {
		t.Fatalf("files list link %q downloaded %+v", res.DownloadURL, res.Download)
	}
}

// A read of the file that never answers (headless Chromium's Blob streams
// now and then left one so under load, and the upload stuck in
// "Checking" for good) is given up on after a few seconds: the hashing
// worker reads the rest by slices, and the file uploads and verifies.
func TestBrowserStalledRead(t *testing.T) {
	f, tok, path, sum := browserSetup(t, nil, "stalled.bin", 20*mib+5)
	var res struct {
		UploadID string `json:"uploadId"`
		Stalls   int    `json:"stalls"`
		Ms       int    `json:"ms"`
	}
	runBrowser(t, map[string]any{"scenario": "ui-stalled-read", "url": f.URL, "token": tok, "file": path}, &res)
	if res.Stalls != 1 {
		t.Fatalf("%d reads stalled, want 1: the test did not stall the read it meant to", res.Stalls)
	}
	verified(t, f, tok, res.UploadID, sum)
	t.Logf("uploaded in %d ms with one read stalled", res.Ms)
}

// A part PUT whose connection to S3 freezes mid-body (held by a fault
// proxy the presigned URLs lead through, while new connections pass): the
// SDK gives it up after its idle timeout, sends the part again, and the
// file verifies. Without the bound the PUT waits for ever.
func TestBrowserFrozenPut(t *testing.T) {
	requireBrowser(t)
	o, p := proxiedS3(t, map[string]string{})
	f := Start(t, o)
	_, tok := f.CreateUser("alice", false)
	path, sum := randomFile(t, "frozen.bin", 20*mib+5)
	p.StallAfter(faultproxy.Upstream, 3*mib, 1)
	var res struct {
		UploadID string   `json:"uploadId"`
		Retries  []string `json:"retries"`
		Ms       int      `json:"ms"`
	}
	runBrowser(t, map[string]any{"scenario": "sdk-frozen-put", "url": f.URL, "token": tok, "file": path, "idle": 3000}, &res)
	if st := p.Stats(); st.Stalls != 1 || len(res.Retries) == 0 {
		t.Fatalf("%d connections frozen and retries %q; want 1 and the frozen part's", st.Stalls, res.Retries)
	}
	verified(t, f, tok, res.UploadID, sum)
	t.Logf("uploaded in %d ms with one PUT's connection frozen after 3 MiB; retries %q", res.Ms, res.Retries)
}

// Done-when 2: the page is reloaded in the middle of an upload and the
// same file chosen again: only the parts S3 lacks are sent (counted at the
// browser's network layer), and the file verifies. A part S3 lists with
// other bytes (as a PUT cut mid-way can leave) counts as missing.
func TestBrowserResumeAfterReload(t *testing.T) {
	f, tok, path, sum := browserSetup(t, nil, "archive.bin", 64*mib)
	var res struct {
		UploadID  string `json:"uploadId"`
		FirstRun  string `json:"firstRun"`
		PartCount int    `json:"partCount"`
		Listed    []int  `json:"listed"`
		Intact    []int  `json:"intact"`
		Puts      []int  `json:"puts"`
		Damaged   int    `json:"damaged"`
	}
	runBrowser(t, map[string]any{"scenario": "ui-resume", "url": f.URL, "token": tok, "file": path, "s3": s3Addr(f)}, &res)
	t.Logf("before the reload's re-select S3 listed parts %v (%d intact) of %d; after it the page sent %v",
		res.Listed, len(res.Intact), res.PartCount, res.Puts)
	if res.UploadID != res.FirstRun {
		t.Fatalf("the re-selected file started upload %s, not resumed %s", res.UploadID, res.FirstRun)
	}
	if len(res.Intact) == 0 || len(res.Intact) == res.PartCount {
		t.Fatalf("the reload did not land mid-upload: %d of %d parts intact", len(res.Intact), res.PartCount)
	}
	intact := map[int]bool{}
	for _, n := range res.Intact {
		intact[n] = true
	}
	sent := map[int]bool{}
	for _, n := range res.Puts {
		if intact[n] {
			t.Fatalf("part %d was sent again although S3 held it intact", n)
		}
		sent[n] = true
	}
	for n := 1; n <= res.PartCount; n++ {
		if !intact[n] && !sent[n] {
			t.Fatalf("missing part %d was never sent", n)
		}
	}
	if !slices.Contains(res.Listed, res.Damaged) || intact[res.Damaged] || !sent[res.Damaged] {
		t.Fatalf("part %d, listed with other bytes, was not sent again", res.Damaged)
	}
	if len(res.Puts) != res.PartCount-len(res.Intact) {
		t.Fatalf("sent %d PUTs for %d missing parts", len(res.Puts), res.PartCount-len(res.Intact))
	}
	verified(t, f, tok, res.UploadID, sum)
}

type uppyResult struct {
	Parts      int `json:"parts"`
	Successful []struct {
		Name      string `json:"name"`
		UploadURL string `json:"uploadURL"`
	} `json:"successful"`
	Failed []any `json:"failed"`
}

// uppyUpload checks an Uppy run: one file, uploaded in parts, whose
// location is ferry's upload, which then verifies.
func uppyUpload(t *testing.T, f *Ferry, tok, sum string, res uppyResult) {
	t.Helper()
	if len(res.Successful) != 1 || len(res.Failed) != 0 || res.Parts < 2 {
		t.Fatalf("uppy = %+v", res)
	}
	loc := res.Successful[0].UploadURL
	id := loc[strings.LastIndex(loc, "/")+1:]
	if !strings.HasPrefix(loc, f.URL+"/uploads/upl_") {
		t.Fatalf("uppy's uploadURL = %q, want ferry's upload", loc)
	}
	verified(t, f, tok, id, sum)
}

// Done-when 4: an unmodified Uppy 6 with companionEndpoint pointing at
// ferry, on ferry's origin with the session cookie, uploads a file over
// 100 MiB; it lands verified and upload.completed is in the outbox.
func TestBrowserUppy6Companion(t *testing.T) {
	f, tok, path, sum := browserSetup(t, nil, "uppy6.bin", 101*mib+12345)
	var res uppyResult
	runBrowser(t, map[string]any{"scenario": "uppy6", "url": f.URL, "token": tok, "file": path}, &res)
	uppyUpload(t, f, tok, sum, res)
}

// Issue 11, item 6, in a real browser: Uppy 6's same-origin GET
// /s3/params still gets a POST policy and its small upload verifies,
// while a link on another site that sends the signed-in browser to
// /s3/params (Sec-Fetch-Site cross-site, with the Lax cookie) is refused
// and opens no upload.
func TestBrowserUppy6ParamsSameOriginOnly(t *testing.T) {
	f, tok, path, sum := browserSetup(t, nil, "small.txt", 300<<10)
	_, port, _ := strings.Cut(testenv.FreeAddr(t), ":")
	var res struct {
		Uppy      uppyResult `json:"uppy"`
		CrossSite struct {
			Status       int    `json:"status"`
			Body         string `json:"body"`
			SecFetchSite string `json:"secFetchSite"`
			SentCookie   bool   `json:"sentCookie"`
		} `json:"crossSite"`
	}
	runBrowser(t, map[string]any{"scenario": "uppy6-params", "url": f.URL, "token": tok, "file": path, "crossSite": "http://localhost:" + port}, &res)
	if len(res.Uppy.Successful) != 1 || len(res.Uppy.Failed) != 0 || res.Uppy.Parts != 0 {
		t.Fatalf("uppy = %+v; want one POST-policy upload", res.Uppy)
	}
	loc := res.Uppy.Successful[0].UploadURL
	i := strings.Index(loc, "upl_")
	if i < 0 {
		t.Fatalf("uppy's uploadURL %q names no upload", loc)
	}
	// The upload verifies, and its file downloads as the file's bytes
	// (read through the proxy, whatever key the blob lives under).
	id := strings.TrimRight(loc[i:], "/")
	u := waitUpload(t, f, tok, id)
	var file struct {
		DownloadURL string `json:"download_url"`
	}
	f.Do("GET", "/files/"+u.FileID, tok, nil).JSON(t, &file)
	dl := f.Do("GET", strings.TrimPrefix(file.DownloadURL, f.URL), "", nil)
	if got := sha256.Sum256(dl.Body); u.SHA256 != sum || dl.Status != 200 || hex.EncodeToString(got[:]) != sum {
		t.Fatalf("upload %s verified as %s and downloads (%d) as other bytes; the file is %s", id, u.SHA256, dl.Status, sum)
	}
	if n := outboxEvents(t, f, "upload.completed", id); n != 1 {
		t.Fatalf("upload.completed events for %s = %d, want 1", id, n)
	}

	cs := res.CrossSite
	if cs.SecFetchSite != "cross-site" || !cs.SentCookie {
		t.Fatalf("the navigation sent Sec-Fetch-Site %q, cookie %v; the test needs a cross-site request with the cookie", cs.SecFetchSite, cs.SentCookie)
	}
	if cs.Status != 403 || !strings.Contains(cs.Body, `"cross_origin"`) {
		t.Fatalf("cross-site GET /s3/params = %d %s, want 403 cross_origin", cs.Status, cs.Body)
	}
	var planted int64
	ferryDB(t, f).Model(&models.Upload{}).Where("file_name = ?", "planted.txt").Count(&planted)
	if planted != 0 {
		t.Fatalf("the cross-site request opened %d uploads", planted)
	}
}

// Done-when 5: @uppy/aws-s3 5.1.0 in endpoint mode with an Authorization
// header, from another origin that FERRY_CORS_ORIGINS allows, does the
// same.
func TestBrowserUppy5Endpoint(t *testing.T) {
	origin := "http://" + testenv.FreeAddr(t) // the test page's server (run.mjs) listens here
	f, tok, path, sum := browserSetup(t, map[string]string{"FERRY_CORS_ORIGINS": origin}, "uppy5.bin", 100*mib+777)
	var res uppyResult
	runBrowser(t, map[string]any{"scenario": "uppy5", "url": f.URL, "origin": origin, "token": tok, "file": path}, &res)
	uppyUpload(t, f, tok, sum, res)
}

// Done-when 3 and 6: two quick clicks on "Create export" send the same
// Idempotency-Key and make one job, which the page follows to done; the
// test saves a screenshot of the exports page.
func TestBrowserExportDoubleClick(t *testing.T) {
	requireBrowser(t)
	f := Start(t, Options{})
	_, tok := f.CreateUser("alice", false)
	var conv struct{ ID string }
	f.Do("POST", "/conversations", tok, map[string]any{"title": "team"}).JSON(t, &conv)
	for i := range 30 {
		if r := f.Do("POST", "/conversations/"+conv.ID+"/messages", tok, map[string]any{"body": fmt.Sprintf("message %d", i)}); r.Status != 201 {
			t.Fatalf("message: %d %s", r.Status, r.Body)
		}
	}
	var res struct {
		Keys     []string `json:"keys"`
		Rows     []string `json:"rows"`
		State    string   `json:"state"`
		Download struct {
			Name   string `json:"name"`
			Bytes  int64  `json:"bytes"`
			SHA256 string `json:"sha256"`
		} `json:"download"`
	}
	runBrowser(t, map[string]any{"scenario": "ui-export", "url": f.URL, "token": tok}, &res)
	if len(res.Keys) != 2 || res.Keys[0] == "" || res.Keys[0] != res.Keys[1] {
		t.Fatalf("the two clicks sent Idempotency-Keys %q, want one key twice", res.Keys)
	}
	var list struct {
		Exports []struct {
			JobID string `json:"job_id"`
			State string `json:"state"`
		} `json:"exports"`
	}
	f.Do("GET", "/exports", tok, nil).JSON(t, &list)
	if len(list.Exports) != 1 || len(res.Rows) != 1 || res.Rows[0] != list.Exports[0].JobID {
		t.Fatalf("a double click made exports %+v (page shows %v), want one", list.Exports, res.Rows)
	}
	if res.State != "done" || list.Exports[0].State != "done" {
		t.Fatalf("export ended %s", res.State)
	}
	var job struct {
		SHA256 string `json:"sha256"`
		Bytes  int64  `json:"bytes"`
	}
	f.Do("GET", "/exports/"+list.Exports[0].JobID, tok, nil).JSON(t, &job)
	if res.Download.SHA256 != job.SHA256 || res.Download.Bytes != job.Bytes || res.Download.Bytes == 0 {
		t.Fatalf("the page downloaded %+v, the export is %+v", res.Download, job)
	}
}

// nativeUpload uploads a file through the native API, as a CLI would, and
// waits for it to verify.
func nativeUpload(t *testing.T, f *Ferry, tok, path, sum string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var up uploadJSON
	r := f.Do("POST", "/uploads", tok, map[string]any{"file_name": filepath.Base(path), "size": len(data), "sha256": sum})
	r.JSON(t, &up)
	if r.Status != 201 {
		t.Fatalf("init: %d %s", r.Status, r.Body)
	}
	nums := make([]int, up.PartCount)
	for i := range nums {
		nums[i] = i + 1
	}
	urls := f.presign(tok, up.UploadID, nums...)
	for _, n := range nums {
		part := data[int64(n-1)*up.PartSize : min(int64(n)*up.PartSize, int64(len(data)))]
		if code, _, err := putPart(urls[fmt.Sprint(n)], bytes.NewReader(part), int64(len(part))); err != nil || code != 200 {
			t.Fatalf("PUT part %d: %d %v", n, code, err)
		}
	}
	if r := f.Do("POST", "/uploads/"+up.UploadID+"/complete", tok, nil); r.Status != 202 {
		t.Fatalf("complete: %d %s", r.Status, r.Body)
	}
	waitUpload(t, f, tok, up.UploadID)
}

// On a page without WebCrypto (plain HTTP on a host other than
// localhost; here crypto.subtle is hidden in the page and in the hashing
// worker), the SDK computes SHA-256s with hash-wasm, the file's on a
// second worker: a 12 MiB file someone else holds is still proved and
// given at once, with no part sent.
func TestBrowserWithoutWebCrypto(t *testing.T) {
	f, tok, _, _ := browserSetup(t, nil, "unused.bin", 1)
	known, knownSum := randomFile(t, "shared.bin", 12*mib+5)
	_, bob := f.CreateUser("bob", false)
	nativeUpload(t, f, bob, known, knownSum)
	var res struct {
		Instant string `json:"instant"`
		Puts    int    `json:"puts"`
		Subtle  []bool `json:"subtle"` // the page's, then each hashing worker's
	}
	runBrowser(t, map[string]any{"scenario": "ui-no-webcrypto", "url": f.URL, "token": tok, "known": known, "s3": s3Addr(f)}, &res)
	if !slices.Equal(res.Subtle, []bool{false, false, false}) {
		t.Fatalf("crypto.subtle in the page and its hashing workers: %v, want none in the page and two workers", res.Subtle)
	}
	if res.Instant != "true" || res.Puts != 0 {
		t.Fatalf("content bob holds: instant=%s after %d PUTs, want an instant file after a proof", res.Instant, res.Puts)
	}
	var files struct {
		Files []struct{ SHA256 string } `json:"files"`
	}
	f.Do("GET", "/files", tok, nil).JSON(t, &files)
	if len(files.Files) != 1 || files.Files[0].SHA256 != knownSum {
		t.Fatalf("alice's files %+v, want the proved one, %s", files.Files, knownSum)
	}
}

// The SDK through the UI: content someone else holds is proved and given
// at once with no byte sent, its SHA-256 (and each proof's) computed by
// WebCrypto, since the file is small; Pause stops sending and Resume (from
// the keyboard) finishes; a PUT that fails at the network is retried after
// the 1 s backoff, and one refused with 403 is signed again.
func TestBrowserSDKBehaviours(t *testing.T) {
	f, tok, path, sum := browserSetup(t, nil, "second.bin", 48*mib)
	const knownSize = 12*mib + 5 // two reads of the file: the whole-file digest joins them
	known, knownSum := randomFile(t, "shared.bin", knownSize)
	_, bob := f.CreateUser("bob", false)
	nativeUpload(t, f, bob, known, knownSum)

	var res struct {
		Instant struct {
			Instant  string `json:"instant"`
			Puts     int    `json:"puts"`
			UploadID string `json:"uploadId"`
			Digested []int  `json:"digested"`
		} `json:"instant"`
		DuringPause int              `json:"duringPause"`
		Attempts    map[string][]int `json:"attempts"`
		Presigns    [][]int          `json:"presigns"`
		UploadID    string           `json:"uploadId"`
	}
	runBrowser(t, map[string]any{"scenario": "ui-sdk", "url": f.URL, "token": tok, "file": path, "known": known, "s3": s3Addr(f)}, &res)
	if res.Instant.Instant != "true" || res.Instant.Puts != 0 {
		t.Fatalf("content bob holds: instant=%s after %d PUTs, want an instant file after a proof", res.Instant.Instant, res.Instant.Puts)
	}
	whole, ranges := 0, 0
	for _, n := range res.Instant.Digested {
		if n == knownSize {
			whole++
		} else {
			ranges++
		}
	}
	if whole != 1 || ranges == 0 {
		t.Errorf("WebCrypto digested inputs of %v bytes: want the %d-byte file once and the proof's ranges", res.Instant.Digested, knownSize)
	}
	var files struct {
		Files []struct{ SHA256 string } `json:"files"`
	}
	f.Do("GET", "/files", tok, nil).JSON(t, &files)
	if len(files.Files) != 2 {
		t.Fatalf("alice has %d files, want the proved one and the uploaded one", len(files.Files))
	}
	if res.DuringPause != 0 {
		t.Fatalf("%d PUTs started while paused", res.DuringPause)
	}
	if a := res.Attempts["2"]; len(a) < 2 || a[1]-a[0] < 1000 {
		t.Fatalf("part 2 attempts at %v ms, want a retry after at least 1 s", a)
	}
	signed3 := 0
	for _, batch := range res.Presigns {
		for _, n := range batch {
			if n == 3 {
				signed3++
			}
		}
	}
	if len(res.Attempts["3"]) < 2 || signed3 < 2 {
		t.Fatalf("part 3: %d attempts, signed %d times; want it signed again after the 403", len(res.Attempts["3"]), signed3)
	}
	verified(t, f, tok, res.UploadID, sum)
}

// The JS SDK's skipHash, as `ferry upload --no-instant`: the same 20 MiB
// file uploaded twice with the SHA-256 left to ferry. Neither upload
// declares a SHA-256 (not at init, not mid-transfer, not at complete, which
// carries S3's whole-file CRC32C alone), so the second is not instant and
// sends all 3 parts again; ferry computes both SHA-256s from the stored
// bytes, and they are the file's. Nor does the SDK report finished parts
// to ferry (PUT /uploads/{id}/parts/{n}): a request per part that resume
// and complete do not need. And presign calls sign parts in batches: the
// first at once (nothing is being sent yet), the next after waiting for
// the next parts' CRC32Cs instead of signing each part as soon as it is
// read, so two calls sign the three parts.
func TestBrowserSDKSkipHash(t *testing.T) {
	f, tok, path, sum := browserSetup(t, nil, "no-instant.bin", 20*mib+7)
	var res struct {
		Uploads []struct {
			State    string `json:"state"`
			UploadID string `json:"uploadId"`
			SHA256   any    `json:"sha256"`
			CRC32C   string `json:"crc32c"`
			Puts     int    `json:"puts"`
			Calls    []struct {
				Path string         `json:"path"`
				Body map[string]any `json:"body"`
			} `json:"calls"`
			Presigns [][]int `json:"presigns"`
		} `json:"uploads"`
	}
	runBrowser(t, map[string]any{"scenario": "sdk-skip-hash", "url": f.URL, "token": tok, "file": path, "s3": s3Addr(f)}, &res)
	if len(res.Uploads) != 2 {
		t.Fatalf("%d uploads, want 2", len(res.Uploads))
	}
	for i, u := range res.Uploads {
		if u.State != "success" || u.Puts != 3 || u.SHA256 != nil || u.CRC32C == "" {
			t.Fatalf("upload %d: state %s after %d PUTs, SDK sha256 %v, crc32c %q; want success after 3 PUTs, no SHA-256 and a CRC32C",
				i+1, u.State, u.Puts, u.SHA256, u.CRC32C)
		}
		var paths []string
		for _, c := range u.Calls {
			paths = append(paths, c.Path)
			if _, ok := c.Body["sha256"]; ok {
				t.Fatalf("upload %d: %s sent a sha256: %v", i+1, c.Path, c.Body)
			}
			if c.Path == "/uploads/{id}/complete" && c.Body["checksum_crc32c"] != u.CRC32C {
				t.Fatalf("upload %d: complete carried checksum_crc32c %v, the SDK's is %s", i+1, c.Body["checksum_crc32c"], u.CRC32C)
			}
		}
		if !slices.Equal(paths, []string{"/uploads", "/uploads/{id}/complete"}) {
			t.Fatalf("upload %d: calls %v, want only init and complete (no SHA-256 declared, no part reported)", i+1, paths)
		}
		// Three parts and four PUTs at once: the first call signs what
		// is read when it goes, and one more call the rest, however far
		// the read is ahead of the PUTs.
		if len(u.Presigns) > 2 || !slices.Equal(slices.Concat(u.Presigns...), []int{1, 2, 3}) {
			t.Fatalf("upload %d: presign calls %v, want at most two, for [1 2 3] in all", i+1, u.Presigns)
		}
		if got := waitUpload(t, f, tok, u.UploadID); got.SHA256 != sum || got.SHA256Verified == nil || !*got.SHA256Verified {
			t.Fatalf("upload %d: ferry recorded sha256 %s (verified %v), the file is %s", i+1, got.SHA256, got.SHA256Verified, sum)
		}
	}
	if res.Uploads[0].UploadID == res.Uploads[1].UploadID {
		t.Fatalf("both uploads are %s", res.Uploads[0].UploadID)
	}
}

// Issue 12: a part damaged on its way to S3 (one bit flipped in its PUT)
// is refused by S3 itself, since the CRC32C signed into its URL does not
// match, and the SDK reads the part again and sends it. Every PUT carried
// the part's true CRC32C (checked against run.mjs's own CRC32C), and once
// ferry has hashed the stored bytes, the upload's SHA-256 is the file's.
func TestBrowserCorruptedPartResent(t *testing.T) {
	f, tok, path, sum := browserSetup(t, nil, "fragile.bin", 40*mib+3)
	var res struct {
		UploadID string `json:"uploadId"`
		Answers  map[string][]struct {
			Status int    `json:"status"`
			Code   string `json:"code"`
			CRC32C string `json:"crc32c"`
		} `json:"answers"`
		Local map[string]string `json:"local"`
	}
	runBrowser(t, map[string]any{"scenario": "ui-corrupt", "url": f.URL, "token": tok, "file": path, "s3": s3Addr(f), "damage": 2}, &res)
	t.Logf("S3's answers to the part PUTs: %+v", res.Answers)
	a := res.Answers["2"]
	if len(a) != 2 || a[0].Status != 400 || !slices.Contains([]string{"BadDigest", "XAmzContentChecksumMismatch", "InvalidDigest"}, a[0].Code) || a[1].Status != 200 {
		t.Fatalf("the damaged part 2 got %+v; want S3 to refuse it (400 BadDigest) and the SDK to send it again", a)
	}
	if len(res.Local) != 6 {
		t.Fatalf("the file has %d parts, want 6", len(res.Local))
	}
	for n, want := range res.Local {
		got := res.Answers[n]
		if len(got) == 0 || (n != "2" && len(got) != 1) {
			t.Fatalf("part %s was sent %d times", n, len(got))
		}
		for _, g := range got {
			if g.CRC32C != want {
				t.Fatalf("part %s was sent with x-amz-checksum-crc32c %q, its CRC32C is %s", n, g.CRC32C, want)
			}
		}
	}
	verified(t, f, tok, res.UploadID, sum)
}

// Issue 12: against a store without checksums (ferry does not grant
// checksum_algorithm CRC32C; the test takes it out of the SDK's request)
// the SDK falls back to pinning each part's Content-MD5, as before, and
// the upload verifies.
func TestBrowserContentMD5Fallback(t *testing.T) {
	f, tok, path, sum := browserSetup(t, nil, "plain.bin", 40*mib+3)
	var res struct {
		UploadID string `json:"uploadId"`
		Presigns []struct {
			PartNumbers []int             `json:"part_numbers"`
			ContentMD5  map[string]string `json:"content_md5"`
			CRC32C      map[string]string `json:"checksum_crc32c"`
		} `json:"presigns"`
		Puts []struct {
			Part   int    `json:"part"`
			MD5    string `json:"md5"`
			CRC32C string `json:"crc32c"`
		} `json:"puts"`
		Local map[string]string `json:"local"`
	}
	runBrowser(t, map[string]any{"scenario": "ui-md5", "url": f.URL, "token": tok, "file": path, "s3": s3Addr(f)}, &res)
	if len(res.Puts) != len(res.Local) || len(res.Local) != 6 {
		t.Fatalf("%d PUTs for %d parts", len(res.Puts), len(res.Local))
	}
	for _, p := range res.Puts {
		if want := res.Local[strconv.Itoa(p.Part)]; p.MD5 != want || p.CRC32C != "" {
			t.Fatalf("part %d was sent with Content-MD5 %q and CRC32C %q; want its MD5 %s and no CRC32C", p.Part, p.MD5, p.CRC32C, want)
		}
	}
	for _, ps := range res.Presigns {
		if len(ps.CRC32C) != 0 || len(ps.ContentMD5) != len(ps.PartNumbers) {
			t.Fatalf("presign %+v; want a content_md5 for every part", ps)
		}
	}
	var up struct {
		Checksum string `json:"checksum_algorithm"`
	}
	f.Do("GET", "/uploads/"+res.UploadID, tok, nil).JSON(t, &up)
	if up.Checksum != "" {
		t.Fatalf("the upload has checksum_algorithm %q; the test wanted one without", up.Checksum)
	}
	verified(t, f, tok, res.UploadID, sum)
}

// Issue 12: ferry's answer to the head CRC32C of a large file says it may
// hold the content (instant_candidate); the SDK then hashes the file before
// sending any part and declares the SHA-256 on the running upload. Content
// the user already has becomes an instant file (ferry aborts the running
// upload), and content someone else holds becomes one after a proof (the
// SDK aborts the running upload); in both, no part is sent.
func TestBrowserDeclaredHashGivesFile(t *testing.T) {
	f, tok, own, ownSum := browserSetup(t, nil, "mine.bin", 64*mib)
	nativeUpload(t, f, tok, own, ownSum)
	known, knownSum := randomFile(t, "theirs.bin", 64*mib)
	_, bob := f.CreateUser("bob", false)
	nativeUpload(t, f, bob, known, knownSum)

	var res map[string]struct {
		Instant  string   `json:"instant"`
		UploadID string   `json:"uploadId"`
		Puts     int      `json:"puts"`
		Calls    []string `json:"calls"`
	}
	runBrowser(t, map[string]any{"scenario": "ui-declare", "url": f.URL, "token": tok, "s3": s3Addr(f),
		"files": map[string]string{"own": own, "known": known}}, &res)
	t.Logf("the page: %+v", res)
	for _, name := range []string{"own", "known"} {
		r := res[name]
		if r.Instant != "true" || r.Puts != 0 || len(r.Calls) == 0 {
			t.Fatalf("%s: instant=%s after %d of 8 part PUTs, calls %v; want a file, no part sent, once the SHA-256 was declared", name, r.Instant, r.Puts, r.Calls)
		}
		running, ok := strings.CutSuffix(strings.TrimPrefix(r.Calls[0], "POST /uploads/"), "/sha256")
		if !ok || running == r.UploadID {
			t.Fatalf("%s: first call %q, want the declaration on the running upload", name, r.Calls[0])
		}
		if name == "known" && !slices.Contains(r.Calls, "DELETE /uploads/"+running) {
			t.Fatalf("known: calls %v; after the proof the SDK must abort the running upload", r.Calls)
		}
		var st uploadJSON
		f.Do("GET", "/uploads/"+running, tok, nil).JSON(t, &st)
		if st.State != "aborted" {
			t.Fatalf("%s: the running upload %s is %s, want aborted", name, running, st.State)
		}
		u := waitUpload(t, f, tok, r.UploadID)
		if want := map[string]string{"own": ownSum, "known": knownSum}[name]; u.SHA256 != want {
			t.Fatalf("%s: the instant file has sha256 %s, want %s", name, u.SHA256, want)
		}
	}
	var files struct {
		Files []struct{ SHA256 string } `json:"files"`
	}
	f.Do("GET", "/files", tok, nil).JSON(t, &files)
	if len(files.Files) != 3 {
		t.Fatalf("alice has %d files, want her first upload, its instant copy and the proved one", len(files.Files))
	}
}

// BenchmarkBrowserUpload is issue 12's web UI measure: 256 MiB through the
// UI in headless Chromium (hashing in the worker alongside CRC32C-checked
// part PUTs, complete, S3's check of the whole file, success) against the
// same 8 MiB parts PUT from the same page without hashing or checksums,
// 4 at once either way. Each of b.N rounds runs both; it reports the
// median ratio of their times (target ≥ 0.9) and where the UI's time goes:
// its stages, and the CPU seconds each process spent. A second baseline
// PUTs the parts with their CRC32Cs (computed beforehand) for S3 to check;
// a third also completes that upload and waits for success, so it pays
// S3's CompleteMultipartUpload as the UI does (ui/bare-completed) while
// reading and hashing nothing in the page; and a last leg sends the bare
// file through the SDK with skipHash: the UI's path without the SHA-256,
// which is what the client's hash costs. ui-puts/bare compares the UI up
// to its last PUT's answer with the bare PUTs. Each leg that completes
// also reports ferry's merge job from ferry's log (merge-ms for the UI's):
// S3's CompleteMultipartUpload with a ListParts and one transaction, so
// the store's share of the time from complete to success.
// FERRY_BENCH_UPLINK (MiB/s) limits the page's upload rate, as a real link
// would; by default the page sends as fast as the loopback goes. Unlimited,
// every leg runs with DevTools detached (e2e/browser/detached.mjs), as in a
// user's browser; the throttle needs DevTools, so limited legs run attached.
//
//	go test -run '^$' -bench BrowserUpload -benchtime 3x ./e2e
func BenchmarkBrowserUpload(b *testing.B) {
	requireBrowser(b)
	uplink := 0
	if v := os.Getenv("FERRY_BENCH_UPLINK"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("FERRY_BENCH_UPLINK=%q: want a rate in MiB/s", v)
		}
		uplink = n
	}
	f := Start(b, Options{})
	_, tok := f.CreateUser("alice", false)
	const size = 256 * mib
	raw, _ := randomFile(b, "raw.bin", size)
	ui := make([]string, b.N)
	for i := range ui {
		ui[i], _ = randomFile(b, fmt.Sprintf("ui-%d.bin", i), size)
	}
	var res struct {
		Runs []struct {
			Raw     float64 `json:"raw"`
			RawCRC  float64 `json:"rawCRC"`
			RawDone struct {
				LastPut, Completed, Total float64
			} `json:"rawDone"`
			UI         map[string]float64 `json:"ui"`
			SkipHash   float64            `json:"skipHash"`
			RawCPU     map[string]float64 `json:"rawCPU"`
			RawCRCCPU  map[string]float64 `json:"rawCRCCPU"`
			RawDoneCPU map[string]float64 `json:"rawDoneCPU"`
			UICPU      map[string]float64 `json:"uiCPU"`
			SkipCPU    map[string]float64 `json:"skipHashCPU"`
		} `json:"runs"`
		Detached bool `json:"detached"`
	}
	b.ResetTimer()
	runBrowser(b, map[string]any{"scenario": "bench", "url": f.URL, "token": tok, "s3": s3Addr(f), "raw": raw, "ui": ui,
		"ferryPid": f.cmd.Process.Pid, "uplink": uplink}, &res)
	b.StopTimer()
	// The legs that complete run one after another (the completed bare
	// PUTs, the UI, skipHash in each round), so ferry's log holds their
	// merges in that order.
	merges := f.LogLines("upload completed")
	if len(merges) != 3*len(res.Runs) {
		b.Fatalf("ferry logged %d merges, want 3 for each of %d rounds", len(merges), len(res.Runs))
	}
	mergeMS := func(round, leg int) float64 {
		d, ok := merges[3*round+leg]["elapsed"].(float64)
		if !ok {
			b.Fatalf("merge log %v has no elapsed nanoseconds", merges[3*round+leg])
		}
		return d / 1e6
	}
	median := func(f func(i int) float64) float64 {
		v := make([]float64, len(res.Runs))
		for i := range v {
			v[i] = f(i)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	mibps := func(ms float64) float64 { return size / mib / (ms / 1000) }
	b.Logf("legs ran with DevTools detached: %v", res.Detached)
	// One line per round: go test keeps only the first lines of a
	// benchmark's log.
	for i, r := range res.Runs {
		b.Logf("round %d: bare PUTs %.0f ms (%.0f MiB/s), with CRC32Cs %.0f ms (%.0f MiB/s), "+
			"with CRC32Cs and complete %.0f ms (%.0f MiB/s; last PUT done %.0f, complete answered %.0f), "+
			"UI %.0f ms (%.0f MiB/s), ratio %.2f (%.2f to the CRC32C PUTs, %.2f to the completed ones); "+
			"UI stages (ms from choosing the file): POST /uploads sent %.0f, answered %.0f, first presign sent %.0f, answered %.0f, first PUT %.0f, SHA-256 declared %.0f, last PUT done %.0f, "+
			"complete sent %.0f, answered %.0f, success %.0f; %.0f PUTs, %.0f presigns; SDK with skipHash %.0f ms (ratio %.2f). "+
			"ferry's merge job (S3's CompleteMultipartUpload in it): completed bare PUTs %.0f ms, UI %.0f ms, skipHash %.0f ms. "+
			"CPU seconds: bare PUTs %v; with CRC32Cs %v; with CRC32Cs and complete %v; UI %v; skipHash %v",
			i+1, r.Raw, mibps(r.Raw), r.RawCRC, mibps(r.RawCRC),
			r.RawDone.Total, mibps(r.RawDone.Total), r.RawDone.LastPut, r.RawDone.Completed,
			r.UI["total"], mibps(r.UI["total"]), r.Raw/r.UI["total"], r.RawCRC/r.UI["total"], r.RawDone.Total/r.UI["total"],
			r.UI["initSent"], r.UI["init"], r.UI["firstPresign"], r.UI["firstPresignEnd"], r.UI["firstPut"], r.UI["declared"], r.UI["lastPut"], r.UI["completeSent"], r.UI["completed"], r.UI["total"], r.UI["puts"], r.UI["presigns"],
			r.SkipHash, r.Raw/r.SkipHash, mergeMS(i, 0), mergeMS(i, 1), mergeMS(i, 2), r.RawCPU, r.RawCRCCPU, r.RawDoneCPU, r.UICPU, r.SkipCPU)
	}
	b.ReportMetric(median(func(i int) float64 { return res.Runs[i].Raw / res.Runs[i].UI["total"] }), "ui/bare")
	b.ReportMetric(median(func(i int) float64 { return res.Runs[i].RawCRC / res.Runs[i].UI["total"] }), "ui/bare-crc32c")
	b.ReportMetric(median(func(i int) float64 { return res.Runs[i].RawDone.Total / res.Runs[i].UI["total"] }), "ui/bare-completed")
	// Up to the last PUT's answer, against the bare PUTs': what reading and
	// hashing in the page cost, without S3's CompleteMultipartUpload.
	b.ReportMetric(median(func(i int) float64 { return res.Runs[i].Raw / res.Runs[i].UI["lastPut"] }), "ui-puts/bare")
	b.ReportMetric(median(func(i int) float64 { return res.Runs[i].RawDone.Total - res.Runs[i].RawDone.LastPut }), "bare-ms-after-last-put")
	b.ReportMetric(median(func(i int) float64 { return res.Runs[i].Raw / res.Runs[i].SkipHash }), "skiphash/bare")
	b.ReportMetric(median(func(i int) float64 { return mibps(res.Runs[i].UI["total"]) }), "ui-MiB/s")
	b.ReportMetric(median(func(i int) float64 { return mibps(res.Runs[i].Raw) }), "bare-MiB/s")
	b.ReportMetric(median(func(i int) float64 { return res.Runs[i].UI["total"] - res.Runs[i].UI["lastPut"] }), "ms-after-last-put")
	b.ReportMetric(median(func(i int) float64 { return mergeMS(i, 1) }), "merge-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkBrowserBodies measures what a part PUT's body costs Chromium by
// kind (e2e/browser/bodies.mjs says how): File slices, as the SDK sends,
// with and without the worker's read of every part before its PUT, against
// the bytes that read gave, sent from the page, as a Blob, or from the
// worker; and the first two again with fetch in XMLHttpRequest's place.
// The SDK keeps sending File slices and reading the file twice because,
// in this benchmark, the one-read legs cost Chromium more, and keeps
// XMLHttpRequest (whose upload progress its progress bar needs) because
// fetch costs no less.
// DevTools is detached while the bytes move, so the figures are Chromium's
// and not the harness's. 256 MiB in 8 MiB parts, 4 at once, to a sink in
// the harness that drops them.
//
//	go test -run '^$' -bench BrowserBodies -benchtime 1x ./e2e
func BenchmarkBrowserBodies(b *testing.B) {
	browserLegs(b, []string{"file", "file+read", "bytes-page", "bytes-blob", "bytes-worker", "file-fetch", "file+read-fetch"})
}

// BenchmarkBrowserReads measures what the hashing worker's read of a file
// costs Chromium, by each way a worker can read a File (bodies.mjs lists
// them), with nothing sent: the SDK reads through a byte stream into a
// buffer it reuses because, in this benchmark, every other way costs more.
// 256 MiB, detached as BenchmarkBrowserBodies is.
//
//	go test -run '^$' -bench BrowserReads -benchtime 1x ./e2e
func BenchmarkBrowserReads(b *testing.B) {
	browserLegs(b, []string{"read-byob", "read-stream", "read-sync", "read-slices"})
}

// BenchmarkBrowserFirstUpload measures a fresh page's first upload through
// the SDK, of a 4 MiB and a 16 MiB file of new random bytes (both hashed
// whole before ferry is asked), three ways side by side in each of
// max(b.N, 9) rounds: the hashing worker started by the upload itself
// (cold), started ahead by Ferry.warm() (warm, what the web UI does at
// sign-in), and warm on a page without WebCrypto, whose SHA-256 comes
// from hash-wasm on a second worker (no-webcrypto). It reports the median
// ms from start() to POST /uploads sent and to success, per leg and size.
//
//	FERRY_TEST_REQUIRE_BROWSER=1 go test -run '^$' -bench BrowserFirstUpload -benchtime 1x ./e2e
func BenchmarkBrowserFirstUpload(b *testing.B) {
	requireBrowser(b)
	f := Start(b, Options{})
	_, tok := f.CreateUser("alice", false)
	legs := []string{"cold", "warm", "no-webcrypto"}
	sizes := []int{4 * mib, 16 * mib}
	rounds := max(b.N, 9)
	files := make([]map[string][]string, rounds)
	for r := range files {
		files[r] = map[string][]string{}
		for _, leg := range legs {
			for _, size := range sizes {
				path, _ := randomFile(b, fmt.Sprintf("r%d-%s-%d.bin", r, leg, size), size)
				files[r][leg] = append(files[r][leg], path)
			}
		}
	}
	var res struct {
		Runs []struct {
			Round int
			Leg   string
			Size  int
			Post  float64
			Total float64
		}
	}
	b.ResetTimer()
	runBrowser(b, map[string]any{"scenario": "first-upload", "url": f.URL, "token": tok, "rounds": rounds, "files": files, "s3": s3Addr(f)}, &res)
	b.StopTimer()
	for _, leg := range legs {
		for _, size := range sizes {
			var post, total []float64
			for _, r := range res.Runs {
				if r.Leg == leg && r.Size == size {
					post, total = append(post, r.Post), append(total, r.Total)
				}
			}
			if len(total) != rounds {
				b.Fatalf("%s, %d bytes: %d uploads, want %d", leg, size, len(total), rounds)
			}
			b.Logf("%s, %d MiB: POST /uploads after %v ms, success after %v ms", leg, size/mib, rounded(post), rounded(total))
			slices.Sort(post)
			slices.Sort(total)
			name := fmt.Sprintf("%s-%dMiB", leg, size/mib)
			b.ReportMetric(post[len(post)/2], name+"-post-ms")
			b.ReportMetric(total[len(total)/2], name+"-success-ms")
		}
	}
	b.ReportMetric(0, "ns/op")
}

// rounded is v in whole numbers, for a log line.
func rounded(v []float64) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(math.Round(x))
	}
	return out
}

// browserLegs runs bodies.mjs's legs over a 256 MiB file, max(b.N, 3)
// rounds, and reports each leg's median ms and Chromium CPU seconds.
func browserLegs(b *testing.B, names []string) {
	requireBrowser(b)
	const size = 256 * mib
	file, _ := randomFile(b, "bodies.bin", size)
	var res struct {
		Runs []struct {
			Round int
			Leg   string
			MS    float64
			Bytes int64
			CPU   map[string]float64
		}
	}
	b.ResetTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cfg, _ := json.Marshal(map[string]any{"chromium": chromiumPath, "file": file, "rounds": max(b.N, 3), "legs": names})
	cmd := exec.CommandContext(ctx, "node", "bodies.mjs")
	cmd.Dir = filepath.Join(e2eDir(), "browser")
	cmd.Env = append(os.Environ(), "FERRY_E2E="+string(cfg))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	b.StopTimer()
	line, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "RESULT ")
	if err != nil || !ok {
		b.Fatalf("bodies.mjs: %v\n%s", err, stderr.String())
	}
	if err := json.Unmarshal([]byte(line), &res); err != nil {
		b.Fatalf("result %s: %v", line, err)
	}
	legs := map[string][]int{}
	for i, r := range res.Runs {
		if r.Bytes != size {
			b.Fatalf("round %d, %s: %d bytes went through, want %d", r.Round, r.Leg, r.Bytes, size)
		}
		legs[r.Leg] = append(legs[r.Leg], i)
	}
	median := func(leg string, f func(i int) float64) float64 {
		var v []float64
		for _, i := range legs[leg] {
			v = append(v, f(i))
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	cpu := func(i int) float64 {
		var s float64
		for _, v := range res.Runs[i].CPU {
			s += v
		}
		return s
	}
	for _, leg := range names {
		if len(legs[leg]) == 0 {
			b.Fatalf("no runs of %s", leg)
		}
		var rounds []string
		for _, i := range legs[leg] {
			rounds = append(rounds, fmt.Sprintf("%.0f ms %v", res.Runs[i].MS, res.Runs[i].CPU))
		}
		b.Logf("%s: %s", leg, strings.Join(rounds, "; "))
		b.ReportMetric(median(leg, func(i int) float64 { return res.Runs[i].MS }), leg+"-ms")
		b.ReportMetric(median(leg, cpu), leg+"-cpu-s")
	}
	b.ReportMetric(0, "ns/op")
}

// Issue 17, item 1: ferry's JS SDK runs on a host app's page of another
// origin (the page on http://localhost:P1, ferry on http://127.0.0.1:P2,
// listed in FERRY_CORS_ORIGINS). The page imports the SDK from ferry, the
// SDK starts its hashing worker from a Blob URL of the page's origin
// (browsers refuse a worker script from another origin), uploads a file
// over several parts with a bearer token and downloads it back through
// ferry's proxy, and uploads another with an upload ticket, which opens
// nothing else. A request with credentials (cookies) is never granted.
func TestBrowserSDKCrossOrigin(t *testing.T) {
	requireBrowser(t)
	_, port, _ := strings.Cut(testenvFree(t), ":")
	origin := "http://localhost:" + port
	f := Start(t, Options{Env: map[string]string{"FERRY_CORS_ORIGINS": origin, "FERRY_JOB_POLL": "50ms"}})
	aliceID, tok := f.CreateUser("alice", false)
	key := f.serviceKey("tickets:create")
	tokFile, tokSum := randomFile(t, "by-token.bin", 20*mib+333)
	tkFile, tkSum := randomFile(t, "by-ticket.bin", 9*mib+1)
	tk := f.ticket(key, map[string]any{"user_id": aliceID, "max_size": 10 * mib})
	type run struct {
		States []string `json:"states"`
		Result struct {
			State    string `json:"state"`
			UploadID string `json:"upload_id"`
			FileID   string `json:"file_id"`
		} `json:"result"`
		SHA256    string `json:"sha256"`
		CRC32C    string `json:"crc32c"`
		WorkerURL string `json:"workerURL"`
		Me        string `json:"me"`
		CookieMe  string `json:"cookieMe"`
		Download  struct {
			Status int    `json:"status"`
			Bytes  int64  `json:"bytes"`
			ETag   string `json:"etag"`
			SHA256 string `json:"sha256"`
		} `json:"download"`
	}
	var res struct {
		Token      run    `json:"token"`
		Ticket     run    `json:"ticket"`
		PageOrigin string `json:"pageOrigin"`
		Assets     []struct {
			URL    string `json:"url"`
			Origin string `json:"origin"`
		} `json:"assets"`
	}
	runBrowser(t, map[string]any{"scenario": "sdk-cross-origin", "url": f.URL, "origin": origin, "token": tok, "ticket": tk,
		"files": map[string]string{"token": tokFile, "ticket": tkFile}}, &res)
	if res.PageOrigin != origin || strings.HasPrefix(f.URL, origin) {
		t.Fatalf("the page ran on %s, ferry on %s: not two origins", res.PageOrigin, f.URL)
	}
	// The SDK and its worker came from ferry as CORS requests of the page.
	fetched := map[string]string{}
	for _, a := range res.Assets {
		fetched[a.URL] = a.Origin
	}
	for _, p := range []string{"/assets/ferry.js", "/assets/hash-worker.js"} {
		if fetched[p] != origin {
			t.Fatalf("%s fetched with Origin %q, want %s (assets: %+v)", p, fetched[p], origin, res.Assets)
		}
	}
	for name, r := range map[string]run{"token": res.Token, "ticket": res.Ticket} {
		// The worker's CRC32C of the whole file shows it ran (a file over
		// 16 MiB, new to ferry, gets no SHA-256 from the page).
		if !strings.HasPrefix(r.WorkerURL, "blob:"+origin+"/") || r.CRC32C == "" {
			t.Fatalf("%s: worker %q, crc32c %q: the hashing worker did not run from the page's origin", name, r.WorkerURL, r.CRC32C)
		}
		if r.Result.State != "success" || !slices.Contains(r.States, "uploading") {
			t.Fatalf("%s: the upload ended %+v after %v", name, r.Result, r.States)
		}
	}
	up := f.waitVerified(tok, res.Token.Result.UploadID)
	if up.SHA256 != tokSum {
		t.Fatalf("the token's upload verified as %s; the file is %s", up.SHA256, tokSum)
	}
	if d := res.Token.Download; d.Status != 200 || d.Bytes != 20*mib+333 || d.SHA256 != tokSum || d.ETag == "" {
		t.Fatalf("the page's download: %+v, want the file's %s with a readable ETag", d, tokSum)
	}
	if res.Token.CookieMe != "blocked" {
		t.Fatalf("GET /me with credentials from the page = %s, want it blocked (no Access-Control-Allow-Credentials)", res.Token.CookieMe)
	}
	tu := f.waitVerified(tok, res.Ticket.Result.UploadID)
	if tu.SHA256 != tkSum || res.Ticket.Me != "403 ticket_not_allowed" {
		t.Fatalf("the ticket's upload verified as %s (file %s); me() with the ticket: %q", tu.SHA256, tkSum, res.Ticket.Me)
	}
}

// Issue 20, item 1: with the server refusing connections mid-upload, the
// card says "Connection lost — retrying in N s" (not 0 B/s), then, once
// the SDK's retry budget is spent, "Upload stopped: connection lost" with
// Retry and Dismiss. With the server back, Retry resumes in the same card
// and the same upload, sending only the parts S3 lacked.
func TestBrowserConnectionLost(t *testing.T) {
	f, tok, path, sum := browserSetup(t, nil, "holiday.mp4", 96*mib)
	var res struct {
		Lost           string   `json:"lost"`
		StateWhileLost string   `json:"stateWhileLost"`
		Stopped        string   `json:"stopped"`
		Buttons        []string `json:"buttons"`
		FirstRun       string   `json:"firstRun"`
		UploadID       string   `json:"uploadId"`
		Cards          int      `json:"cards"`
		PartCount      int      `json:"partCount"`
		ListedBefore   int      `json:"listedBefore"`
		PutsAfterRetry []int    `json:"putsAfterRetry"`
	}
	runBrowser(t, map[string]any{"scenario": "ui-connection-lost", "url": f.URL, "token": tok, "file": path, "s3": s3Addr(f)}, &res)
	t.Logf("while lost: %q (%s); then %q with %v; S3 held %d of %d parts; Retry sent parts %v",
		res.Lost, res.StateWhileLost, res.Stopped, res.Buttons, res.ListedBefore, res.PartCount, res.PutsAfterRetry)
	if !strings.HasPrefix(res.Lost, "Connection lost — retrying in ") {
		t.Fatalf("while the server is down the card says %q", res.Lost)
	}
	if res.Stopped != "Upload stopped: connection lost." || !slices.Equal(res.Buttons, []string{"Retry", "Dismiss"}) {
		t.Fatalf("after the retries the card says %q with buttons %v, want the connection named and Retry, Dismiss", res.Stopped, res.Buttons)
	}
	if res.UploadID != res.FirstRun || res.Cards != 1 {
		t.Fatalf("Retry made upload %s in %d cards; want %s resumed in place", res.UploadID, res.Cards, res.FirstRun)
	}
	// The outage struck mid-transfer: S3 held some parts, not all, and
	// Retry sent the rest (a part cut mid-PUT may go again), no more.
	if res.ListedBefore < 2 || res.ListedBefore >= res.PartCount || len(res.PutsAfterRetry) == 0 ||
		len(res.PutsAfterRetry) > res.PartCount-res.ListedBefore+1 {
		t.Fatalf("Retry sent %v with %d of %d parts in S3: not a resume", res.PutsAfterRetry, res.ListedBefore, res.PartCount)
	}
	verified(t, f, tok, res.UploadID, sum)
}

// Issue 20, items 1 and 2: a file dropped on the page outside the drop
// zone uploads and the page stays; Cancel asks first (Keep uploading
// keeps it); a reload and a sign-out while the upload runs ask first, and
// declining keeps the upload and the session; Stop upload cancels, and the
// card offers Retry and Dismiss; Dismiss leaves focus on a control.
func TestBrowserUploadGuards(t *testing.T) {
	requireBrowser(t)
	f := Start(t, Options{})
	_, tok := f.CreateUser("alice", false)
	var res struct {
		Stayed           bool   `json:"stayed"`
		ConfirmShown     bool   `json:"confirmShown"`
		FocusAfterCancel string `json:"focusAfterCancel"`
		AfterKeep        string `json:"afterKeep"`
		AfterReload      struct {
			State string `json:"state"`
			Cards int    `json:"cards"`
		} `json:"afterReload"`
		AfterSignOut struct {
			SignedIn bool   `json:"signedIn"`
			State    string `json:"state"`
		} `json:"afterSignOut"`
		Cancelled    []string `json:"cancelled"`
		AfterDismiss struct {
			Cards int    `json:"cards"`
			Focus string `json:"focus"`
		} `json:"afterDismiss"`
		Dialogs []struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"dialogs"`
	}
	runBrowser(t, map[string]any{"scenario": "ui-guards", "url": f.URL, "token": tok}, &res)
	t.Logf("%+v", res)
	if !res.Stayed {
		t.Fatal("a drop outside the drop zone left the page")
	}
	if !res.ConfirmShown || res.FocusAfterCancel != "Stop upload" || res.AfterKeep != "uploading" {
		t.Fatalf("Cancel: asked %v (focus on %q), after Keep uploading %q", res.ConfirmShown, res.FocusAfterCancel, res.AfterKeep)
	}
	if len(res.Dialogs) != 2 || res.Dialogs[0].Type != "beforeunload" || res.Dialogs[1].Type != "confirm" ||
		!strings.Contains(res.Dialogs[1].Message, "still running") {
		t.Fatalf("dialogs %+v, want the reload's beforeunload and the sign-out's question", res.Dialogs)
	}
	if res.AfterReload.State != "uploading" || res.AfterReload.Cards != 1 || !res.AfterSignOut.SignedIn || res.AfterSignOut.State != "uploading" {
		t.Fatalf("after declining the reload %+v and the sign-out %+v, want the upload running", res.AfterReload, res.AfterSignOut)
	}
	if !slices.Equal(res.Cancelled, []string{"Retry", "Dismiss"}) || res.AfterDismiss.Cards != 0 || res.AfterDismiss.Focus != "choose" {
		t.Fatalf("a cancelled card offers %v; after Dismiss %+v", res.Cancelled, res.AfterDismiss)
	}
}

// Issue 20, items 5 and 7: paused past a third, the bar keeps what S3
// holds, and from Resume until the next part lands it never drops below
// that (it used to fall to 0 % and climb again); after a reload the page says
// "Resume NAME — X already uploaded; choose the file to continue" from
// what it remembered in IndexedDB; choosing the file resumes the same
// upload, and once done nothing is remembered.
func TestBrowserPauseAndRememberedResume(t *testing.T) {
	const size = 64 * mib
	f, tok, path, sum := browserSetup(t, nil, "holiday.mp4", size)
	var res struct {
		Paused struct {
			Parts    int    `json:"parts"`
			ValueNow int    `json:"valueNow"`
			Text     string `json:"text"`
		} `json:"paused"`
		Resumed struct {
			ValueNow int `json:"valueNow"`
		} `json:"resumed"`
		Note struct {
			Text string `json:"text"`
			ID   string `json:"id"`
		} `json:"note"`
		NotesAfterChoosing int    `json:"notesAfterChoosing"`
		UploadID           string `json:"uploadId"`
		ResumedID          string `json:"resumedId"`
		NotesAfterDone     int    `json:"notesAfterDone"`
	}
	runBrowser(t, map[string]any{"scenario": "ui-remembered", "url": f.URL, "token": tok, "file": path, "size": size}, &res)
	t.Logf("%+v", res)
	held := 100 * res.Paused.Parts * 8 * mib / size
	if res.Paused.ValueNow < held || res.Paused.ValueNow < 30 || res.Resumed.ValueNow < held {
		t.Fatalf("paused with %d parts (%d%%) in S3, the bar says %d%%, and as low as %d%% after Resume", res.Paused.Parts, held, res.Paused.ValueNow, res.Resumed.ValueNow)
	}
	if !strings.Contains(res.Paused.Text, "paused") {
		t.Fatalf("the paused card says %q", res.Paused.Text)
	}
	if !strings.HasPrefix(res.Note.Text, "Resume holiday.mp4 — ") || !strings.Contains(res.Note.Text, "already uploaded; choose the file to continue") || res.Note.ID != res.UploadID {
		t.Fatalf("after the reload the page says %q (for %s, the upload was %s)", res.Note.Text, res.Note.ID, res.UploadID)
	}
	if res.NotesAfterChoosing != 0 || res.ResumedID != res.UploadID || res.NotesAfterDone != 0 {
		t.Fatalf("choosing the file left %d notes and made upload %s (want %s); %d notes once done", res.NotesAfterChoosing, res.ResumedID, res.UploadID, res.NotesAfterDone)
	}
	verified(t, f, tok, res.UploadID, sum)
}

// Issue 20, items 8 and 9: with FERRY_MAX_UPLOAD_SIZE at 20 MiB a 30 MiB
// file is refused in MiB before it is read or ferry is asked, and so is an
// empty file; when the session ends (the account is deactivated) the next
// action brings back the sign-in form, and the header no longer names the
// user.
func TestBrowserLimitsAndEndedSession(t *testing.T) {
	requireBrowser(t)
	f := Start(t, Options{Env: map[string]string{"FERRY_MAX_UPLOAD_SIZE": "20MiB"}})
	if f.Token == "" {
		t.Skip("ferry printed no admin token")
	}
	id, tok := f.CreateUser("alice", false)
	path, _ := randomFile(t, "holiday.mp4", 30*mib)
	var res struct {
		Cards []struct {
			Name  string `json:"name"`
			State string `json:"state"`
			Text  string `json:"text"`
		} `json:"cards"`
		Status string   `json:"status"`
		Calls  []string `json:"calls"`
		Ended  struct {
			Who     bool   `json:"who"`
			App     bool   `json:"app"`
			Message string `json:"message"`
			Focus   string `json:"focus"`
		} `json:"ended"`
	}
	runBrowser(t, map[string]any{"scenario": "ui-limits", "url": f.URL, "token": tok, "file": path, "admin": f.Token, "userId": id}, &res)
	t.Logf("%+v", res)
	want := map[string]string{
		"holiday.mp4": "holiday.mp4 is 30 MiB; the largest file ferry accepts is 20 MiB.",
		"empty.txt":   "empty.txt is empty; ferry does not store empty files.",
	}
	if len(res.Cards) != 2 {
		t.Fatalf("cards %+v", res.Cards)
	}
	for _, c := range res.Cards {
		if c.State != "refused" || c.Text != want[c.Name] {
			t.Fatalf("card %+v, want %q", c, want[c.Name])
		}
	}
	if len(res.Calls) != 0 {
		t.Fatalf("refused files still called ferry: %v", res.Calls)
	}
	if res.Ended.Who || res.Ended.App || !strings.Contains(res.Ended.Message, "session ended") || res.Ended.Focus != "token" {
		t.Fatalf("after the session ended: %+v", res.Ended)
	}
}

// Issue 20, item 6: ferry refusing connections when the upload is opened
// and at complete: both are retried with a visible countdown, and the
// upload ends done (it used to fail at once with a red 100 %).
func TestBrowserOpenAndCompleteRetried(t *testing.T) {
	f, tok, path, sum := browserSetup(t, nil, "notes.bin", 20*mib)
	var res struct {
		Refused  struct{ Open, Complete int } `json:"refused"`
		Notes    []string                     `json:"notes"`
		UploadID string                       `json:"uploadId"`
		Error    bool                         `json:"error"`
	}
	runBrowser(t, map[string]any{"scenario": "ui-complete-retry", "url": f.URL, "token": tok, "file": path}, &res)
	t.Logf("%+v", res)
	if res.Refused.Open != 2 || res.Refused.Complete != 2 || res.Error {
		t.Fatalf("refused %+v, error shown %v", res.Refused, res.Error)
	}
	if len(res.Notes) == 0 || !strings.HasPrefix(res.Notes[0], "Connection lost — retrying in ") {
		t.Fatalf("notes while retrying: %q", res.Notes)
	}
	verified(t, f, tok, res.UploadID, sum)
}

// Issue 20, items 10 and 11: Copy link puts the file's download link on
// the clipboard and Delete removes the file (from ferry too); the export
// form picks a conversation by its title, and the export's row shows the
// title and a capitalised state.
func TestBrowserFilesAndExportsActions(t *testing.T) {
	requireBrowser(t)
	f := Start(t, Options{Env: map[string]string{"FERRY_JOB_POLL": "50ms"}})
	_, tok := f.CreateUser("alice", false)
	ac := client.New(f.URL, tok)
	dir := t.TempDir()
	for _, name := range []string{"a.txt", "b.txt"} {
		p, _ := writeRandomFile(t, dir, name, 1234)
		if _, err := ac.UploadFile(context.Background(), p, client.UploadOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var conv struct{ ID string }
	f.Do("POST", "/conversations", tok, map[string]any{"title": "team"}).JSON(t, &conv)
	f.Do("POST", "/conversations", tok, map[string]any{"title": "family"})
	f.Do("POST", "/conversations/"+conv.ID+"/messages", tok, map[string]any{"body": "hi"})
	var res struct {
		Before      int      `json:"before"`
		Copied      string   `json:"copied"`
		FirstLink   string   `json:"firstLink"`
		DeletedName string   `json:"deletedName"`
		Listed      []string `json:"listed"`
		Options     []string `json:"options"`
		Export      string   `json:"export"`
	}
	runBrowser(t, map[string]any{"scenario": "ui-files-exports", "url": f.URL, "token": tok}, &res)
	t.Logf("%+v", res)
	if res.Before != 2 || res.Copied == "" || res.Copied != res.FirstLink || !strings.Contains(res.Copied, "/download/fil_") {
		t.Fatalf("copied %q for link %q (of %d files)", res.Copied, res.FirstLink, res.Before)
	}
	if len(res.Listed) != 1 || res.Listed[0] == res.DeletedName {
		t.Fatalf("after deleting %s ferry lists %v", res.DeletedName, res.Listed)
	}
	if !slices.Contains(res.Options, "team") || !slices.Contains(res.Options, "family") {
		t.Fatalf("the conversation picker offers %q", res.Options)
	}
	if !strings.Contains(res.Export, "Conversation “team”") || !strings.Contains(res.Export, "Done") || !strings.Contains(res.Export, "1 message ") {
		t.Fatalf("the export row reads %q", res.Export)
	}
}

// Issue 20, items 10 and 16: two files chosen together show one overall
// line ("Uploading 2 files: … of 24 MiB") that counts bytes as they go
// and disappears once both are done; a re-upload of the same bytes (an
// instant file) and its original each say that another file holds the
// same content, while a file with other bytes says nothing. Of two loads
// of the files list, the later is shown even when the earlier is answered
// last (opening the Files tab just as an upload succeeds did that).
func TestBrowserSeveralFilesAndReuploads(t *testing.T) {
	requireBrowser(t)
	f := Start(t, Options{Env: map[string]string{"FERRY_JOB_POLL": "50ms"}})
	_, tok := f.CreateUser("alice", false)
	a, _ := randomFile(t, "alpha.bin", 12*mib)
	b, _ := randomFile(t, "beta.bin", 12*mib)
	var res struct {
		Overall      string   `json:"overall"`
		OverallLater string   `json:"overallLater"`
		OverallAfter bool     `json:"overallAfter"`
		Rows         []string `json:"rows"`
		// Rows shown after an earlier load of the list was answered (empty)
		// after a later one.
		RowsAfterLateAnswer int `json:"rowsAfterLateAnswer"`
	}
	runBrowser(t, map[string]any{"scenario": "ui-several", "url": f.URL, "token": tok, "files": []string{a, b}, "s3": s3Addr(f)}, &res)
	t.Logf("%+v", res)
	line := regexp.MustCompile(`^Uploading 2 files: [0-9.]+ (B|KiB|MiB) of 24 MiB$`)
	if !line.MatchString(res.Overall) || !line.MatchString(res.OverallLater) || strings.Contains(res.OverallLater, ": 0 B of") {
		t.Fatalf("the overall line read %q, then %q", res.Overall, res.OverallLater)
	}
	if res.OverallAfter {
		t.Fatal("the overall line stayed after both uploads were done")
	}
	noted := 0
	for _, r := range res.Rows {
		switch {
		case strings.HasPrefix(r, "alpha.bin") && strings.Contains(r, "same content as 1 other file"):
			noted++
		case strings.HasPrefix(r, "beta.bin") && !strings.Contains(r, "same content"):
		default:
			t.Fatalf("files list row %q", r)
		}
	}
	if noted != 2 || len(res.Rows) != 3 {
		t.Fatalf("files list %q: want both copies of alpha.bin marked, beta.bin not", res.Rows)
	}
	if res.RowsAfterLateAnswer != 3 {
		t.Fatalf("an earlier load of the files list answered last replaced the later one: %d rows shown, want 3", res.RowsAfterLateAnswer)
	}
}
