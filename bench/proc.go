package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// userHZ is the unit of utime and stime in /proc/<pid>/stat. The kernel
// reports them in USER_HZ, which is 100 on every architecture Go runs
// Linux on; reading sysconf(_SC_CLK_TCK) would need cgo for no gain.
const userHZ = 100

// usage is what a process has consumed since it started.
type usage struct {
	CPU   float64 // seconds on a CPU, user and kernel (see threadsCPU)
	Sys   float64 // stime alone: the kernel's share, mostly moving bytes through sockets
	RChar int64   // bytes returned by read(2) and friends: sockets and files alike
}

func (u usage) sub(v usage) usage {
	return usage{CPU: u.CPU - v.CPU, Sys: u.Sys - v.Sys, RChar: u.RChar - v.RChar}
}

// readUsage reads a live process's CPU time and read bytes from /proc.
func readUsage(pid int) (usage, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return usage{}, err
	}
	// The command name (field 2) is in parentheses and may hold spaces;
	// fields are counted from the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return usage{}, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return usage{}, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return usage{}, fmt.Errorf("/proc/%d/stat: bad utime/stime", pid)
	}
	u := usage{CPU: float64(utime+stime) / userHZ, Sys: float64(stime) / userHZ}
	// The ticks of /proc/<pid>/stat are 10 ms: a phase of ferry's control
	// plane is a few of them. The scheduler's own count, per thread, is in
	// nanoseconds; it misses threads that have exited, which the ticks
	// keep, so it is used only while it accounts for all of them.
	if exact, err := threadsCPU(pid); err == nil && exact >= u.CPU-2.0/userHZ {
		u.CPU = exact
	}
	ioStat, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return usage{}, err
	}
	for line := range strings.Lines(string(ioStat)) {
		if v, ok := strings.CutPrefix(line, "rchar: "); ok {
			u.RChar, err = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return usage{}, fmt.Errorf("/proc/%d/io: %w", pid, err)
			}
		}
	}
	return u, nil
}

// threadsCPU sums the time on a CPU (user and kernel, nanoseconds) of a
// process's live threads, from the first field of each
// /proc/<pid>/task/<tid>/schedstat.
func threadsCPU(pid int) (float64, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var ns int64
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if err != nil {
			if os.IsNotExist(err) {
				continue // the thread ended while the list was read
			}
			return 0, err
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return 0, fmt.Errorf("%s/%s/schedstat: empty", dir, t.Name())
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s/%s/schedstat: %w", dir, t.Name(), err)
		}
		ns += v
	}
	return float64(ns) / 1e9, nil
}

// selfCPU is this process's CPU time: the in-process clients (raw SDK,
// tus, direct GET) are measured with it.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// metrics are a Prometheus text exposition summed by metric name (all
// label sets together), enough for counters such as requests or bytes,
// and also by series: the name with its labels as ferry prints them
// (`ferry_s3_request_duration_seconds_sum{operation="ListParts",outcome="ok"}`).
type metrics map[string]float64

func (m metrics) delta(before metrics, name string) float64 { return m[name] - before[name] }

// scrape reads a /metrics endpoint. An empty url gives empty metrics.
func scrape(ctx context.Context, url string) (metrics, error) {
	m := metrics{}
	if url == "" {
		return m, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || strings.Contains(line, `route="/metrics"`) {
			continue // comments, and ferry counting the bench's own scrapes
		}
		name, rest, _ := strings.Cut(line, " ")
		series := ""
		if i := strings.IndexByte(line, '{'); i >= 0 && i < len(name) {
			// Labels may hold spaces; the value follows the closing brace.
			name = line[:i]
			j := strings.LastIndexByte(line, '}')
			series, rest = line[:j+1], strings.TrimSpace(line[j+1:])
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		m[name] += v
		if series != "" {
			m[series] += v
		}
	}
	return m, sc.Err()
}

// machine describes where the figures were measured.
type machine struct {
	CPU       string
	Cores     int
	RAM       string
	Kernel    string
	GoVersion string
	LoadStart string
	LoadEnd   string
	Started   time.Time
	Finished  time.Time
	// SHA256GBps is crypto/sha256 on one core of this machine, GB/s,
	// measured at the start: the floor of ferry's verify job. SHA256EndGBps
	// is the same measured at the end (zero in results.json files written
	// before it was); sha256Best is the faster of the two.
	SHA256GBps    float64
	SHA256EndGBps float64
}

// sha256Best is the faster of the SHA-256 speeds measured at the start and
// at the end: either can be slowed by what the machine ran at the time
// (the CPU clock leaves out time waiting for a core, not a busy cache or
// a host's other guests).
func (m machine) sha256Best() float64 { return max(m.SHA256GBps, m.SHA256EndGBps) }

func describeMachine(goVersion string) machine {
	m := machine{Cores: runtime.NumCPU(), GoVersion: goVersion, Started: time.Now(), LoadStart: loadAvg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				m.RAM = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	m.SHA256GBps = sha256Rate()
	return m
}

// sha256Rate is crypto/sha256's speed as the verify job meets it: a 4 MiB
// buffer (the job's read size, which the kernel's copy off the socket has
// just filled) hashed 64 times over, the best of three rounds (about 0.5 s
// in all), on the CPU clock of the thread that hashes. Two earlier choices
// made it lie: 64 MiB hashed once measured the memory, not the hash (on a
// 2-core Xeon VM 1.17 GB/s, against 1.86 for any buffer up to 4 MiB), and
// the wall clock counted whatever else the machine ran (0.54 GB/s with
// four busy loops beside it, against 1.28 on the thread's clock).
func sha256Rate() float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	buf := make([]byte, 4<<20)
	for i := range buf {
		buf[i] = byte(i * 131)
	}
	const passes = 64
	best := time.Duration(math.MaxInt64)
	for range 3 {
		h := sha256.New()
		start := threadCPU()
		for range passes {
			h.Write(buf)
		}
		h.Sum(nil)
		best = min(best, threadCPU()-start)
	}
	if best <= 0 {
		return 0
	}
	return float64(passes*len(buf)) / best.Seconds() / 1e9
}

// threadCPU is the calling thread's time on a CPU.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// loadAvg is the 1, 5 and 15 minute load averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// load1 is the 1 minute load average, recorded at the start of each case.
func load1() float64 {
	f := strings.Fields(loadAvg())
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// drain reads and discards the rest of r, for response bodies.
func drain(r io.Reader) { io.Copy(io.Discard, r) }
