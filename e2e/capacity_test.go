package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
)

// TestReplicaCapacity measures what ferry's upload control plane carries
// on MariaDB with one replica and with three: closed-loop workers each
// start an upload, presign its part, PUT it to S3 and complete it, over
// and over, for a fixed time (or a fixed count, whichever ends first). It
// reports cycles per second in all and per replica, and the latency of
// presign (p50, p99), each the median of several runs; between runs it
// waits for the merges and verifications the cycles queued, so one run's
// backlog does not slow the next.
//
// It is a measurement, not a check of behaviour, so it runs only when
// FERRY_TEST_REPLICA_CAPACITY=1, and only without -race (the race
// detector slows ferry several times): .ci/replicas runs it that way.
// FERRY_TEST_CAPACITY_RUNS, _SECONDS and _WORKERS (per replica) override
// 3 runs of 8 s with 6 workers per replica.
func TestReplicaCapacity(t *testing.T) {
	if os.Getenv("FERRY_TEST_REPLICA_CAPACITY") != "1" {
		t.Skip("a measurement: runs with FERRY_TEST_REPLICA_CAPACITY=1 (.ci/replicas)")
	}
	if raceEnabled {
		t.Skip("measure without -race")
	}
	testenv.MySQLServerDSN(t)
	runs := envInt(t, "FERRY_TEST_CAPACITY_RUNS", 3)
	seconds := envInt(t, "FERRY_TEST_CAPACITY_SECONDS", 8)
	workers := envInt(t, "FERRY_TEST_CAPACITY_WORKERS", 6)
	var table []string
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d replicas", n), func(t *testing.T) {
			c := startCluster(t, clusterOptions{Replicas: n, Env: map[string]string{
				"FERRY_RATE_CREATES": "0", "FERRY_MAX_OPEN_UPLOADS": "1000000", "FERRY_LOG_LEVEL": "warn",
			}})
			var tokens []string
			for w := range workers * n {
				_, tok := c.R[0].CreateUser(fmt.Sprintf("load%d", w), false)
				tokens = append(tokens, tok)
			}
			var results []loadResult
			for run := range runs {
				ferryCPU, dbCPU := c.cpu(t), mariadbCPU()
				res := runLoad(c, tokens, time.Duration(seconds)*time.Second, 20000)
				ferryCPU, dbCPU = c.cpu(t)-ferryCPU, mariadbCPU()-dbCPU
				drained := c.drain(120 * time.Second)
				res.ferryCPU, res.dbCPU = ferryCPU, dbCPU
				t.Logf("run %d: %d cycles in %s: %.1f/s (%.1f per replica), presign p50 %s p99 %s; CPU per cycle: ferry %s, MariaDB %s; %d errors; backlog drained in %s",
					run+1, res.ops, res.elapsed.Round(time.Millisecond), res.rate(), res.rate()/float64(n),
					res.presignQuantile(0.50), res.presignQuantile(0.99), res.perCycle(ferryCPU), res.perCycle(dbCPU),
					len(res.errs), drained.Round(100*time.Millisecond))
				if len(res.errs) > 0 {
					t.Fatalf("%d cycles failed; the first: %v", len(res.errs), res.errs[0])
				}
				results = append(results, res)
			}
			rate := median(results, func(r loadResult) float64 { return r.rate() })
			p50 := median(results, func(r loadResult) float64 { return float64(r.presignQuantile(0.50)) })
			p99 := median(results, func(r loadResult) float64 { return float64(r.presignQuantile(0.99)) })
			fcpu := median(results, func(r loadResult) float64 { return float64(r.perCycle(r.ferryCPU)) })
			dcpu := median(results, func(r loadResult) float64 { return float64(r.perCycle(r.dbCPU)) })
			table = append(table, fmt.Sprintf("| %d | %d | %.1f | %.1f | %s | %s | %s | %s |", n, workers*n, rate, rate/float64(n),
				time.Duration(p50).Round(100*time.Microsecond), time.Duration(p99).Round(100*time.Microsecond),
				time.Duration(fcpu).Round(10*time.Microsecond), time.Duration(dcpu).Round(10*time.Microsecond)))
		})
	}
	t.Logf("medians of %d runs of %d s each, on MariaDB:\n| replicas | workers | cycles/s | per replica | presign p50 | presign p99 | ferry CPU/cycle | MariaDB CPU/cycle |\n|---|---|---|---|---|---|---|---|\n%s",
		runs, seconds, strings.Join(table, "\n"))
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func median(rs []loadResult, f func(loadResult) float64) float64 {
	var vs []float64
	for _, r := range rs {
		vs = append(vs, f(r))
	}
	slices.Sort(vs)
	return vs[len(vs)/2]
}

// loadResult is one run of the load generator.
type loadResult struct {
	ops     int
	elapsed time.Duration
	presign []time.Duration // sorted
	errs    []error
	// ferryCPU and dbCPU are the CPU time the replicas and MariaDB spent
	// during the run (utime+stime).
	ferryCPU, dbCPU time.Duration
}

// perCycle is CPU time spent per cycle (0 when it was not measured).
func (r loadResult) perCycle(cpu time.Duration) time.Duration {
	if r.ops == 0 {
		return 0
	}
	return cpu / time.Duration(r.ops)
}

func (r loadResult) rate() float64 { return float64(r.ops) / r.elapsed.Seconds() }

func (r loadResult) presignQuantile(q float64) time.Duration {
	if len(r.presign) == 0 {
		return 0
	}
	return r.presign[min(len(r.presign)-1, int(q*float64(len(r.presign))))]
}

// runLoad runs one closed-loop worker per token for d or until maxOps
// cycles in all. Cycle k of a worker starts its upload on replica k, signs
// the part on k+1 and completes on k+2 (mod the replica count), so with
// three replicas every cycle touches each of them.
func runLoad(c *cluster, tokens []string, d time.Duration, maxOps int) loadResult {
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute}}
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var (
		mu     sync.Mutex
		res    loadResult
		budget = maxOps
		wg     sync.WaitGroup
	)
	start := time.Now()
	for w, tok := range tokens {
		wg.Go(func() {
			data := randomData(4 << 10)
			for k := w; ; k++ {
				mu.Lock()
				if budget == 0 || ctx.Err() != nil || len(res.errs) > 10 {
					mu.Unlock()
					return
				}
				budget--
				mu.Unlock()
				// Fresh bytes every cycle: equal first parts would make
				// init offer to resume another cycle's upload.
				copy(data, fmt.Sprintf("%d-%d-%d", w, k, time.Now().UnixNano()))
				took, err := cycle(ctx, hc, c, k, tok, data)
				mu.Lock()
				switch {
				case err == nil:
					res.ops++
					res.presign = append(res.presign, took)
				case ctx.Err() == nil:
					res.errs = append(res.errs, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	slices.Sort(res.presign)
	return res
}

// cycle is one init, presign, PUT and complete; it returns how long the
// presign took.
func cycle(ctx context.Context, hc *http.Client, c *cluster, k int, tok string, data []byte) (time.Duration, error) {
	at := func(i int) string { return c.R[(k+i)%len(c.R)].URL }
	sum := crc32c(data)
	r, err := send(ctx, hc, at(0), "POST", "/uploads", tok, map[string]any{"file_name": "load.bin", "size": len(data),
		"checksum_algorithm": "CRC32C", "first_part_crc32c": sum})
	if err != nil || r.Status != 201 {
		return 0, fmt.Errorf("init: %d %s %v", r.Status, r.Body, err)
	}
	var up uploadJSON
	if err := jsonInto(r, &up); err != nil {
		return 0, err
	}
	t0 := time.Now()
	r, err = send(ctx, hc, at(1), "POST", "/uploads/"+up.UploadID+"/presign", tok, map[string]any{"part_numbers": []int{1}, "checksum_crc32c": map[string]string{"1": sum}})
	took := time.Since(t0)
	if err != nil || r.Status != 200 {
		return 0, fmt.Errorf("presign: %d %s %v", r.Status, r.Body, err)
	}
	var urls struct{ URLs map[string]presigned }
	if err := jsonInto(r, &urls); err != nil {
		return 0, err
	}
	if code, _, err := putPartCtx(ctx, hc, urls.URLs["1"], data); err != nil || code != 200 {
		return 0, fmt.Errorf("PUT part: %d %v", code, err)
	}
	r, err = send(ctx, hc, at(2), "POST", "/uploads/"+up.UploadID+"/complete", tok, map[string]any{"checksum_crc32c": sum})
	if err != nil || r.Status != 202 {
		return 0, fmt.Errorf("complete: %d %s %v", r.Status, r.Body, err)
	}
	return took, nil
}

// drain waits until no merge or verification is queued or running, and
// says how long that took.
func (c *cluster) drain(within time.Duration) time.Duration {
	c.t.Helper()
	db := ferryDB(c.t, c.R[0])
	start := time.Now()
	for {
		var n int64
		db.Model(&models.Job{}).Where("kind IN ? AND state IN ?", []string{"upload.merge", "upload.verify"}, []string{"queued", "running"}).Count(&n)
		if n == 0 {
			return time.Since(start)
		}
		if time.Since(start) > within {
			c.t.Fatalf("%d merges and verifications still due after %s", n, within)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func jsonInto(r Response, v any) error {
	if err := json.Unmarshal(r.Body, v); err != nil {
		return fmt.Errorf("decode %s: %w", r.Body, err)
	}
	return nil
}

// putPartCtx PUTs a part to its presigned URL with hc.
func putPartCtx(ctx context.Context, hc *http.Client, p presigned, body []byte) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, p.Method, p.URL, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	for k, v := range p.Headers {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("ETag"), nil
}

// cpu is the CPU time (user and system) the replicas have used so far.
func (c *cluster) cpu(t *testing.T) time.Duration {
	var sum time.Duration
	for _, f := range c.R {
		d, err := procCPU(f.cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		sum += d
	}
	return sum
}

// mariadbCPU is the CPU time a local mariadbd (or mysqld) has used so far,
// or 0 when none runs on this machine.
func mariadbCPU() time.Duration {
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile("/proc/" + d.Name() + "/comm")
		if name := strings.TrimSpace(string(comm)); name == "mariadbd" || name == "mysqld" {
			cpu, _ := procCPU(pid)
			return cpu
		}
	}
	return 0
}

// procCPU reads a process's utime+stime from /proc/<pid>/stat (fields 14
// and 15, in USER_HZ ticks, which Linux fixes at 100 per second).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; the fields after it are
	// plain.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}
