package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-io/ferry/client"
	"github.com/ferry-io/ferry/internal/testenv"
)

// With no configuration at all, ferry starts on SQLite and the embedded
// S3 server, prints the admin token once, and is ready.
func TestZeroConfigServe(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:8080", "127.0.0.1:9310"} {
		if l, err := net.Listen("tcp", addr); err != nil {
			t.Fatalf("the zero-config test needs the default address %s free: %v", addr, err)
		} else {
			l.Close()
		}
	}
	f := Start(t, Options{ZeroConfig: true})
	if f.Token == "" {
		t.Fatalf("no admin token printed; stdout:\n%s", f.Stdout())
	}
	r := f.Do("GET", "/readyz", "", nil)
	if r.Status != 200 || !strings.Contains(string(r.Body), `"bucket":"ok"`) || !strings.Contains(string(r.Body), `"database":"ok"`) {
		t.Fatalf("readyz = %d %s", r.Status, r.Body)
	}
	me := f.Do("GET", "/me", f.Token, nil)
	if me.Status != 200 || !strings.Contains(string(me.Body), `"admin":true`) {
		t.Fatalf("/me with the printed token = %d %s", me.Status, me.Body)
	}
	// The token is shown once: a restart on the same data prints none.
	f.Signal(syscall.SIGTERM)
	if code := f.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit code after SIGTERM = %d; stderr:\n%s", code, f.Stderr())
	}
	g := Start(t, Options{ZeroConfig: true, Dir: f.Dir})
	if strings.Contains(g.Stdout(), "fry_") {
		t.Fatalf("second start printed a token again:\n%s", g.Stdout())
	}
	if r := g.Do("GET", "/me", f.Token, nil); r.Status != 200 {
		t.Fatalf("the first token no longer works after restart: %d", r.Status)
	}
}

func TestUsersAuthAndProblems(t *testing.T) {
	forEachDriver(t, func(t *testing.T, mysql bool) {
		f := Start(t, Options{MySQL: mysql})
		if mysql {
			// No bootstrap admin on MySQL: create one with the CLI.
			f.Token = cliCreateAdmin(t, f)
		}
		id, tok := f.CreateUser("alice", false)

		if r := f.Do("GET", "/me", "", nil); r.Status != 401 {
			t.Errorf("no token: %d, want 401", r.Status)
		}
		if r := f.Do("GET", "/me", "fry_not-a-real-token", nil); r.Status != 401 {
			t.Errorf("bad token: %d, want 401", r.Status)
		}
		if r := f.Do("GET", "/me", tok, nil); r.Status != 200 {
			t.Fatalf("alice /me: %d %s", r.Status, r.Body)
		}
		if r := f.Do("POST", "/admin/users", tok, map[string]any{"name": "mallory"}); r.Status != 403 {
			t.Errorf("non-admin creating users: %d, want 403", r.Status)
		}
		if r := f.Do("POST", "/admin/users/"+id+"/deactivate", f.Token, nil); r.Status != 200 {
			t.Fatalf("deactivate: %d %s", r.Status, r.Body)
		}
		if r := f.Do("GET", "/me", tok, nil); r.Status != 401 {
			t.Errorf("deactivated user: %d, want 401", r.Status)
		}
		if r := f.Do("POST", "/admin/users/"+id+"/activate", f.Token, nil); r.Status != 200 {
			t.Fatalf("activate: %d", r.Status)
		}
		if r := f.Do("GET", "/me", tok, nil); r.Status != 200 {
			t.Errorf("reactivated user: %d, want 200", r.Status)
		}

		for _, c := range []struct {
			name, method, path string
			body               any
			status             int
			code               string
		}{
			{"malformed json", "POST", "/admin/users", `{"name":`, 400, "invalid_json"},
			{"unknown field", "POST", "/admin/users", `{"name":"x","nmae":"y"}`, 400, "invalid_json"},
			{"bad name", "POST", "/admin/users", map[string]any{"name": "a/b"}, 400, "invalid_name"},
			{"duplicate", "POST", "/admin/users", map[string]any{"name": "alice"}, 409, "name_taken"},
			{"oversize body", "POST", "/admin/users", `{"name":"` + strings.Repeat("x", 2<<20) + `"}`, 413, "body_too_large"},
			{"no route", "GET", "/no/such/route", nil, 404, "route_not_found"},
			{"unknown user", "POST", "/admin/users/usr_nope/deactivate", nil, 404, "user_not_found"},
			{"wrong method", "DELETE", "/me", nil, 405, "method_not_allowed"},
		} {
			t.Run(c.name, func(t *testing.T) {
				r := f.Do(c.method, c.path, f.Token, c.body)
				if r.Status != c.status {
					t.Fatalf("status %d, want %d (%s)", r.Status, c.status, r.Body)
				}
				if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
					t.Fatalf("Content-Type %q, want application/problem+json", ct)
				}
				var p map[string]any
				if err := json.Unmarshal(r.Body, &p); err != nil {
					t.Fatal(err)
				}
				if p["status"] != float64(c.status) || p["code"] != c.code || p["title"] == "" || p["type"] == nil {
					t.Fatalf("problem = %v, want status %d code %s", p, c.status, c.code)
				}
			})
		}
	})
}

func cliCreateAdmin(t *testing.T, f *Ferry) string {
	t.Helper()
	cmd := exec.Command(ferryBinary(t), "user", "create", "root", "--admin")
	cmd.Dir = f.Dir
	cmd.Env = append(cleanEnv(), f.Env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ferry user create: %v\n%s", err, out)
	}
	i := strings.Index(string(out), "fry_")
	if i < 0 {
		t.Fatalf("no token in %s", out)
	}
	return strings.Fields(string(out)[i:])[0]
}

// A request in flight when SIGTERM arrives still completes; new
// connections are refused; the process exits 0.
func TestGracefulShutdownCompletesInflightRequest(t *testing.T) {
	f := Start(t, Options{})
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", f.URL+"/admin/users", pr)
	req.Header.Set("Authorization", "Bearer "+f.Token)
	req.Header.Set("Content-Type", "application/json")
	type result struct {
		status int
		err    error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		resp.Body.Close()
		done <- result{status: resp.StatusCode}
	}()
	// Trickle the body: the request is in flight, in the handler, when the
	// signal arrives.
	fmt.Fprint(pw, `{"name":`)
	time.Sleep(500 * time.Millisecond)
	f.Signal(syscall.SIGTERM)
	time.Sleep(1500 * time.Millisecond)
	// Ferry stopped accepting while it drains.
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(f.URL, "http://"), 500*time.Millisecond); err == nil {
		c.Close()
		t.Errorf("new connections still accepted during shutdown")
	}
	fmt.Fprint(pw, `"late-bob"}`)
	pw.Close()
	select {
	case r := <-done:
		if r.err != nil || r.status != 201 {
			t.Fatalf("in-flight request: status %d err %v; want 201", r.status, r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("in-flight request never completed")
	}
	if code := f.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", code, f.Stderr())
	}
	if len(f.LogLines("ferry stopped")) != 1 {
		t.Fatalf("no clean stop logged:\n%s", f.Stderr())
	}
}

// Issue 11, item 11: with FERRY_METRICS_ADDR set, /metrics is served on
// that address and no longer on the main one.
func TestMetricsOnTheirOwnAddress(t *testing.T) {
	addr := testenv.FreeAddr(t)
	f := Start(t, Options{Env: map[string]string{"FERRY_METRICS_ADDR": addr}})
	f.Do("GET", "/healthz", "", nil)
	if r := f.Do("GET", "/metrics", "", nil); r.Status != 404 || !strings.Contains(string(r.Body), "route_not_found") {
		t.Fatalf("main listener /metrics = %d %s, want 404", r.Status, r.Body)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(b), `ferry_http_requests_total{method="GET",route="/healthz",status="200"}`) ||
		!strings.Contains(string(b), "go_goroutines") {
		t.Fatalf("metrics listener /metrics = %d:\n%.2000s", resp.StatusCode, b)
	}
	other, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	other.Body.Close()
	if other.StatusCode != 404 {
		t.Fatalf("metrics listener /healthz = %d; it serves /metrics only", other.StatusCode)
	}
	if code := getStatus(t, "http://"+addr+"/debug/pprof/"); code != 404 {
		t.Fatalf("metrics listener /debug/pprof/ = %d without FERRY_PPROF, want 404", code)
	}
	f.Signal(syscall.SIGTERM)
	if code := f.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM; stderr:\n%s", code, f.Stderr())
	}
}

// FERRY_PPROF serves Go's profiles on the metrics listener, and only
// there: a 1 s CPU profile is a gzipped protobuf; the public listener
// answers 404.
func TestPProfOnTheMetricsAddress(t *testing.T) {
	addr := testenv.FreeAddr(t)
	f := Start(t, Options{Env: map[string]string{"FERRY_METRICS_ADDR": addr, "FERRY_PPROF": "true"}})
	if code := getStatus(t, "http://"+addr+"/debug/pprof/"); code != 200 {
		t.Fatalf("metrics listener /debug/pprof/ = %d, want 200", code)
	}
	resp, err := http.Get("http://" + addr + "/debug/pprof/profile?seconds=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	head := make([]byte, 2)
	if _, err := io.ReadFull(resp.Body, head); err != nil || resp.StatusCode != 200 || head[0] != 0x1f || head[1] != 0x8b {
		t.Fatalf("CPU profile: %d, starts % x (%v); want gzip", resp.StatusCode, head, err)
	}
	if code := getStatus(t, f.URL+"/debug/pprof/"); code != 404 {
		t.Fatalf("public listener /debug/pprof/ = %d, want 404", code)
	}
}

// A CPU profile of a working replica splits its time by route and by job
// kind (profile labels), as docs/operating.md tells an operator to read
// it: `go tool pprof -tags` sums the samples by label, and the verify
// job's read-back and the download proxy's copy each show under their own
// label rather than pooled under net/http and the job runner.
func TestProfileLabelsRoutesAndJobs(t *testing.T) {
	t.Parallel()
	addr := testenv.FreeAddr(t)
	f := Start(t, Options{Env: map[string]string{"FERRY_METRICS_ADDR": addr, "FERRY_PPROF": "true"}})
	_, tok := f.CreateUser("olga", false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	dir := t.TempDir()
	prof := filepath.Join(dir, "cpu.pb.gz")
	profiled := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/debug/pprof/profile?seconds=12")
		if err != nil {
			profiled <- err
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != 200 {
			err = fmt.Errorf("profile: %d %s", resp.StatusCode, b)
		}
		if err == nil {
			err = os.WriteFile(prof, b, 0o600)
		}
		profiled <- err
	}()
	time.Sleep(200 * time.Millisecond) // the profile has started

	// 64 MiB: the verify job's SHA-256 and each download's copy take tens
	// of milliseconds of CPU, several samples at 100 Hz. The downloads go
	// on until the profile ends (at most 20), so however slow the machine
	// some of them fall inside it.
	d := randomData(64 << 20)
	up, err := f.Client(tok).Upload(ctx, bytes.NewReader(d), int64(len(d)), client.UploadOptions{Name: "profiled.bin"})
	if err != nil {
		t.Fatal(err)
	}
	f.waitVerified(tok, up.UploadID)
	var file struct {
		DownloadURL string `json:"download_url"`
	}
	f.Do("GET", "/files/"+up.FileID, tok, nil).JSON(t, &file)
	copyPath := filepath.Join(dir, "copy.bin")
	var perr error
	downloads := 0
downloading:
	for ; downloads < 20; downloads++ {
		select {
		case perr = <-profiled:
			break downloading
		default:
		}
		os.Remove(copyPath)
		if _, err := f.Client(tok).Download(ctx, file.DownloadURL, copyPath, client.DownloadOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if downloads == 20 {
		perr = <-profiled
	}
	if perr != nil {
		t.Fatal(perr)
	}
	t.Logf("%d downloads during the profile", downloads)
	out, err := exec.Command("go", "tool", "pprof", "-tags", prof).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof -tags: %v\n%s", err, out)
	}
	t.Logf("go tool pprof -tags:\n%s", out)
	// Each label's section starts "key: Total …", then a line per value
	// ending "): value".
	labelled := map[string]bool{}
	key := ""
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if k, rest, ok := strings.Cut(line, ": Total "); ok && rest != "" {
			key = k
		} else if _, v, ok := strings.Cut(line, "): "); ok && key != "" {
			labelled[key+"="+v] = true
		}
	}
	for _, want := range []string{"job=upload.verify", "route=/download/:id", "method=GET"} {
		if !labelled[want] {
			t.Errorf("no samples labelled %s", want)
		}
	}
}

// getStatus GETs url and returns the status code.
func getStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A bad configuration stops ferry before it does anything, with one line
// naming the problem and a non-zero exit code.
func TestBadConfigExits(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		code int
		want string
	}{
		{map[string]string{"FERRY_DB_DRIVER": "postgres"}, 2, "FERRY_DB_DRIVER"},
		{map[string]string{"FERRY_DB_DRIVER": "mysql", "FERRY_DB_DSN": "not a dsn"}, 2, "FERRY_DB_DSN"},
		{map[string]string{"FERRY_LINK_KEYS": "k1:short"}, 2, "FERRY_LINK_KEYS"},
		{map[string]string{"FERRY_TRUSTED_PROXIES": "lb.internal"}, 2, "FERRY_TRUSTED_PROXIES"},
		{map[string]string{"FERRY_METRICS_ADDR": "9090"}, 2, "FERRY_METRICS_ADDR"},
		{map[string]string{"FERRY_JWT_ISSUER": "https://app.example/", "FERRY_JWT_AUDIENCE": "ferry",
			"FERRY_JWT_JWKS_URL": "http://auth.example/jwks"}, 2, "FERRY_JWT_JWKS_URL"},
		{map[string]string{"FERRY_JWT_ISSUER": "https://app.example/", "FERRY_JWT_AUDIENCE": "ferry"}, 2, "FERRY_JWT_KEYS"},
		{map[string]string{"FERRY_S3_ENDPOINT": "http://127.0.0.1:1", "FERRY_S3_ACCESS_KEY": "a", "FERRY_S3_SECRET_KEY": "b"}, 1, "127.0.0.1:1"},
	} {
		t.Run(c.want, func(t *testing.T) {
			f := Start(t, Options{Env: c.env, NoWait: true})
			code := f.Wait(60 * time.Second)
			lines := strings.Split(strings.TrimSpace(f.Stderr()), "\n")
			last := lines[len(lines)-1]
			if code != c.code || !strings.HasPrefix(last, "ferry: ") || !strings.Contains(last, c.want) {
				t.Fatalf("exit %d, last line %q; want exit %d and a line naming %s", code, last, c.code, c.want)
			}
			if strings.Contains(f.Stderr(), "panic") || strings.Contains(f.Stderr(), "goroutine ") {
				t.Fatalf("ferry panicked:\n%s", f.Stderr())
			}
		})
	}
}

// A second signal during the drain exits at once instead of waiting.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	f := Start(t, Options{Env: map[string]string{"FERRY_SHUTDOWN_TIMEOUT": "60s"}})
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest("POST", f.URL+"/admin/users", pr)
	req.Header.Set("Authorization", "Bearer "+f.Token)
	go func() {
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	fmt.Fprint(pw, `{"name":`)
	time.Sleep(500 * time.Millisecond)
	f.Signal(syscall.SIGTERM)
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	f.Signal(syscall.SIGTERM)
	code := f.Wait(10 * time.Second)
	if code == 0 || time.Since(start) > 5*time.Second {
		t.Fatalf("second SIGTERM: exit %d after %s; want a prompt non-zero exit", code, time.Since(start))
	}
}
