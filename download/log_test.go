package download_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-io/ferry/download"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
)

func logRows(t *testing.T, db *testenv.DB) int64 {
	t.Helper()
	var n int64
	if err := db.DB.Model(&models.DownloadLog{}).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// Issue 11, item 4: anyone can send /download/ requests with made-up or
// stale links, so those are counted in ferry_download_refused_links_total
// and never become download-log rows; every row names a link ferry signed
// and a user.
func TestDownloadLogOnlyForValidLinks(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db)
		alice, _ := e.user("alice")
		e.put("exp_a", alice, randomData(t, 100), "a.gz")
		good := e.link(e.svc, e.srv, "exp_a", alice)
		u, _ := url.Parse(good)
		sig := u.Query().Get("sig")
		forged := []string{
			e.srv.URL + "/download/exp_a",
			e.srv.URL + "/download/exp_nothing?u=usr_x&exp=4102444800&kid=k1&sig=AAAA",
			tamper(t, good, "u", "usr_mallory"),
			tamper(t, good, "kid", "k9"),
			tamper(t, good, "sig", strings.ToUpper(sig)),
			tamper(t, good, "exp", "4102444800"),
			strings.Replace(good, "exp_a", "exp_b", 1),
		}
		for i := range 50 {
			do(t, "GET", forged[i%len(forged)])
			do(t, "HEAD", fmt.Sprintf("%s/download/fil_%d?sig=x", e.srv.URL, i))
		}
		if n := logRows(t, db); n != 0 {
			t.Fatalf("forged links wrote %d download-log rows", n)
		}
		if got := testenv.Counter(t, e.reg, "ferry_download_refused_links_total", "reason", "invalid"); got != 100 {
			t.Fatalf("refused invalid links counted %v, want 100", got)
		}
		if got := testenv.Counter(t, e.reg, "ferry_downloads_total", "status", "403"); got != 100 {
			t.Fatalf("ferry_downloads_total{403} = %v, want 100", got)
		}

		e.clock.Add(301 * time.Second)
		if r := do(t, "GET", good); r.status != 403 || problemCode(t, r) != "link_expired" {
			t.Fatalf("expired link: %d %s", r.status, r.body)
		}
		if n := logRows(t, db); n != 0 {
			t.Fatalf("an expired link wrote %d download-log rows", n)
		}
		if got := testenv.Counter(t, e.reg, "ferry_download_refused_links_total", "reason", "expired"); got != 1 {
			t.Fatalf("refused expired links counted %v, want 1", got)
		}

		fresh := e.link(e.svc, e.srv, "exp_a", alice)
		if r := do(t, "GET", fresh); r.status != 200 {
			t.Fatalf("valid link: %d", r.status)
		}
		var row models.DownloadLog
		if err := db.DB.Take(&row).Error; err != nil || row.UserID != alice || row.LinkHash == nil || row.Status != 200 {
			t.Fatalf("the valid request's row = %+v (%v)", row, err)
		}
	})
}

// Issue 11, item 4: download-log rows older than the retention (30 days by
// default) are deleted by a periodic job. Two replicas run it against one
// database; the rows go once, the pruned metric adds up to what went, and
// younger rows stay.
func TestDownloadLogPruning(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db)
		alice, _ := e.user("alice")
		e.put("exp_p", alice, randomData(t, 64), "p.gz")
		download1 := func() {
			if r := do(t, "GET", e.link(e.svc, e.srv, "exp_p", alice)); r.status != 200 {
				t.Fatalf("download: %d", r.status)
			}
		}
		for range 3 {
			download1() // day 0: past the retention by the end
		}
		// Older rows in bulk, as months of traffic leave them: more than
		// one pruning batch.
		old := make([]models.DownloadLog, 12_345)
		for i := range old {
			old[i] = models.DownloadLog{ResourceID: "exp_p", UserID: alice, Method: "GET", Status: 200,
				CreatedAt: models.Time(e.clock.Now().Add(-time.Duration(i+1) * time.Minute))}
		}
		if err := db.DB.CreateInBatches(old, 1000).Error; err != nil {
			t.Fatal(err)
		}
		e.clock.Add(29 * 24 * time.Hour)
		download1()
		download1() // day 29: kept
		e.clock.Add(2 * 24 * time.Hour)
		download1() // day 31: kept
		if n := logRows(t, db); n != 3+12_345+3 {
			t.Fatalf("%d rows before pruning", n)
		}

		// Two replicas, each with its runner and its own registry.
		e.pruneEvery = 200 * time.Millisecond
		svc1, _, _ := e.serve(keyK1)
		svc2, _, _ := e.serve(keyK1)
		q := testenv.Must(jobs.NewQueue(jobs.QueueConfig{DB: db.DB, Now: time.Now}))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{}, 2)
		regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
		for i, svc := range []*download.Service{svc1, svc2} {
			r := jobs.NewRunner(q, jobs.RunnerConfig{Lease: 5 * time.Second, Poll: 50 * time.Millisecond, Log: testenv.Logger(t), Registerer: regs[i]})
			svc.Register(r)
			go func() { r.Run(ctx, 5*time.Second); done <- struct{}{} }()
		}
		deadline := time.Now().Add(30 * time.Second)
		for logRows(t, db) != 3 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		cancel()
		<-done
		<-done
		if n := logRows(t, db); n != 3 {
			t.Fatalf("%d rows after pruning, want the 3 younger than 30 days", n)
		}
		var young int64
		db.DB.Model(&models.DownloadLog{}).Where("created_at >= ?", models.Time(e.clock.Now().Add(-30*24*time.Hour))).Count(&young)
		if young != 3 {
			t.Fatalf("%d of the remaining rows are young", young)
		}
		pruned := testenv.Counter(t, regs[0], "ferry_rows_pruned_total", "table", "download_log") + testenv.Counter(t, regs[1], "ferry_rows_pruned_total", "table", "download_log")
		if pruned != 3+12_345 {
			t.Fatalf("the replicas counted %v pruned rows, want %d", pruned, 3+12_345)
		}
		var runs int64
		db.DB.Model(&models.Job{}).Where("kind = ? AND state = ?", download.KindPruneLog, jobs.StateDone).Count(&runs)
		if runs == 0 {
			t.Fatal("no pruning job ran to completion")
		}
		if n, err := svc1.PruneLog(context.Background()); err != nil || n != 0 {
			t.Fatalf("a second prune deleted %d (%v)", n, err)
		}
	})
}
