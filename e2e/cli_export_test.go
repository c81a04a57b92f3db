package e2e

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// After its export was revoked, `ferry export -o F` exits 4 (gone, as
// docs/cli.md's table says) and says to use --new (the saved key names
// that export for good); with --new it makes a new export. It used to
// exit 5, the code of a failed export.
func TestCLIExportEndedSuggestsNew(t *testing.T) {
	f := Start(t, Options{})
	_, tok := f.CreateUser("erin", false)
	var conv struct{ ID string }
	f.Do("POST", "/conversations", tok, map[string]any{"title": "t"}).JSON(t, &conv)
	f.Do("POST", "/conversations/"+conv.ID+"/messages", tok, map[string]any{"body": "hello"})
	out := filepath.Join(t.TempDir(), "mine.jsonl.gz")
	run := func(args ...string) ([]byte, error) {
		return cli(t, f, f.URL, tok, append([]string{"export", "--json", "-o", out}, args...)...).Output()
	}
	b, err := run()
	if err != nil {
		t.Fatalf("export: %v\n%s\n%s", err, b, stderrOf(err))
	}
	job := last(jsonLines(t, b), "done")["job_id"].(string)
	want(t, f.Do("DELETE", "/exports/"+job, tok, nil), 200, "")

	b, err = run()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 4 {
		t.Fatalf("export of a revoked job: %v, want exit 4 (gone)\n%s", err, b)
	}
	msg := lastLine(stderrOf(err))
	if !strings.Contains(msg, job) || !strings.Contains(msg, "revoked") || !strings.Contains(msg, "--new") {
		t.Fatalf("the error %q does not say the job is revoked and to use --new", msg)
	}
	if rec := last(jsonLines(t, b), "error"); rec == nil || !strings.Contains(rec["error"].(string), "--new") {
		t.Fatalf("--json error record %v lacks the hint", rec)
	}
	b, err = run("--new")
	if err != nil {
		t.Fatalf("export --new: %v\n%s\n%s", err, b, stderrOf(err))
	}
	if again := last(jsonLines(t, b), "done")["job_id"]; again == job {
		t.Fatalf("--new reused job %s", job)
	}
}

// cutOnce is a reverse proxy to target that cuts the first 200 response
// whose path starts with prefix after n body bytes, once the wait has
// passed (so the link it carried has expired), and forwards everything
// else. It returns the status of each such response, in order.
func cutOnce(t *testing.T, target, prefix string, n int, wait time.Duration) (string, func() []int) {
	t.Helper()
	u, _ := url.Parse(target)
	rp := httputil.NewSingleHostReverseProxy(u)
	var (
		mu       sync.Mutex
		statuses []int
		cut      atomic.Bool
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, prefix) {
			rp.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		i := len(statuses)
		statuses = append(statuses, 0)
		mu.Unlock()
		rp.ServeHTTP(&cutter{ResponseWriter: w, left: n, wait: wait, cut: &cut, status: func(code int) {
			mu.Lock()
			statuses[i] = code
			mu.Unlock()
		}}, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []int {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(statuses)
	}
}

// cutter reports the status of one response and, if it is the first 200
// of its proxy, drops the connection after left body bytes and a wait.
type cutter struct {
	http.ResponseWriter
	left    int
	wait    time.Duration
	cut     *atomic.Bool
	cutting bool
	status  func(int)
}

func (c *cutter) WriteHeader(code int) {
	c.status(code)
	c.cutting = code == http.StatusOK && c.cut.CompareAndSwap(false, true)
	c.ResponseWriter.WriteHeader(code)
}

func (c *cutter) Write(p []byte) (int, error) {
	if c.cutting && len(p) >= c.left {
		c.ResponseWriter.Write(p[:c.left])
		c.ResponseWriter.(http.Flusher).Flush()
		time.Sleep(c.wait)
		panic(http.ErrAbortHandler) // drop the connection mid-body
	}
	c.left -= len(p)
	n, err := c.ResponseWriter.Write(p)
	c.ResponseWriter.(http.Flusher).Flush()
	return n, err
}

func (c *cutter) Flush() { c.ResponseWriter.(http.Flusher).Flush() }

// A download cut after its link expired resumes with a fresh link from
// the export: `ferry export` gets one and goes on with a range request,
// as the upload side re-signs part URLs. It used to end on 403
// link_expired (exit 3).
func TestCLIExportResumesWithFreshLink(t *testing.T) {
	ferryAddr := testenvFree(t)
	proxy, downloads := cutOnce(t, "http://"+ferryAddr, "/download/", 100_000, 3500*time.Millisecond)
	f := Start(t, Options{Env: map[string]string{
		"FERRY_ADDR": ferryAddr, "FERRY_PUBLIC_URL": proxy, "FERRY_DOWNLOAD_LINK_TTL": "3s",
	}})
	_, tok := f.CreateUser("erin", false)
	var conv struct{ ID string }
	f.Do("POST", "/conversations", tok, map[string]any{"title": "t"}).JSON(t, &conv)
	for range 30 { // incompressible bodies: an artifact of about 300 KB
		b := make([]byte, 9000)
		rand.Read(b)
		want(t, f.Do("POST", "/conversations/"+conv.ID+"/messages", tok, map[string]any{"body": base64.StdEncoding.EncodeToString(b)}), 201, "")
	}
	out := filepath.Join(t.TempDir(), "mine.jsonl.gz")
	b, err := cli(t, f, f.URL, tok, "export", "--json", "-o", out).Output()
	if err != nil {
		t.Fatalf("export: %v\n%s\n%s", err, b, stderrOf(err))
	}
	done := last(jsonLines(t, b), "done")
	var x struct {
		SHA256 string
		Bytes  int64
	}
	f.Do("GET", "/exports/"+done["job_id"].(string), tok, nil).JSON(t, &x)
	// The resumed download is checked whole against the artifact's CRC32C,
	// which the proxy sends as Repr-Digest.
	if done["sha256"] != x.SHA256 || done["checked_by"] != "crc32c" || x.Bytes < 200_000 {
		t.Fatalf("result %v, export %+v", done, x)
	}
	// The 200 is cut once its link has expired; the retry with that link
	// is refused, and the CLI resumes with a fresh one. On a loaded
	// machine a link may expire before its first use, which costs one
	// more refusal and one more fresh link, never a failed export.
	got := downloads()
	refused, after := 0, 0
	ok := len(got) >= 3 && got[len(got)-1] == http.StatusPartialContent
	for i, code := range got[:len(got)-1] {
		switch {
		case code == http.StatusForbidden:
			refused++
			if i > 0 && slices.Contains(got[:i], http.StatusOK) {
				after++
			}
		case code != http.StatusOK || slices.Contains(got[:i], http.StatusOK):
			ok = false
		}
	}
	if !ok || after == 0 || refused > 3 {
		t.Fatalf("download statuses %v, want 200 (cut), 403 (link expired), 206 (resumed)", got)
	}
	metrics := f.Do("GET", "/metrics", "", nil)
	if !strings.Contains(string(metrics.Body), fmt.Sprintf("ferry_download_refused_links_total{reason=%q} %d\n", "expired", refused)) {
		t.Fatalf("want %d refused expired links in the metrics:\n%s", refused, grepLines(string(metrics.Body), "refused_links"))
	}
}
