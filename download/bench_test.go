package download_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-io/ferry/download"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/presign"
	"github.com/ferry-io/ferry/s3store"
	"github.com/ferry-io/ferry/server"
	"github.com/ferry-io/ferry/users"
)

// The benchmarks run the proxy in a child process (this test binary, in
// TestBenchChild), so its memory can be measured on its own, against the
// test process's S3 server:
//
//	go test -run='^$' -bench=. -benchtime=3x -timeout=30m ./download
//
// FERRY_BENCH_SIZE sets the object size (default 1GiB).

const benchID = "exp_bench"

type benchObject struct {
	st   *s3store.Store
	srv  testenv.S3Server
	key  string
	size int64
	sum  string
}

var (
	benchOnce sync.Once
	benchObj  benchObject
)

// benchSetup puts one object of FERRY_BENCH_SIZE bytes into a fresh bucket,
// once per process.
func benchSetup(b *testing.B) benchObject {
	benchOnce.Do(func() {
		size := int64(1 << 30)
		if v := os.Getenv("FERRY_BENCH_SIZE"); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			size = n
		}
		srv := testenv.S3(b)
		bucket := "bench-" + testenv.RandomHex(4)
		st := testenv.StoreFor(b, srv, bucket)
		ctx := context.Background()
		h := sha256.New()
		block := randomData(b, 8<<20)
		_, err := st.WriteObject(ctx, "bench/object", "application/gzip", 64<<20, func(w io.Writer) error {
			for left := size; left > 0; {
				n := min(left, int64(len(block)))
				block[0]++ // no two blocks alike
				h.Write(block[:n])
				if _, err := w.Write(block[:n]); err != nil {
					return err
				}
				left -= n
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		benchObj = benchObject{st: st, srv: srv, key: "bench/object", size: size, sum: hex.EncodeToString(h.Sum(nil))}
	})
	return benchObj
}

// benchChild starts the proxy in a child process and returns its download
// link and pid.
func benchChild(b *testing.B, o benchObject) (string, int) {
	cmd := testenv.Child("TestBenchChild", "FERRY_BENCH_CHILD=1",
		"FERRY_BENCH_S3="+o.srv.Endpoint, "FERRY_BENCH_AK="+o.srv.AccessKey, "FERRY_BENCH_SK="+o.srv.SecretKey,
		"FERRY_BENCH_BUCKET="+o.st.Bucket(), "FERRY_BENCH_KEY="+o.key,
		"FERRY_BENCH_OBJ_SIZE="+strconv.FormatInt(o.size, 10), "FERRY_BENCH_SHA="+o.sum)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if link, ok := strings.CutPrefix(sc.Text(), "LINK "); ok {
			go io.Copy(io.Discard, stdout)
			return link, cmd.Process.Pid
		}
	}
	b.Fatalf("child gave no link: %v", sc.Err())
	return "", 0
}

// TestBenchChild is the proxy process of the benchmarks; it does nothing
// in a normal test run.
func TestBenchChild(t *testing.T) {
	if os.Getenv("FERRY_BENCH_CHILD") != "1" {
		t.Skip("the benchmarks' child process")
	}
	ctx := context.Background()
	db := testenv.NewDB(t, models.SQLite)
	st, err := s3store.New(ctx, s3store.Config{Endpoint: os.Getenv("FERRY_BENCH_S3"), Region: "us-east-1",
		Bucket: os.Getenv("FERRY_BENCH_BUCKET"), AccessKey: os.Getenv("FERRY_BENCH_AK"), SecretKey: os.Getenv("FERRY_BENCH_SK"), PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	us := testenv.Must(users.New(users.Config{DB: db.DB, Now: time.Now, SessionTTL: time.Hour}))
	u, _, err := us.Create(ctx, "bench", false)
	if err != nil {
		t.Fatal(err)
	}
	size, _ := strconv.ParseInt(os.Getenv("FERRY_BENCH_OBJ_SIZE"), 10, 64)
	res := download.Resource{Key: os.Getenv("FERRY_BENCH_KEY"), Size: size, SHA256: os.Getenv("FERRY_BENCH_SHA"),
		Name: "bench.gz", ContentType: "application/gzip", ModTime: time.Now()}
	ks, _ := presign.ParseKeys(keyK1)
	signer, _ := presign.NewSigner(ks, time.Now)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	svc, err := download.New(download.Config{
		DB: db.DB, Storage: st, Users: us, Signer: signer, MaxLinkAddrs: 3,
		// A stand-in resolver, as in env_test.go: one resource.
		Resolver: download.ResolverFunc(func(_ context.Context, id, user string) (download.Resource, error) {
			if id != benchID || user != u.ID {
				return download.Resource{}, download.ErrNotFound
			}
			return res, nil
		}),
		Log: log, Registerer: reg, Now: time.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	api, err := server.New(server.Deps{Log: log, Users: us, Downloads: svc, Gatherer: reg, Registerer: reg,
		MaxBodyBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: api.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	links, err := download.NewLinks(download.LinksConfig{Signer: signer, PublicURL: "http://" + ln.Addr().String(), TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("LINK " + links.Link(benchID, u.ID).URL)
	io.Copy(io.Discard, os.Stdin) // until the parent closes stdin
	hs.Close()
}

func drain(r io.Reader, want int64) error {
	n, err := io.Copy(io.Discard, r)
	if err != nil || n != want {
		return fmt.Errorf("read %d of %d bytes: %v", n, want, err)
	}
	return nil
}

func proxyGet(link string, want int64) error {
	resp, err := http.Get(link)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return drain(resp.Body, want)
}

// BenchmarkProxyVsDirect reads the whole object once straight from S3 with
// GetObject and once through the proxy, alternately, and reports both
// rates and their ratio (target ≥ 0.9).
func BenchmarkProxyVsDirect(b *testing.B) {
	o := benchSetup(b)
	link, pid := benchChild(b, o)
	var direct, proxy time.Duration
	cpu0 := procCPU(b, pid)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		body, err := o.st.Get(context.Background(), o.key)
		if err != nil {
			b.Fatal(err)
		}
		if err := drain(body, o.size); err != nil {
			b.Fatal(err)
		}
		body.Close()
		t1 := time.Now()
		if err := proxyGet(link, o.size); err != nil {
			b.Fatal(err)
		}
		direct += t1.Sub(t0)
		proxy += time.Since(t1)
	}
	mb := float64(o.size) * float64(b.N) / (1 << 20)
	b.ReportMetric(mb/direct.Seconds(), "direct_MiB/s")
	b.ReportMetric(mb/proxy.Seconds(), "proxy_MiB/s")
	b.ReportMetric(direct.Seconds()/proxy.Seconds(), "proxy/direct")
	// The proxy's own CPU time per GiB served: unlike the rates, it does
	// not depend on what else the machine is running.
	b.ReportMetric((procCPU(b, pid)-cpu0).Seconds()/(float64(o.size)*float64(b.N)/(1<<30)), "proxy_CPU_s/GiB")
}

// procCPU is the user+system CPU time a process has used.
func procCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the parenthesised command name; utime and stime are
	// the 14th and 15th fields of the whole line, in clock ticks (100/s).
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// BenchmarkConcurrent32 runs 32 whole-object downloads through the proxy at
// once and reports the proxy process's peak RSS (target < 128 MiB) and the
// aggregate rate.
func BenchmarkConcurrent32(b *testing.B) {
	o := benchSetup(b)
	link, pid := benchChild(b, o)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		var wg sync.WaitGroup
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := proxyGet(link, o.size); err != nil {
					b.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	elapsed := time.Since(start)
	b.StopTimer()
	hwm := procStatus(b, pid, "VmHWM")
	b.ReportMetric(float64(hwm)/1024, "peak_RSS_MiB")
	b.ReportMetric(float64(o.size)*32*float64(b.N)/(1<<20)/elapsed.Seconds(), "aggregate_MiB/s")
}

// procStatus reads a kB field of /proc/pid/status.
func procStatus(b *testing.B, pid int, field string) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(v)
			n, _ := strconv.ParseInt(f[0], 10, 64)
			return n
		}
	}
	b.Fatalf("%s not in /proc/%d/status", field, pid)
	return 0
}
