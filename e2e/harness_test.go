package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-io/ferry/client"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// TestMain holds the default HTTP transport's exchanges with ferry to the
// API contract (contract_test.go), and removes the binaries goBuild made:
// each test process makes some (ferry's is about 100 MB with the race
// detector), and CI runs this package several times on one disk.
func TestMain(m *testing.M) {
	http.DefaultTransport = &contractTransport{base: plainTransport}
	code := m.Run()
	builtDirs.Range(func(dir, _ any) bool {
		os.RemoveAll(dir.(string))
		return true
	})
	os.Exit(code)
}

// ferryBinary builds cmd/ferry once per test process (with the race
// detector when the tests run with it) and returns its path.
func ferryBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() { binPath, buildErr = goBuild("./cmd/ferry", "ferry") })
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// builtDirs are the directories goBuild made, which TestMain removes.
var builtDirs sync.Map

// goBuild builds the package pkg of this module into a temporary
// directory as name, with the race detector when the tests run with it.
func goBuild(pkg, name string) (string, error) {
	dir, err := os.MkdirTemp("", "ferry-e2e-bin-")
	if err != nil {
		return "", err
	}
	builtDirs.Store(dir, true)
	bin := filepath.Join(dir, name)
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, pkg)...)
	_, file, _, _ := runtime.Caller(0)
	cmd.Dir = filepath.Dir(filepath.Dir(file))
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin, nil
}

// Ferry is a running ferry process.
type Ferry struct {
	t     testing.TB
	URL   string
	Dir   string   // working directory (the data dir lives under it unless set)
	Env   []string // FERRY_* settings it was started with
	Token string   // the bootstrap admin token, when ferry printed one
	// S3 is the external S3 server ferry was started on, and Bucket its
	// bucket there; S3 is nil when ferry runs its embedded server.
	S3     *testenv.S3Server
	Bucket string
	// HTTP is the client Do sends with: every exchange with this ferry is
	// validated against server/openapi.yaml (contract_test.go), and a
	// mismatch is the request's error.
	HTTP    *http.Client
	cmd     *exec.Cmd
	mu      sync.Mutex
	stdout  bytes.Buffer
	stderr  bytes.Buffer
	exited  chan struct{}
	exitErr error
}

// Options configure a ferry process. Zero values give the embedded default
// on free ports.
type Options struct {
	// Env adds FERRY_* settings. FERRY_ADDR and FERRY_S3_EMBEDDED_ADDR
	// default to free ports unless ZeroConfig is set.
	Env map[string]string
	// ZeroConfig starts ferry with no FERRY_* variables at all.
	ZeroConfig bool
	// Dir is the working directory; default a new temp dir.
	Dir string
	// MySQL runs ferry on a fresh MariaDB/MySQL database.
	MySQL bool
	// NoWait returns without waiting for /readyz (for start-up failures).
	NoWait bool
	// S3 runs ferry on this external S3 server, on a fresh bucket, instead
	// of its embedded one (a fault proxy's endpoint, for instance). Left
	// nil, ferry uses the tests' external S3 when FERRY_TEST_S3_ENDPOINT
	// names one (see testenv), and its embedded server otherwise. Env
	// settings of FERRY_S3_ENDPOINT or FERRY_S3_EMBEDDED_ADDR, and
	// ZeroConfig, keep the test's own choice.
	S3 *testenv.S3Server
}

// externalS3 is the S3 server a test's ferry should use instead of its
// embedded one, or nil.
func externalS3(t testing.TB, o Options) *testenv.S3Server {
	if o.S3 != nil {
		return o.S3
	}
	if o.ZeroConfig || os.Getenv("FERRY_TEST_S3_ENDPOINT") == "" {
		return nil
	}
	for _, k := range []string{"FERRY_S3_ENDPOINT", "FERRY_S3_EMBEDDED_ADDR"} {
		if _, ok := o.Env[k]; ok {
			return nil
		}
	}
	srv := testenv.S3(t)
	return &srv
}

// Start launches ferry serve and waits until /readyz answers 200.
func Start(t testing.TB, o Options) *Ferry {
	t.Helper()
	bin := ferryBinary(t)
	dir := o.Dir
	if dir == "" {
		dir = t.TempDir()
	}
	env := map[string]string{}
	if !o.ZeroConfig {
		env["FERRY_ADDR"] = testenv.FreeAddr(t)
		env["FERRY_S3_EMBEDDED_ADDR"] = testenv.FreeAddr(t)
		env["FERRY_LOG_LEVEL"] = "debug"
	}
	if o.MySQL {
		env["FERRY_DB_DRIVER"] = models.MySQL
		env["FERRY_DB_DSN"] = testenv.MySQLDatabase(t)
	}
	f := &Ferry{t: t, Dir: dir, exited: make(chan struct{}), Bucket: "ferry"}
	if srv := externalS3(t, o); srv != nil {
		// Each ferry gets its own bucket, created at start-up and kept
		// across Restart (which reuses the environment).
		f.S3, f.Bucket = srv, "e2e-"+testenv.RandomHex(6)
		delete(env, "FERRY_S3_EMBEDDED_ADDR")
		env["FERRY_S3_ENDPOINT"] = srv.Endpoint
		env["FERRY_S3_ACCESS_KEY"] = srv.AccessKey
		env["FERRY_S3_SECRET_KEY"] = srv.SecretKey
		env["FERRY_S3_BUCKET"] = f.Bucket
	}
	for k, v := range o.Env {
		env[k] = v
	}
	if b, ok := env["FERRY_S3_BUCKET"]; ok {
		f.Bucket = b
	}
	for k, v := range env {
		f.Env = append(f.Env, k+"="+v)
	}
	addr := env["FERRY_ADDR"]
	if addr == "" {
		addr = ":8080"
	}
	if strings.HasPrefix(addr, ":") {
		addr = "127.0.0.1" + addr
	}
	f.URL = "http://" + addr
	f.HTTP = newContractClient(f.URL)
	watchContract(t, f.URL)
	f.start(bin)
	t.Cleanup(f.Kill)
	if !o.NoWait {
		f.WaitReady(60 * time.Second)
	}
	return f
}

func (f *Ferry) start(bin string) {
	f.t.Helper()
	cmd := exec.Command(bin, "serve")
	cmd.Dir = f.Dir
	cmd.Env = append(cleanEnv(), f.Env...)
	cmd.Stdout = &lockedWriter{mu: &f.mu, w: &f.stdout}
	cmd.Stderr = &lockedWriter{mu: &f.mu, w: &f.stderr}
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	f.cmd = cmd
	f.exited = make(chan struct{})
	go func() {
		f.exitErr = cmd.Wait()
		close(f.exited)
	}()
}

// cleanEnv is the test's environment without any FERRY_* variable, so a
// developer's shell settings cannot leak into a zero-config run.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FERRY_") {
			out = append(out, kv)
		}
	}
	return out
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

var tokenLine = regexp.MustCompile(`admin token \(shown once, keep it\): (fry_[A-Za-z0-9_-]+)`)

// WaitReady waits for /readyz to answer 200 and picks up the admin token.
func (f *Ferry) WaitReady(within time.Duration) {
	f.t.Helper()
	deadline := time.Now().Add(within)
	for {
		select {
		case <-f.exited:
			f.t.Fatalf("ferry exited during start-up: %v\nstdout:\n%s\nstderr:\n%s", f.exitErr, f.Stdout(), f.Stderr())
		default:
		}
		resp, err := http.Get(f.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("ferry not ready within %s: %v\nstderr:\n%s", within, err, f.Stderr())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if m := tokenLine.FindStringSubmatch(f.Stdout()); m != nil && f.Token == "" {
		f.Token = m[1]
	}
}

// Stdout and Stderr return what the process printed so far.
func (f *Ferry) Stdout() string { f.mu.Lock(); defer f.mu.Unlock(); return f.stdout.String() }
func (f *Ferry) Stderr() string { f.mu.Lock(); defer f.mu.Unlock(); return f.stderr.String() }

// Signal sends sig to the process.
func (f *Ferry) Signal(sig os.Signal) {
	if f.cmd != nil && f.cmd.Process != nil {
		f.cmd.Process.Signal(sig)
	}
}

// Wait waits for the process to exit and returns its exit code.
func (f *Ferry) Wait(within time.Duration) int {
	f.t.Helper()
	select {
	case <-f.exited:
	case <-time.After(within):
		f.t.Fatalf("ferry did not exit within %s", within)
	}
	if f.exitErr == nil {
		return 0
	}
	if ee, ok := f.exitErr.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

// Kill SIGKILLs the process (a crash) and waits for it.
func (f *Ferry) Kill() {
	if f.cmd == nil || f.cmd.Process == nil {
		return
	}
	select {
	case <-f.exited:
		return
	default:
	}
	f.cmd.Process.Signal(syscall.SIGKILL)
	<-f.exited
}

// Restart starts the same configuration again (after Kill or a signal)
// and waits until it is ready.
func (f *Ferry) Restart() {
	f.t.Helper()
	f.Kill()
	f.start(ferryBinary(f.t))
	f.WaitReady(60 * time.Second)
}

// Response is a decoded HTTP answer.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v, failing the test on error.
func (r Response) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %s: %v", r.Body, err)
	}
}

// Do sends a request with an optional bearer token and JSON body.
func (f *Ferry) Do(method, path, token string, body any, header ...string) Response {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := send(ctx, f.HTTP, f.URL, method, path, token, body, header...)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// send is Do with the error returned instead of failing the test, so that
// goroutines other than the test's may use it, with a client of their
// own. body is sent as it is when a string, []byte or io.Reader, and as
// JSON otherwise; header holds name, value pairs. A body cut short while
// it is read is returned as far as it came.
func send(ctx context.Context, hc *http.Client, base, method, path, token string, body any, header ...string) (Response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	case io.Reader:
		rd = b
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return Response{}, err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return Response{}, err
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := hc.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// Client is ferry's Go client for token, its API calls held to the
// contract like Do's (its part uploads go to the bucket and are not).
func (f *Ferry) Client(token string) *client.Client {
	hc := &http.Client{Timeout: 60 * time.Second, Transport: f.HTTP.Transport}
	return client.New(f.URL, token, client.WithHTTPClient(hc))
}

// CreateUser makes a user through the admin API and returns its id and
// token.
func (f *Ferry) CreateUser(name string, admin bool) (id, token string) {
	f.t.Helper()
	r := f.Do("POST", "/admin/users", f.Token, map[string]any{"name": name, "admin": admin})
	if r.Status != 201 {
		f.t.Fatalf("create user %s: %d %s", name, r.Status, r.Body)
	}
	var u struct{ ID, Token string }
	r.JSON(f.t, &u)
	return u.ID, u.Token
}

// LogLines returns the JSON log records whose msg equals msg.
func (f *Ferry) LogLines(msg string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(f.Stderr()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// forEachDriver runs fn on the embedded default (SQLite) and on MySQL.
func forEachDriver(t *testing.T, fn func(t *testing.T, mysql bool)) {
	t.Run("sqlite", func(t *testing.T) { fn(t, false) })
	t.Run("mysql", func(t *testing.T) {
		testenv.MySQLServerDSN(t) // skips (or fails in CI) without MySQL
		fn(t, true)
	})
}
