package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/go-sql-driver/mysql"
)

// options are the command line.
type options struct {
	size        int64
	out         string
	runs        int
	warmup      int
	partSize    int64
	concurrency int
	mysqlDSN    string
	cache       string
	work        string
	keep        bool
	tusChunk    int64
	settle      time.Duration
	seed        uint64
	cpuProfile  string
	render      string
	aws         string
}

const (
	kib = 1 << 10
	mib = 1 << 20
	gib = 1 << 30
)

func main() {
	var o options
	size := sizeFlag{v: gib}
	part := sizeFlag{v: 8 * mib}
	tusChunk := sizeFlag{}
	cache, _ := os.UserCacheDir()
	flag.Var(&size, "size", "size of the random test file (e.g. 1GiB, 256MiB)")
	flag.StringVar(&o.out, "out", "bench/results", "directory for results.md and chart.png")
	flag.IntVar(&o.runs, "runs", 1, "repeat every case this many times (the summary takes the median)")
	flag.IntVar(&o.warmup, "warmup", 1, "rounds of every case run first and not counted (fresh peers pay one-off costs)")
	flag.Var(&part, "part-size", "part size of ferry (FERRY_PART_SIZE) and of the raw SDK upload")
	flag.IntVar(&o.concurrency, "concurrency", 4, "parts in flight for ferry's client and the raw SDK upload")
	flag.StringVar(&o.mysqlDSN, "mysql", "", "run ferry on MySQL/MariaDB: a DSN such as 'root@tcp(127.0.0.1:3306)/'; a fresh database is created and dropped (default: SQLite)")
	flag.StringVar(&o.cache, "cache", filepath.Join(cache, "ferry-bench"), "where the tusd and VersityGW binaries are installed")
	flag.StringVar(&o.work, "work", "", "parent of the scratch directory (default: the system temp dir)")
	flag.BoolVar(&o.keep, "keep", false, "keep the scratch directory and peer logs")
	flag.Var(&tusChunk, "tus-chunk", "bytes per tus PATCH (default: the whole file in one PATCH)")
	flag.DurationVar(&o.settle, "settle", 3*time.Second, "pause after flushing dirty pages before each case")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the random file")
	flag.StringVar(&o.render, "render", "", "only re-render results.md and chart.png into -out from this results.json")
	flag.StringVar(&o.aws, "aws", "aws", "the AWS CLI for the `aws s3 cp` case: a path, or a name looked up on PATH; \"none\" leaves the case out")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the bench process (the in-process SDK and tus clients) to this file")
	flag.Parse()
	o.size, o.partSize, o.tusChunk = size.v, part.v, tusChunk.v
	if o.runs < 1 || o.warmup < 0 || o.concurrency < 1 || o.size < 1 || o.partSize < 5*mib {
		fmt.Fprintln(os.Stderr, "bench: -runs, -concurrency and -size must be positive, -warmup not negative and -part-size at least 5MiB")
		os.Exit(2)
	}

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if o.render != "" {
		rp, err := loadReport(o.render)
		if err == nil {
			err = rp.write(o.out)
		}
		if err != nil {
			log.Error("render failed", "err", err)
			os.Exit(1)
		}
		fmt.Println(rp.table())
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, o); err != nil {
		log.Error("bench failed", "err", err)
		stop()
		os.Exit(1)
	}
}

// bench holds the peers and what every case shares.
type bench struct {
	o    options
	log  *slog.Logger
	work string

	file string // the random test file
	sum  string // its hex SHA-256

	s3       *s3.Client
	s3URL    string
	vgw      *process
	ferry    *process
	ferryBin string
	ferryURL string
	token    string
	tusd     *process
	tusdURL  string

	aws, awsVersion string // the AWS CLI, when on PATH

	// apiCalls counts the bench's own requests to ferry, which ferry's
	// request counter must not be charged with.
	apiCalls atomic.Int64
}

func run(ctx context.Context, log *slog.Logger, o options) error {
	root, err := repoRoot(ctx)
	if err != nil {
		return err
	}
	goVersion, err := exec.CommandContext(ctx, "go", "env", "GOVERSION").Output()
	if err != nil {
		return err
	}
	mach := describeMachine(strings.TrimSpace(string(goVersion)))
	log.Info("load average at start", "load", mach.LoadStart)

	work, err := os.MkdirTemp(o.work, "ferry-bench-")
	if err != nil {
		return err
	}
	if o.keep {
		log.Info("keeping the scratch directory", "dir", work)
	} else {
		defer os.RemoveAll(work)
	}
	b := &bench{o: o, log: log, work: work}
	defer b.stopPeers()

	tusdBin, err := ensureTool(ctx, log, o.cache, tusdTool())
	if err != nil {
		return err
	}
	vgwBin, err := ensureTool(ctx, log, o.cache, versityTool())
	if err != nil {
		return err
	}
	log.Info("building ferry", "from", root)
	if b.ferryBin, err = buildFerry(ctx, root, work); err != nil {
		return err
	}
	commit := ferryVersion(ctx, root)

	b.file = filepath.Join(work, "random.bin")
	log.Info("writing the random file", "size", o.size, "path", b.file)
	if b.sum, err = makeFile(b.file, o.size, o.seed); err != nil {
		return err
	}

	if err := b.startS3(ctx, vgwBin); err != nil {
		return err
	}
	dsn := ""
	if o.mysqlDSN != "" {
		var drop func()
		if dsn, drop, err = createDatabase(ctx, o.mysqlDSN); err != nil {
			return err
		}
		if !o.keep {
			defer drop()
		}
	}
	if err := b.startFerry(ctx, dsn); err != nil {
		return err
	}
	if err := b.startTusd(ctx, tusdBin); err != nil {
		return err
	}
	if b.aws, b.awsVersion = findAWSCLI(ctx, o.aws); b.aws == "" {
		log.Warn("no AWS CLI: the `aws s3 cp` case is left out (Debian: apt-get install awscli)", "aws", o.aws)
	} else {
		log.Info("aws s3 cp joins the uploads", "version", b.awsVersion)
	}

	idle, err := b.measureIdle(ctx, 10*time.Second)
	if err != nil {
		return err
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	// The first round on fresh peers pays costs the later ones do not:
	// on a 2-core VM, VersityGW's first CompleteMultipartUpload of a GiB
	// took 1.8 and 2.2 s of its CPU in two benches, against 0.46–0.49 s
	// in the rounds after it, and with three runs one such round leaves
	// the median to the other two. Warm-up rounds are logged, not kept.
	for r := 1; r <= o.warmup; r++ {
		if _, err := b.runOnce(ctx, -r); err != nil {
			return err
		}
	}
	var results []result
	for r := 1; r <= o.runs; r++ {
		rs, err := b.runOnce(ctx, r)
		results = append(results, rs...)
		if err != nil {
			return err
		}
	}
	mach.LoadEnd, mach.Finished = loadAvg(), time.Now()
	mach.SHA256EndGBps = sha256Rate()
	log.Info("load average at end", "load", mach.LoadEnd, "sha256_gbps_start", mach.SHA256GBps, "sha256_gbps_end", mach.SHA256EndGBps)

	rep := report{
		Info: runInfo{
			Command: commandLine(os.Args[1:]), Size: o.size, PartSize: o.partSize, TusChunk: o.tusChunk,
			Runs: o.runs, Warmup: o.warmup, Concurrency: o.concurrency, MySQL: o.mysqlDSN != "",
		},
		Machine: mach, Commit: commit, SHA256: b.sum, Results: results, Idle: idle, DB: "SQLite (ferry's default)",
	}
	if o.mysqlDSN != "" {
		rep.DB = "MySQL/MariaDB (" + mysqlServerVersion(ctx, o.mysqlDSN) + ")"
	}
	fmt.Println(rep.table())
	return rep.write(o.out)
}

// runOnce runs every case once, in a fixed order: the uploads, then the
// two downloads of the object ferry just stored. A negative run is the
// warm-up round of that number.
func (b *bench) runOnce(ctx context.Context, run int) ([]result, error) {
	var out []result
	name := "run " + strconv.Itoa(run)
	if run < 0 {
		name = "warm-up " + strconv.Itoa(-run)
	}
	add := func(r result, err error) error {
		if err != nil {
			return fmt.Errorf("%s, %s: %w", name, r.Case, err)
		}
		r.Run = run
		b.log.Info("case done", "round", name, "case", r.Case, "wall", r.Wall.Round(time.Millisecond),
			"MiB/s", fmt.Sprintf("%.1f", r.mibps()), "server_cpu_s", fmt.Sprintf("%.3f", r.ServerCPU))
		out = append(out, r)
		return nil
	}
	for _, pin := range []integrity{pinNothing, pinCRC32C, pinMD5} {
		if err := add(b.sdkUpload(ctx, pin)); err != nil {
			return out, err
		}
	}
	up, err := b.ferryUpload(ctx)
	if err := add(up.result, err); err != nil {
		return out, err
	}
	if err := add(b.tusdUpload(ctx)); err != nil {
		return out, err
	}
	if b.aws != "" {
		if err := add(b.awsUpload(ctx)); err != nil {
			return out, err
		}
	}
	if err := add(b.s3Get(ctx, up.uploadID)); err != nil {
		return out, err
	}
	for _, sha := range []bool{false, true} {
		if err := add(b.ferryDownload(ctx, up.fileID, sha)); err != nil {
			return out, err
		}
	}
	r, again, err := b.ferryUploadInstant(ctx)
	if err := add(r, err); err != nil {
		return out, err
	}
	if err := b.deleteFile(ctx, again); err != nil {
		return out, err
	}
	// The next run must upload the bytes again, not get an instant
	// (deduplicated) upload.
	return out, b.deleteFile(ctx, up.fileID)
}

// idleCPU is what the API servers burn doing nothing (ferry's job and
// outbox polls), in CPU seconds per second: the floor under every
// server figure.
type idleCPU struct{ Ferry, Tusd float64 }

func (b *bench) measureIdle(ctx context.Context, d time.Duration) (idleCPU, error) {
	f0, err := readUsage(b.ferry.pid())
	if err != nil {
		return idleCPU{}, err
	}
	t0, err := readUsage(b.tusd.pid())
	if err != nil {
		return idleCPU{}, err
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return idleCPU{}, ctx.Err()
	}
	f1, err := readUsage(b.ferry.pid())
	if err != nil {
		return idleCPU{}, err
	}
	t1, err := readUsage(b.tusd.pid())
	if err != nil {
		return idleCPU{}, err
	}
	idle := idleCPU{Ferry: (f1.CPU - f0.CPU) / d.Seconds(), Tusd: (t1.CPU - t0.CPU) / d.Seconds()}
	b.log.Info("idle CPU of the API servers", "ferry_s_per_s", idle.Ferry, "tusd_s_per_s", idle.Tusd)
	return idle, nil
}

func (b *bench) stopPeers() {
	for _, p := range []*process{b.tusd, b.ferry, b.vgw} {
		p.stop()
	}
}

// commandLine is how the bench was started, for results.md, with the
// MySQL DSN (which may hold a password) left out.
func commandLine(args []string) string {
	out := []string{"go", "run", "./bench"}
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "mysql" {
			out = append(out, "-mysql …")
			if !hasValue {
				i++
			}
			continue
		}
		out = append(out, a)
	}
	return strings.Join(out, " ")
}

// makeFile writes size pseudo-random bytes (ChaCha8 from seed: random to
// any compressor or dedup, yet reproducible) and returns their SHA-256.
func makeFile(path string, size int64, seed uint64) (string, error) {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	rng := mrand.NewChaCha8(key)
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	buf := make([]byte, 4*mib)
	for left := size; left > 0; {
		b := buf[:min(int64(len(buf)), left)]
		rng.Read(b)
		h.Write(b)
		if _, err := f.Write(b); err != nil {
			f.Close()
			return "", err
		}
		left -= int64(len(b))
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// createDatabase makes a fresh database on the server dsn names, so a run
// never inherits another's rows, and returns its DSN and a drop function.
func createDatabase(ctx context.Context, dsn string) (string, func(), error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", nil, fmt.Errorf("-mysql: %w", err)
	}
	name := fmt.Sprintf("ferry_bench_%d", time.Now().Unix())
	cfg.DBName = ""
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return "", nil, err
	}
	if _, err := db.ExecContext(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
		db.Close()
		return "", nil, fmt.Errorf("-mysql: create database: %w", err)
	}
	cfg.DBName = name
	drop := func() {
		db.ExecContext(context.Background(), "DROP DATABASE `"+name+"`")
		db.Close()
	}
	return cfg.FormatDSN(), drop, nil
}

func mysqlServerVersion(ctx context.Context, dsn string) string {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "?"
	}
	cfg.DBName = ""
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return "?"
	}
	defer db.Close()
	var v string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
		return "?"
	}
	return v
}

// ferryVersion names the ferry code being measured: the last commit that
// touched anything outside bench/, with "-dirty" when such files have
// uncommitted changes. Commits to the bench alone do not change it.
func ferryVersion(ctx context.Context, root string) string {
	git := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = root
		out, err := cmd.Output()
		return strings.TrimSpace(string(out)), err
	}
	outside := []string{"--", ".", ":(exclude)bench"}
	commit, err := git(append([]string{"log", "-1", "--format=%h"}, outside...)...)
	if err != nil || commit == "" {
		return "unknown"
	}
	if st, err := git(append([]string{"status", "--porcelain"}, outside...)...); err == nil && st != "" {
		commit += "-dirty"
	}
	return commit
}

// randomKey is a fresh credential for the bench's own S3 server.
func randomKey(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// sizeFlag parses sizes such as 1GiB, 256MiB, 64KiB or a byte count.
type sizeFlag struct{ v int64 }

func (s *sizeFlag) String() string { return formatSize(s.v) }

func (s *sizeFlag) Set(v string) error {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", gib}, {"MiB", mib}, {"KiB", kib}, {"B", 1}} {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			v, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 {
		return errors.New("want a size such as 1GiB, 256MiB or 1048576")
	}
	s.v = n * mult
	return nil
}

func formatSize(n int64) string {
	switch {
	case n >= gib && n%gib == 0:
		return fmt.Sprintf("%dGiB", n/gib)
	case n >= mib && n%mib == 0:
		return fmt.Sprintf("%dMiB", n/mib)
	case n >= kib && n%kib == 0:
		return fmt.Sprintf("%dKiB", n/kib)
	}
	return strconv.FormatInt(n, 10)
}
