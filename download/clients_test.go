package download_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
)

// needTool skips the test when a command-line client is missing, unless
// FERRY_TEST_REQUIRE_TOOLS=1 (CI, after .ci/tools installed them).
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("FERRY_TEST_REQUIRE_TOOLS") == "1" {
			t.Fatalf("%s is required (FERRY_TEST_REQUIRE_TOOLS=1) but not installed", name)
		}
		t.Skipf("%s not installed", name)
	}
	return p
}

// cutProxy forwards TCP connections to upstream, and cuts the first cuts
// connections after cutAfter bytes of response: a download that dies
// mid-transfer, as on a flaky network.
type cutProxy struct {
	ln       net.Listener
	upstream string
	cutAfter int64
	cuts     atomic.Int32
	cut      atomic.Int32 // connections actually cut
	wg       sync.WaitGroup
}

func newCutProxy(t *testing.T, upstream string, cutAfter int64, cuts int32) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, upstream: upstream, cutAfter: cutAfter}
	p.cuts.Store(cuts)
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.handle(c)
		}()
	}
}

func (p *cutProxy) handle(c net.Conn) {
	defer c.Close()
	up, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	cut := p.cuts.Add(-1) >= 0
	go func() {
		io.Copy(up, c)
		up.Close()
	}()
	if cut {
		io.CopyN(c, up, p.cutAfter)
		p.cut.Add(1)
		return // closing both ends mid-body
	}
	io.Copy(c, up)
}

func (p *cutProxy) url(link string, srvURL string) string {
	return "http://" + p.ln.Addr().String() + strings.TrimPrefix(link, srvURL)
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func run(t *testing.T, dir string, name string, args ...string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	t.Logf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, tail(out, 1500))
	return err
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// TestRealClients downloads through ferry with curl, wget and aria2c, each
// cut off mid-transfer by a proxy that drops the connection, and checks
// that each resumes with a Range request and ends with a byte-identical
// file.
func TestRealClients(t *testing.T) {
	e := newEnv(t, testenv.NewDB(t, models.SQLite))
	alice, _ := e.user("alice")
	const size = 24 << 20
	data := randomData(t, size)
	sum := e.put("exp_clients", alice, data, "export.jsonl.gz")
	upstream := strings.TrimPrefix(e.srv.URL, "http://")

	// resumed reports whether the download log shows a 206 answering an
	// open range that starts inside the file, for user agent ua.
	resumed := func(t *testing.T, ua string) int {
		t.Helper()
		var n int64
		err := e.db.Model(&models.DownloadLog{}).
			Where("resource_id = ? AND status = 206 AND user_agent LIKE ? AND range_header <> ''", "exp_clients", "%"+ua+"%").
			Count(&n).Error
		if err != nil {
			t.Fatal(err)
		}
		return int(n)
	}

	t.Run("curl -C -", func(t *testing.T) {
		curl := needTool(t, "curl")
		dir := t.TempDir()
		p := newCutProxy(t, upstream, size/3, 1)
		u := p.url(e.link(e.svc, e.srv, "exp_clients", alice), e.srv.URL)
		if err := run(t, dir, curl, "-sS", "-f", "-o", "out", u); err == nil {
			t.Fatal("the first transfer was not cut")
		}
		st, err := os.Stat(filepath.Join(dir, "out"))
		if err != nil || st.Size() == 0 || st.Size() >= size {
			t.Fatalf("partial file: %v %v", st, err)
		}
		if err := run(t, dir, curl, "-sS", "-f", "-C", "-", "-o", "out", u); err != nil {
			t.Fatal(err)
		}
		if got := fileSHA256(t, filepath.Join(dir, "out")); got != sum {
			t.Fatalf("sha256 %s, want %s", got, sum)
		}
		if resumed(t, "curl") == 0 {
			t.Fatal("curl did not resume with a Range request")
		}
	})

	t.Run("wget -c", func(t *testing.T) {
		wget := needTool(t, "wget")
		dir := t.TempDir()
		p := newCutProxy(t, upstream, size/2, 1)
		u := p.url(e.link(e.svc, e.srv, "exp_clients", alice), e.srv.URL)
		// wget retries a cut transfer by itself and, with -c, continues
		// from the bytes it has.
		if err := run(t, dir, wget, "-nv", "-c", "--tries=5", "--waitretry=0", "--retry-connrefused", "-O", "out", u); err != nil {
			t.Fatal(err)
		}
		if p.cut.Load() != 1 {
			t.Fatal("the transfer was not cut")
		}
		if got := fileSHA256(t, filepath.Join(dir, "out")); got != sum {
			t.Fatalf("sha256 %s, want %s", got, sum)
		}
		if resumed(t, "Wget") == 0 {
			t.Fatal("wget did not resume with a Range request")
		}
	})

	t.Run("aria2c -x 4 -s 4", func(t *testing.T) {
		aria := needTool(t, "aria2c")
		dir := t.TempDir()
		p := newCutProxy(t, upstream, 3<<20, 1)
		u := p.url(e.link(e.svc, e.srv, "exp_clients", alice), e.srv.URL)
		if err := run(t, dir, aria, "-x", "4", "-s", "4", "-k", "1M", "--min-split-size=1M", "--file-allocation=none",
			"--max-tries=5", "--retry-wait=0", "--allow-overwrite=true", "--auto-file-renaming=false",
			"--console-log-level=warn", "--summary-interval=0", "-d", dir, "-o", "out", u); err != nil {
			t.Fatal(err)
		}
		if p.cut.Load() != 1 {
			t.Fatal("no segment was cut")
		}
		if got := fileSHA256(t, filepath.Join(dir, "out")); got != sum {
			t.Fatalf("sha256 %s, want %s", got, sum)
		}
		if n := resumed(t, "aria2"); n < 4 {
			t.Fatalf("aria2 made %d ranged requests, want at least one per segment (4)", n)
		}
	})
}
