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
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

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
func requireBrowser(t *testing.T) {
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
func runBrowser(t *testing.T, cfg map[string]any, out any) {
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
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
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
func randomFile(t *testing.T, name string, size int) (string, string) {
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

func s3Addr(f *Ferry) string {
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
	obj, _, _, err := embeddedBucket(t, f).GetObject(context.Background(), "ferry", key, minio.GetObjectOptions{})
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

// waitUpload polls the native API until the upload succeeds or fails.
func waitUpload(t *testing.T, f *Ferry, tok, id string) uploadJSON {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var u uploadJSON
		r := f.Do("GET", "/uploads/"+id, tok, nil)
		r.JSON(t, &u)
		if r.Status != 200 || u.State == "success" || u.State == "failed" {
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
// progress and of the files list.
func TestBrowserUploadThroughUI(t *testing.T) {
	f, tok, path, sum := browserSetup(t, nil, "holiday-video.bin", 64*mib)
	var res struct {
		UploadID    string `json:"uploadId"`
		Puts        int    `json:"puts"`
		DownloadURL string `json:"downloadURL"`
		Download    struct {
			Name   string `json:"name"`
			SHA256 string `json:"sha256"`
		} `json:"download"`
	}
	runBrowser(t, map[string]any{"scenario": "ui-upload", "url": f.URL, "token": tok, "file": path, "s3": s3Addr(f)}, &res)
	verified(t, f, tok, res.UploadID, sum)
	if res.Puts != 8 {
		t.Fatalf("the UI sent %d part PUTs for 8 parts", res.Puts)
	}
	if !strings.HasPrefix(res.DownloadURL, "/download/fil_") || res.Download.SHA256 != sum || res.Download.Name != "holiday-video.bin" {
		t.Fatalf("files list link %q downloaded %+v", res.DownloadURL, res.Download)
	}
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

// The SDK through the UI: content someone else holds is proved and given
// at once with no byte sent; Pause stops sending and Resume (from the
// keyboard) finishes; a PUT that fails at the network is retried after the
// 1 s backoff, and one refused with 403 is signed again.
func TestBrowserSDKBehaviours(t *testing.T) {
	f, tok, path, sum := browserSetup(t, nil, "second.bin", 48*mib)
	known, knownSum := randomFile(t, "shared.bin", 12*mib+5)
	_, bob := f.CreateUser("bob", false)
	nativeUpload(t, f, bob, known, knownSum)

	var res struct {
		Instant struct {
			Instant  string `json:"instant"`
			Puts     int    `json:"puts"`
			UploadID string `json:"uploadId"`
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
