package e2e

import (
	"bufio"
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-io/ferry/internal/faultproxy"
	"github.com/ferry-io/ferry/internal/testenv"
)

// throttle is a TCP proxy to target that moves at most rate bytes per
// second in each direction per connection: it makes an upload or download
// last long enough to be interrupted at a chosen point. When the test ends
// it closes every connection still open: a server that keeps connections
// alive (a standalone VersityGW) never ends its side of one.
func throttle(t *testing.T, target string, rate int) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	open, ended := map[net.Conn]bool{}, false
	track := func(c net.Conn, on bool) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case on && ended:
			c.Close()
		case on:
			open[c] = true
		default:
			delete(open, c)
		}
	}
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		ended = true
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			track(c, true)
			go func() {
				defer wg.Done()
				defer func() { track(c, false); c.Close() }()
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				track(u, true)
				defer func() { track(u, false); u.Close() }()
				done := make(chan struct{}, 2)
				pipe := func(dst, src net.Conn) {
					slowCopy(dst, src, rate)
					if tc, ok := dst.(*net.TCPConn); ok {
						tc.CloseWrite()
					}
					done <- struct{}{}
				}
				go pipe(u, c)
				go pipe(c, u)
				<-done
				<-done
			}()
		}
	}()
	return l.Addr().String()
}

func slowCopy(dst io.Writer, src io.Reader, rate int) {
	const tick = 20 * time.Millisecond
	chunk := max(rate/int(time.Second/tick), 512)
	buf := make([]byte, chunk)
	for {
		start := time.Now()
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
		time.Sleep(tick - time.Since(start))
	}
}

// cli runs a ferry client command against f as the user with token.
func cli(t *testing.T, f *Ferry, server, token string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(ferryBinary(t), args...)
	cmd.Env = append(cleanEnv(), "FERRY_URL="+server, "FERRY_TOKEN="+token)
	cmd.Dir = t.TempDir()
	return cmd
}

// jsonLines parses --json output, failing on any line that is not JSON.
func jsonLines(t *testing.T, out []byte) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("--json printed a non-JSON line %q", l)
		}
		recs = append(recs, m)
	}
	return recs
}

func last(recs []map[string]any, event string) map[string]any {
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i]["event"] == event {
			return recs[i]
		}
	}
	return nil
}

// `ferry upload` killed with SIGKILL half-way resumes when the same command
// runs again: it sends exactly the parts S3 does not hold with the right
// bytes, and the file verifies.
func TestCLIUploadKilledThenResumed(t *testing.T) {
	f := Start(t, throttledS3(t, 16<<20, map[string]string{"FERRY_PART_SIZE": "5MiB"})) // 16 MiB/s per connection
	_, tok := f.CreateUser("carol", false)
	dir := t.TempDir()
	path, sum := writeRandomFile(t, dir, "dataset.bin", 60<<20+321) // 13 parts
	data, _ := os.ReadFile(path)

	first := cli(t, f, f.URL, tok, "upload", "--json", "--concurrency", "2", path)
	stdout, _ := first.StdoutPipe()
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	killed := false
	var id string
	for sc.Scan() {
		var m map[string]any
		json.Unmarshal(sc.Bytes(), &m)
		if m["phase"] == "upload" && m["done"].(float64) >= 20<<20 {
			id, _ = m["upload_id"].(string)
			first.Process.Signal(syscall.SIGKILL)
			killed = true
			break
		}
	}
	first.Wait()
	if !killed {
		t.Fatal("the upload finished before it could be killed")
	}
	if id == "" {
		t.Fatal("the --json progress lines name no upload_id")
	}

	// What S3 holds now, as ferry reports it; a part counts as held only
	// with its full size and the MD5 of the local bytes.
	var st struct {
		UploadID  string `json:"upload_id"`
		PartSize  int64  `json:"part_size"`
		PartCount int    `json:"part_count"`
		Parts     []partJSON
	}
	// Bytes the dead client left in socket buffers may still reach S3
	// through the proxy: wait until S3's part list stops changing.
	var prev string
	for deadline := time.Now().Add(20 * time.Second); ; {
		r := f.Do("GET", "/uploads/"+id, tok, nil)
		want(t, r, 200, "")
		r.JSON(t, &st)
		parts, _ := json.Marshal(st.Parts)
		if string(parts) == prev || time.Now().After(deadline) {
			break
		}
		prev = string(parts)
		time.Sleep(time.Second)
	}
	held := 0
	for _, p := range st.Parts {
		off := int64(p.PartNumber-1) * st.PartSize
		end := min(off+st.PartSize, int64(len(data)))
		h := md5.Sum(data[off:end])
		if p.Size == end-off && normETag(p.ETag) == hex.EncodeToString(h[:]) {
			held++
		}
	}
	if held == 0 || held == st.PartCount {
		t.Fatalf("after the kill S3 holds %d of %d parts; the test needs a partial upload", held, st.PartCount)
	}

	second := cli(t, f, f.URL, tok, "upload", "--json", path)
	out, err := second.Output()
	if err != nil {
		t.Fatalf("rerun: %v\n%s", err, out)
	}
	done := last(jsonLines(t, out), "done")
	// The rerun finds the upload without hashing the file (by its size,
	// part size and first part), so it is the same upload.
	if done == nil || done["resumed"] != true || done["upload_id"] != id {
		t.Fatalf("rerun result: %v, want upload %s resumed", done, id)
	}
	sent, skipped := int(done["parts_sent"].(float64)), int(done["parts_skipped"].(float64))
	t.Logf("killed after %d of %d parts were in S3; the rerun sent %d and skipped %d", held, st.PartCount, sent, skipped)
	if sent != st.PartCount-held || skipped != held {
		t.Fatalf("rerun sent %d and skipped %d parts; want %d and %d", sent, skipped, st.PartCount-held, held)
	}
	if v := f.waitVerified(tok, id); v.SHA256 != sum {
		t.Fatalf("file sha256 %s, want %s", v.SHA256, sum)
	}
}

// throttledS3 returns Options for a ferry whose presigned URLs lead through
// a throttle to its S3: the embedded server on a chosen port, or the
// tests' external S3 when FERRY_TEST_S3_ENDPOINT names one. env is added
// to (and returned in) the Options.
func throttledS3(t *testing.T, rate int, env map[string]string) Options {
	t.Helper()
	o, target := s3Target(t, env)
	env["FERRY_S3_PUBLIC_ENDPOINT"] = "http://" + throttle(t, target, rate)
	return o
}

// proxiedS3 is throttledS3 with a fault proxy in the way instead.
func proxiedS3(t *testing.T, env map[string]string) (Options, *faultproxy.Proxy) {
	t.Helper()
	o, target := s3Target(t, env)
	p := testenv.FaultProxy(t, target)
	env["FERRY_S3_PUBLIC_ENDPOINT"] = "http://" + p.Addr()
	return o, p
}

// s3Target returns Options with env for a ferry on the embedded S3 server
// at a chosen address, or on the tests' external S3 when
// FERRY_TEST_S3_ENDPOINT names one, and that server's host:port.
func s3Target(t *testing.T, env map[string]string) (Options, string) {
	t.Helper()
	o := Options{Env: env}
	target := testenvFree(t)
	if os.Getenv("FERRY_TEST_S3_ENDPOINT") != "" {
		srv := testenv.S3(t)
		u, err := url.Parse(srv.Endpoint)
		if err != nil {
			t.Fatal(err)
		}
		o.S3, target = &srv, u.Host
	} else {
		env["FERRY_S3_EMBEDDED_ADDR"] = target
	}
	return o, target
}

func testenvFree(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// `ferry download` interrupted with Ctrl-C exits 130 and leaves a partial
// file; the same command resumes it with a range request and checks the
// whole file against the CRC32C ferry computed with its SHA-256.
func TestCLIDownloadInterruptedThenResumed(t *testing.T) {
	f := Start(t, Options{})
	_, tok := f.CreateUser("dave", false)
	dir := t.TempDir()
	path, sum := writeRandomFile(t, dir, "report.bin", 24<<20+5)
	up := cli(t, f, f.URL, tok, "upload", "--json", path)
	out, err := up.Output()
	if err != nil {
		t.Fatalf("upload: %v %s", err, out)
	}
	rec := last(jsonLines(t, out), "done")
	fileID := rec["file_id"].(string)
	// Until ferry has hashed the file its downloads carry S3's ETag, and
	// after that the SHA-256: a download cut before and resumed after would
	// rightly start over. Wait, so both halves see the same validator.
	f.waitVerified(tok, rec["upload_id"].(string))
	var file struct {
		DownloadURL string `json:"download_url"`
	}
	f.Do("GET", "/files/"+fileID, tok, nil).JSON(t, &file)

	slow := "http://" + throttle(t, strings.TrimPrefix(f.URL, "http://"), 8<<20)
	target := filepath.Join(dir, "copy.bin")
	first := cli(t, f, slow, tok, "download", file.DownloadURL, "-o", target)
	var firstOut bytes.Buffer
	first.Stdout = &firstOut
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if st, err := os.Stat(target + ".part"); err == nil && st.Size() > 6<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no partial download appeared")
		}
		time.Sleep(20 * time.Millisecond)
	}
	first.Process.Signal(os.Interrupt)
	err = first.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
		t.Fatalf("interrupted download: %v, want exit 130", err)
	}
	partial, _ := os.Stat(target + ".part")

	second := cli(t, f, slow, tok, "download", "--json", file.DownloadURL, "-o", target)
	out, err = second.Output()
	if err != nil {
		t.Fatalf("resume: %v\n%s", err, out)
	}
	done := last(jsonLines(t, out), "done")
	if done == nil || done["sha256"] != sum || done["checked_by"] != "crc32c" || done["resumed_from"].(float64) <= 0 {
		t.Fatalf("resume result %v", done)
	}
	t.Logf("interrupted at %d bytes; resumed from %v", partial.Size(), done["resumed_from"])
	got, _ := os.ReadFile(target)
	want, _ := os.ReadFile(path)
	if !bytes.Equal(got, want) {
		t.Fatal("the resumed download differs from the file")
	}
}

// Running the same export command twice makes one export job.
func TestCLIExportTwiceIsOneJob(t *testing.T) {
	f := Start(t, Options{})
	_, tok := f.CreateUser("erin", false)
	var conv struct{ ID string }
	f.Do("POST", "/conversations", tok, map[string]any{"title": "t"}).JSON(t, &conv)
	for i := range 5 {
		f.Do("POST", "/conversations/"+conv.ID+"/messages", tok, map[string]any{"body": fmt.Sprint("m", i)})
	}
	out := filepath.Join(t.TempDir(), "mine.jsonl.gz")
	var jobs []string
	for range 2 {
		cmd := cli(t, f, f.URL, tok, "export", "--json", "--scope", "all", "-o", out)
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("export: %v\n%s\n%s", err, b, stderrOf(err))
		}
		jobs = append(jobs, last(jsonLines(t, b), "done")["job_id"].(string))
	}
	if jobs[0] != jobs[1] {
		t.Fatalf("two runs made two jobs: %v", jobs)
	}
	var list struct {
		Exports []json.RawMessage `json:"exports"`
	}
	f.Do("GET", "/exports", tok, nil).JSON(t, &list)
	if len(list.Exports) != 1 {
		t.Fatalf("%d exports exist, want 1", len(list.Exports))
	}
}

// On a terminal `ferry upload` draws a live progress bar; piped, it prints
// plain lines; with --json every line is JSON. The terminal session is
// recorded under e2e/artifacts.
func TestCLIProgressOutput(t *testing.T) {
	if _, err := exec.LookPath("script"); err != nil {
		t.Skip("script(1) is needed to give the command a terminal")
	}
	f := Start(t, throttledS3(t, 16<<20, map[string]string{}))
	_, tok := f.CreateUser("frank", false)
	dir := t.TempDir()

	// A terminal: script(1) runs the command on a pseudo-terminal.
	path, _ := writeRandomFile(t, dir, "tty.bin", 24<<20)
	cmdline := fmt.Sprintf("%s upload --concurrency 1 %s", ferryBinary(t), path)
	tty := exec.Command("script", "-qfec", cmdline, "/dev/null")
	tty.Env = append(cleanEnv(), "FERRY_URL="+f.URL, "FERRY_TOKEN="+tok, "COLUMNS=100", "TERM=xterm")
	rec, err := tty.CombinedOutput()
	if err != nil {
		t.Fatalf("tty upload: %v\n%s", err, rec)
	}
	os.MkdirAll("artifacts", 0o755)
	os.WriteFile(filepath.Join("artifacts", "cli-upload-tty.txt"), rec, 0o644)
	frames := strings.Count(string(rec), "\r")
	if frames < 5 || !strings.Contains(string(rec), "%") || !strings.Contains(string(rec), "upload") || !strings.Contains(string(rec), "MB/s") && !strings.Contains(string(rec), "/s") {
		t.Fatalf("no live progress bar on the terminal (%d redraws):\n%q", frames, rec)
	}
	t.Logf("terminal recording: %d redraws, last line %q", frames, lastLine(string(rec)))

	// A pipe: plain lines, no carriage returns.
	path2, _ := writeRandomFile(t, dir, "pipe.bin", 12<<20)
	out, err := cli(t, f, f.URL, tok, "upload", path2).Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "\r") || !strings.Contains(string(out), "pipe.bin: upload") || !strings.Contains(string(out), "uploaded as fil_") {
		t.Fatalf("piped output is not line-based:\n%s", out)
	}
	// --json: every line parses and the last says done.
	path3, _ := writeRandomFile(t, dir, "json.bin", 6<<20)
	out, err = cli(t, f, f.URL, tok, "upload", "--json", path3).Output()
	if err != nil {
		t.Fatal(err)
	}
	recs := jsonLines(t, out)
	if recs[len(recs)-1]["event"] != "done" || last(recs, "progress") == nil {
		t.Fatalf("--json output: %s", out)
	}

	// Exit codes scripts rely on.
	for _, c := range []struct {
		args []string
		tok  string
		code int
	}{
		{[]string{"upload", path3}, "fry_wrong", 3},
		{[]string{"upload", filepath.Join(dir, "missing.bin")}, tok, 1},
		{[]string{"upload"}, tok, 2},
		{[]string{"download", f.URL + "/download/fil_nothing?u=x&exp=1&kid=k&sig=s", "-o", filepath.Join(dir, "x")}, tok, 3},
	} {
		err := cli(t, f, f.URL, c.tok, c.args...).Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != c.code {
			t.Errorf("ferry %v: exit %d, want %d", c.args, code, c.code)
		}
	}
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\r\n")
	if i := strings.LastIndexAny(s, "\r\n"); i >= 0 {
		return s[i+1:]
	}
	return s
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// `ferry upload --no-instant` hashes nothing on the client: content ferry
// holds already is sent again in full instead of being recognised, the
// complete declares no SHA-256, and the file's SHA-256 is the one ferry
// computes from the stored bytes.
func TestCLIUploadNoInstant(t *testing.T) {
	f := Start(t, Options{})
	_, tok := f.CreateUser("dora", false)
	dir := t.TempDir()
	path, sum := writeRandomFile(t, dir, "footage.bin", 16<<20+7) // 3 parts of 8 MiB
	done := func(out []byte, err error) map[string]any {
		t.Helper()
		if err != nil {
			t.Fatalf("ferry upload: %v\n%s", err, out)
		}
		return last(jsonLines(t, out), "done")
	}
	first := done(cli(t, f, f.URL, tok, "upload", "--json", path).Output())
	f.waitVerified(tok, first["upload_id"].(string))

	// With the hash, the same bytes are an instant upload; without it they
	// are a plain transfer of every part.
	again := done(cli(t, f, f.URL, tok, "upload", "--json", "--no-instant", path).Output())
	if again["instant"] != false || again["parts_sent"] != float64(3) || again["sha256"] != "" {
		t.Fatalf("--no-instant upload of held content: %v, want 3 parts sent and no client sha256", again)
	}
	var st uploadJSON
	f.Do("GET", "/uploads/"+again["upload_id"].(string), tok, nil).JSON(t, &st)
	if st.SHA256Verified == nil || !*st.SHA256Verified {
		st = f.waitVerified(tok, again["upload_id"].(string))
	}
	if st.SHA256 != sum {
		t.Fatalf("the file's sha256 is %q, want ferry's own %s", st.SHA256, sum)
	}
	out, err := cli(t, f, f.URL, tok, "upload", "--no-instant", path).Output()
	if err != nil || !strings.Contains(string(out), "sha256 computed by ferry") {
		t.Fatalf("plain output of --no-instant: %v\n%s", err, out)
	}
}
