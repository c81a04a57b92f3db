package export

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-io/ferry/chat"
	"github.com/ferry-io/ferry/internal/faultproxy"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/users"
)

// BenchmarkExportScale exports a seeded chat history (default 1,000,000
// messages, FERRY_BENCH_MESSAGES to change) and, in the same run, scans
// the same rows with one plain SELECT. Each runs in its own child process,
// so its peak RSS is its own; the S3 server stays in this process. Run it
// once, without -race:
//
//	go test -run '^$' -bench BenchmarkExportScale -benchtime 1x ./export
//
// FERRY_BENCH_DB=sqlite runs it on SQLite instead of MariaDB;
// FERRY_BENCH_SHARD_SIZE sets the messages per shard (default 1000);
// FERRY_BENCH_LARGE_BODIES=1 makes every body 16 KiB of U+0001, the most
// JSON a message renders to (try it with FERRY_BENCH_MESSAGES=12000);
// FERRY_BENCH_S3_LINK=N puts the S3 server behind a link of N MiB/s each
// way (internal/faultproxy, in this process), as a store across a network;
// FERRY_BENCH_CPUPROFILE=DIR writes each child's CPU profile to
// DIR/scan.prof and DIR/export.prof.
//
// Besides wall time it logs the CPU time each child cost: its own, this
// process's while it ran (the S3 server's), and a local MariaDB's (found
// by name in /proc; it counts whatever else the server did meanwhile). On
// a shared machine those sums move much less than the wall times do.
func BenchmarkExportScale(b *testing.B) {
	n := 1_000_000
	if v := os.Getenv("FERRY_BENCH_MESSAGES"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	dialect := models.MySQL
	if os.Getenv("FERRY_BENCH_DB") == models.SQLite {
		dialect = models.SQLite
	}
	db := testenv.NewDB(b, dialect)
	store := testenv.Store(b)
	ctx := context.Background()
	us := testenv.Must(users.New(users.Config{DB: db.DB, Now: time.Now, SessionTTL: time.Hour}))
	var ids []string
	for i := range 12 {
		u, _, err := us.Create(ctx, fmt.Sprintf("bench%d", i), false)
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, u.ID)
	}
	start := time.Now()
	rep, err := chat.Seed(ctx, db.DB, chat.SeedOptions{Users: ids, Conversations: 20, Messages: n, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	large := os.Getenv("FERRY_BENCH_LARGE_BODIES") != ""
	if large {
		if err := db.Exec("UPDATE messages SET body = ?", strings.Repeat("\x01", chat.MaxBodyBytes)).Error; err != nil {
			b.Fatal(err)
		}
	}
	seeded := time.Since(start)
	b.Logf("seeded %d messages in 20 conversations (%d joins, %d leaves, %d recalls) in %s: %.0f messages/s",
		rep.Messages, rep.Joins, rep.Leaves, rep.Recalls, seeded.Round(time.Millisecond), float64(rep.Messages)/seeded.Seconds())

	q := testenv.Must(jobs.NewQueue(jobs.QueueConfig{DB: db.DB, Now: time.Now}))
	svc := testenv.Must(New(withDeps(Config{}, db.DB, store, q)))
	// The first seeded user is in every conversation from its start and
	// never leaves: the export covers every message.
	v, _, err := svc.Create(ctx, ids[0], "bench", Request{Scope: "all"})
	if err != nil {
		b.Fatal(err)
	}

	srv := testenv.S3(b)
	link, _ := strconv.ParseFloat(os.Getenv("FERRY_BENCH_S3_LINK"), 64)
	if link > 0 {
		var p *faultproxy.Proxy
		srv, p = testenv.S3ThroughProxy(b)
		p.SetBandwidth(faultproxy.Both, int64(link*(1<<20)))
		b.Logf("the export reaches the S3 server over a link of %.0f MiB/s each way", link)
	}
	dbPID := 0 // the database server's process, when it runs here
	if dialect == models.MySQL {
		dbPID = pidOf("mariadbd", "mysqld")
	}
	child := func(mode string) (map[string]float64, float64) {
		b.Helper()
		cmd := testenv.Child("TestBenchChild", "FERRY_BENCH_CHILD="+mode, "FERRY_EXPORT_CHILD_DIALECT="+db.Dialect, "FERRY_EXPORT_CHILD_DSN="+db.DSN,
			"FERRY_EXPORT_CHILD_BUCKET="+store.Bucket(), "FERRY_EXPORT_CHILD_ID="+v.ID,
			"FERRY_TEST_S3_ENDPOINT="+srv.Endpoint, "FERRY_TEST_S3_ACCESS_KEY="+srv.AccessKey, "FERRY_TEST_S3_SECRET_KEY="+srv.SecretKey)
		if dir := os.Getenv("FERRY_BENCH_CPUPROFILE"); dir != "" {
			cmd.Args = append(cmd.Args, "-test.cpuprofile="+filepath.Join(dir, mode+".prof"))
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		self, dbCPU := cpuSelf(), cpuOf(dbPID)
		if err := cmd.Run(); err != nil {
			b.Fatalf("%s child: %v\n%s", mode, err, out.String())
		}
		res := map[string]float64{
			"cpu":     (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds(),
			"s3-cpu":  cpuSelf() - self,
			"db-cpu":  cpuOf(dbPID) - dbCPU,
			"db-seen": float64(dbPID),
		}
		sc := bufio.NewScanner(&out)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "RESULT" {
				res[f[1]], _ = strconv.ParseFloat(f[2], 64)
			}
		}
		rss := float64(cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss) / 1024 // KiB on Linux
		return res, rss
	}
	scan, scanRSS := child("scan")
	exp, expRSS := child("export")

	var x models.Export
	db.Where("id = ?", v.ID).Take(&x)
	if x.State != StateDone || *x.MessageCount != int64(scan["rows"]) {
		b.Fatalf("export %s with %v messages; the scan saw %v rows", x.State, x.MessageCount, scan["rows"])
	}
	expRate := float64(*x.MessageCount) / exp["seconds"]
	scanRate := scan["rows"] / scan["seconds"]
	b.ReportMetric(expRate, "export-msgs/s")
	b.ReportMetric(expRSS, "export-peak-RSS-MiB")
	b.ReportMetric(scanRate, "scan-msgs/s")
	b.ReportMetric(scanRSS, "scan-peak-RSS-MiB")
	var shardBytes int64
	if err := db.Model(&models.ExportShard{}).Where("export_id = ?", x.ID).Select("COALESCE(SUM(bytes), 0)").Scan(&shardBytes).Error; err != nil {
		b.Fatal(err)
	}
	b.Logf("%s: export of %d messages in %d shards (%.1f MiB of JSON, %.1f MiB put): %.1fs, %.0f messages/s, artifact %.1f MiB, peak RSS %.0f MiB",
		dialect, *x.MessageCount, *x.ShardCount, float64(shardBytes)/(1<<20), exp["shard-objects"]/(1<<20), exp["seconds"], expRate, float64(*x.Bytes)/(1<<20), expRSS)
	b.Logf("%s: plain SELECT of the same %d rows: %.1fs, %.0f rows/s, peak RSS %.0f MiB (the export takes %.1fx as long)",
		dialect, int64(scan["rows"]), scan["seconds"], scanRate, scanRSS, exp["seconds"]/scan["seconds"])
	server := "the S3 server"
	if link > 0 {
		server += " and the link"
	}
	cpu := func(r map[string]float64) string {
		s := fmt.Sprintf("CPU: %.1fs in the child, %.1fs in this process (%s)", r["cpu"], r["s3-cpu"], server)
		if r["db-seen"] > 0 {
			s += fmt.Sprintf(", %.1fs in the database server", r["db-cpu"])
		}
		return s
	}
	b.Logf("export %s; scan %s", cpu(exp), cpu(scan))
	if expRSS >= 256 && !large {
		b.Errorf("export worker peak RSS %.0f MiB, target < 256 MiB", expRSS)
	}
}

// TestBenchChild is the child process of BenchmarkExportScale: "scan"
// reads every message with one SELECT; "export" runs the export worker
// until the export is done. Each prints RESULT lines.
func TestBenchChild(t *testing.T) {
	mode := os.Getenv("FERRY_BENCH_CHILD")
	if mode == "" {
		t.Skip("helper process for BenchmarkExportScale")
	}
	ctx := context.Background()
	db, err := models.Open(ctx, os.Getenv("FERRY_EXPORT_CHILD_DIALECT"), os.Getenv("FERRY_EXPORT_CHILD_DSN"), testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	switch mode {
	case "scan":
		rows, err := db.Raw("SELECT conversation_id, seq, gseq, sender_id, body, sent_at FROM messages ORDER BY conversation_id, seq").Rows()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			var conv, sender, body string
			var seq, gseq int64
			var sentAt time.Time
			if err := rows.Scan(&conv, &seq, &gseq, &sender, &body, &sentAt); err != nil {
				t.Fatal(err)
			}
			n++
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("RESULT rows %d\n", n)
	case "export":
		store := &putCounter{Storage: testenv.StoreFor(t, testenv.S3(t), os.Getenv("FERRY_EXPORT_CHILD_BUCKET"))}
		defer func() { fmt.Printf("RESULT shard-objects %d\n", store.bytes.Load()) }()
		q := testenv.Must(jobs.NewQueue(jobs.QueueConfig{DB: db, Now: time.Now}))
		shardSize, _ := strconv.Atoi(os.Getenv("FERRY_BENCH_SHARD_SIZE"))
		svc := testenv.Must(New(withDeps(Config{Concurrency: 1, DeleteShards: true, ShardSize: shardSize, Log: testenv.Logger(t)}, db, store, q)))
		r := jobs.NewRunner(q, jobs.RunnerConfig{Lease: 30 * time.Second, Poll: 20 * time.Millisecond})
		svc.Register(r)
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go r.Run(rctx, time.Second)
		id := os.Getenv("FERRY_EXPORT_CHILD_ID")
		for deadline := time.Now().Add(30 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
			var state string
			db.Model(&models.Export{}).Where("id = ?", id).Pluck("state", &state)
			if state == StateDone {
				break
			}
			if state == StateFailed || time.Now().After(deadline) {
				t.Fatalf("export %s", state)
			}
		}
	}
	fmt.Printf("RESULT seconds %f\n", time.Since(start).Seconds())
}

// putCounter counts the bytes put through PutSHA256, the shard objects'.
type putCounter struct {
	Storage
	bytes atomic.Int64
}

func (c *putCounter) PutSHA256(ctx context.Context, key string, body []byte, sha256Hex, contentType string) error {
	c.bytes.Add(int64(len(body)))
	return c.Storage.PutSHA256(ctx, key, body, sha256Hex, contentType)
}

// cpuSelf is the CPU time this process has used, in seconds.
func cpuSelf() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime)).Seconds()
}

// pidOf returns the id of a local process with one of names, or 0.
func pidOf(names ...string) int {
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile(filepath.Join("/proc", d.Name(), "comm"))
		for _, n := range names {
			if strings.TrimSpace(string(comm)) == n {
				return pid
			}
		}
	}
	return 0
}

// cpuOf is the CPU time process pid has used, in seconds (0 without
// /proc): what the database server spends on a child's queries.
func cpuOf(pid int) float64 {
	if pid == 0 {
		return 0
	}
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses; utime
	// and stime are the 14th and 15th of the line, in clock ticks (100 a
	// second on Linux).
	_, rest, _ := strings.Cut(string(stat), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100
}
