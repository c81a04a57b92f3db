package upload_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/upload"
)

// bigPart is the part size of the large benchmark uploads.
const bigPart = 64 * mib

// prepareBig uploads size bytes of pseudo-random content (generated part
// by part, never whole in memory) and completes the upload. It returns the
// upload id and the content's SHA-256.
func prepareBig(tb testing.TB, e *env, user string, size int64) (string, string) {
	tb.Helper()
	ctx := context.Background()
	c := newClient(tb, e, user)
	res, err := e.svc.Init(ctx, user, upload.InitRequest{FileName: "big.bin", Size: size, PartSize: bigPart})
	if err != nil {
		tb.Fatal(err)
	}
	st := res.Upload
	urls := c.presign(st.UploadID, allParts(st), nil)
	rng := rand.NewChaCha8([32]byte{byte(size), byte(size >> 20)})
	h := sha256.New()
	buf := make([]byte, bigPart)
	for n := 1; n <= st.PartCount; n++ {
		part := buf[:min(int64(bigPart), size-int64(n-1)*bigPart)]
		rng.Read(part)
		h.Write(part)
		if code, msg := c.put(urls[n], bytes.NewReader(part), int64(len(part))); code != 200 {
			tb.Fatalf("PUT part %d: %d %s", n, code, msg)
		}
	}
	if _, err := e.svc.Complete(ctx, user, st.UploadID, upload.CompleteRequest{}); err != nil {
		tb.Fatal(err)
	}
	return st.UploadID, hex.EncodeToString(h.Sum(nil))
}

// BenchmarkMergeVerify1GiB merges and verifies a 1 GiB upload through the
// merge job, then, in the same run and on the same object, compares the
// verification read (GetObject streamed through SHA-256) with a plain
// GetObject read to io.Discard. Run it with -benchtime=1x.
func BenchmarkMergeVerify1GiB(b *testing.B) {
	const size = 1 << 30
	db := testenv.NewDB(b, models.SQLite)
	var completed atomic.Int64
	e := newEnv(b, db, func(c *testConfig) {
		c.Hooks.AfterComplete = func(string) { completed.Store(time.Now().UnixNano()) }
	})
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		id, want := prepareBig(b, e, fmt.Sprint("usr_", i), size)
		b.StartTimer()
		start := time.Now()
		e.run(b, 30*time.Second)
		done := e.waitVerified(fmt.Sprint("usr_", i), id, 10*time.Minute)
		merge := time.Since(start)
		b.StopTimer()
		if done.State != upload.StateSuccess || done.SHA256 != want {
			b.Fatalf("merge: %+v", done)
		}
		complete := time.Unix(0, completed.Load()).Sub(start)
		b.ReportMetric(merge.Seconds(), "merge_s")
		b.ReportMetric(complete.Seconds(), "complete_s")
		b.ReportMetric(float64(size)/(merge-complete).Seconds()/1e6, "job_verify_MB/s")

		// Same object, same run: alternate plain reads and verification
		// reads, and keep each one's best of three.
		key := "uploads/" + id
		var plain, verify time.Duration
		for range 3 {
			t0 := time.Now()
			rc, err := e.store.Get(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.CopyBuffer(io.Discard, rc, make([]byte, 1<<20))
			rc.Close()
			if err != nil || n != size {
				b.Fatalf("plain read: %d %v", n, err)
			}
			plain = best(plain, time.Since(t0))
			t0 = time.Now()
			sum, n, err := e.svc.VerifyObject(ctx, key)
			if err != nil || n != size || sum != want {
				b.Fatalf("verify: %d %v", n, err)
			}
			verify = best(verify, time.Since(t0))
		}
		b.ReportMetric(float64(size)/plain.Seconds()/1e6, "get_MB/s")
		b.ReportMetric(float64(size)/verify.Seconds()/1e6, "verify_MB/s")
		b.ReportMetric(plain.Seconds()/verify.Seconds(), "verify/get")
		b.StartTimer()
	}
}

func best(cur, d time.Duration) time.Duration {
	if cur == 0 || d < cur {
		return d
	}
	return cur
}

// BenchmarkMergePeakRSS runs the merge of a 100 MiB, a 512 MiB and a 2 GiB upload
// in a child process each (a real worker: database, S3 client, runner) and
// reports the child's peak RSS and the Go runtime's total memory: neither
// grows with the file. Run it with -benchtime=1x.
func BenchmarkMergePeakRSS(b *testing.B) {
	db := testenv.NewDB(b, models.SQLite)
	e := newEnv(b, db, nil)
	for i := 0; i < b.N; i++ {
		var rss []int64
		for _, size := range []int64{100 * mib, 512 * mib, 2 << 30} {
			b.StopTimer()
			user := fmt.Sprint("usr_", i, "_", size)
			id, want := prepareBig(b, e, user, size)
			b.StartTimer()
			cmd := testenv.Child("TestMergeRSSProcess", childEnv(b, db, e.store.Bucket(), "FERRY_UPLOAD_CHILD=rss", "FERRY_UPLOAD_CHILD_ID="+id, "FERRY_UPLOAD_CHILD_USER="+user)...)
			out, err := cmd.Output()
			if err != nil {
				b.Fatalf("child: %v\n%s", err, out)
			}
			var state string
			var hwmKiB, goSys int64
			sc := bufio.NewScanner(strings.NewReader(string(out)))
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "MERGED ") {
					fmt.Sscanf(sc.Text(), "MERGED %s %d %d", &state, &hwmKiB, &goSys)
				}
			}
			if u := e.upload(id); state != upload.StateSuccess || *u.SHA256 != want {
				b.Fatalf("child merge of %d bytes: %s\n%s", size, state, out)
			}
			rss = append(rss, hwmKiB<<10)
			b.ReportMetric(float64(hwmKiB)/1024, fmt.Sprintf("peak_rss_MiB_%dMiB", size/mib))
			b.ReportMetric(float64(goSys)/mib, fmt.Sprintf("go_sys_MiB_%dMiB", size/mib))
		}
		if growth := rss[2] - rss[0]; growth > 16*mib {
			b.Errorf("peak RSS grew by %d MiB from 100 MiB to 2 GiB; the merge must use constant memory", growth/mib)
		}
	}
}

// TestMergeRSSProcess is the child of BenchmarkMergePeakRSS: it runs merge
// workers until the upload is merged, then reports.
func TestMergeRSSProcess(t *testing.T) {
	if os.Getenv("FERRY_UPLOAD_CHILD") != "rss" {
		t.Skip("helper process for BenchmarkMergePeakRSS")
	}
	svc, q := childService(t, upload.Hooks{})
	r := jobs.NewRunner(q, jobs.RunnerConfig{Lease: 30 * time.Second, Poll: 50 * time.Millisecond, Log: testenv.Logger(t)})
	svc.Register(r)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx, time.Second); close(done) }()
	defer func() { cancel(); <-done }()
	id := os.Getenv("FERRY_UPLOAD_CHILD_ID")
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		st, err := svc.Status(context.Background(), os.Getenv("FERRY_UPLOAD_CHILD_USER"), id)
		if err == nil && (st.State == upload.StateSuccess || st.State == upload.StateFailed) {
			// VmHWM is this process's own peak RSS since exec. (The
			// rusage the parent gets from wait4 is not usable: until exec
			// the child shares the parent's memory, and its peak counts.)
			status, _ := os.ReadFile("/proc/self/status")
			var hwm int64
			for _, l := range strings.Split(string(status), "\n") {
				if strings.HasPrefix(l, "VmHWM:") {
					fmt.Sscanf(strings.TrimPrefix(l, "VmHWM:"), "%d", &hwm)
				}
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			fmt.Printf("MERGED %s %d %d\n", st.State, hwm, ms.Sys)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("merge did not finish")
}
