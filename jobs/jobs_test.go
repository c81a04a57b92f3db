package jobs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"gorm.io/gorm"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
)

func newRunner(q *Queue, t *testing.T, owner string, lease time.Duration) *Runner {
	return NewRunner(q, RunnerConfig{Lease: lease, Poll: 20 * time.Millisecond, Owner: owner, Log: testenv.Logger(t)})
}

// waitState polls until job (kind,key) reaches state or the deadline passes.
func waitState(t *testing.T, q *Queue, kind, key, state string, within time.Duration) *models.Job {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		j, err := q.Get(context.Background(), kind, key)
		if err == nil && j.State == state {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s/%s: want state %s within %s, have %+v (err %v)", kind, key, state, within, j, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestEnqueueIsIdempotent(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		q := testenv.Must(NewQueue(QueueConfig{DB: db.DB, Now: time.Now}))
		ctx := context.Background()
		for i, want := range []bool{true, false, false} {
			got, err := q.Enqueue(ctx, nil, Spec{Kind: "k", Key: "same", Payload: map[string]int{"i": i}})
			if err != nil || got != want {
				t.Fatalf("enqueue #%d: inserted=%v err=%v, want inserted=%v", i, got, err, want)
			}
		}
		var n int64
		db.Model(&models.Job{}).Where("kind = ? AND business_key = ?", "k", "same").Count(&n)
		if n != 1 {
			t.Fatalf("rows = %d, want 1", n)
		}
		j, _ := q.Get(ctx, "k", "same")
		if j.Payload != `{"i":0}` {
			t.Fatalf("payload = %s, want the first enqueue's", j.Payload)
		}
	})
}

// Two runners (and many direct claimers) race for the same jobs: each job
// runs exactly once.
func TestRacingWorkersRunEachJobOnce(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		q := testenv.Must(NewQueue(QueueConfig{DB: db.DB, Now: time.Now}))
		ctx := context.Background()

		// Direct race on one job: 16 goroutines claim at once; one wins.
		if _, err := q.Enqueue(ctx, nil, Spec{Kind: "race", Key: "one"}); err != nil {
			t.Fatal(err)
		}
		var wins atomic.Int32
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := q.claim(ctx, "race", fmt.Sprintf("w%d", i), 1, time.Minute)
				if err != nil {
					t.Error(err)
				}
				wins.Add(int32(len(got)))
			}()
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("claims won = %d, want 1", wins.Load())
		}

		// Two runners share 40 jobs.
		const n = 40
		for i := range n {
			if _, err := q.Enqueue(ctx, nil, Spec{Kind: "work", Key: strconv.Itoa(i)}); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		runs := map[string][]string{}
		handler := func(owner string) Handler {
			return func(ctx context.Context, j *Job) error {
				mu.Lock()
				runs[j.Key] = append(runs[j.Key], owner)
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
				return nil
			}
		}
		rctx, cancel := context.WithCancel(ctx)
		var done sync.WaitGroup
		for _, owner := range []string{"a", "b"} {
			r := newRunner(q, t, owner, 10*time.Second)
			r.Handle("work", handler(owner), Options{Concurrency: 4})
			done.Add(1)
			go func() { defer done.Done(); r.Run(rctx, time.Second) }()
		}
		for i := range n {
			waitState(t, q, "work", strconv.Itoa(i), StateDone, 20*time.Second)
		}
		cancel()
		done.Wait()
		owners := map[string]int{}
		for key, who := range runs {
			if len(who) != 1 {
				t.Errorf("job %s ran %d times (%v)", key, len(who), who)
			}
			owners[who[0]]++
		}
		if len(runs) != n {
			t.Fatalf("%d jobs ran, want %d", len(runs), n)
		}
		t.Logf("jobs per runner: %v", owners)
	})
}

func TestFailingJobEndsFailedAfterMaxAttempts(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		q := testenv.Must(NewQueue(QueueConfig{DB: db.DB, Now: time.Now}))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var calls atomic.Int32
		r := newRunner(q, t, "w", 10*time.Second)
		r.Handle("flaky", func(ctx context.Context, j *Job) error {
			calls.Add(1)
			return fmt.Errorf("boom on attempt %d", j.Attempt)
		}, Options{MaxAttempts: 3, Backoff: func(int) time.Duration { return 10 * time.Millisecond }})
		go r.Run(ctx, time.Second)
		if _, err := q.Enqueue(ctx, nil, Spec{Kind: "flaky", Key: "x"}); err != nil {
			t.Fatal(err)
		}
		j := waitState(t, q, "flaky", "x", StateFailed, 10*time.Second)
		if j.Attempts != 3 || calls.Load() != 3 {
			t.Fatalf("attempts = %d, calls = %d, want 3 and 3", j.Attempts, calls.Load())
		}
		if j.LastError == nil || *j.LastError != "boom on attempt 3" {
			t.Fatalf("last_error = %v, want the last attempt's error", j.LastError)
		}

	})
}

// A store outage does not use up attempts: a job whose runs find S3 or the
// database unreachable (Unavailable) waits and tries again, here seven
// times with two attempts allowed, and then finishes; past its outage
// budget the waits count as attempts and the job fails.
func TestUnavailableStoreDoesNotUseUpAttempts(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		q := testenv.Must(NewQueue(QueueConfig{DB: db.DB, Now: time.Now}))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var calls atomic.Int32
		r := newRunner(q, t, "w", 10*time.Second)
		r.Handle("outage", func(ctx context.Context, j *Job) error {
			if n := calls.Add(1); n <= 7 {
				return Unavailable(fmt.Errorf("s3 down (run %d, attempt %d)", n, j.Attempt))
			}
			return nil
		}, Options{MaxAttempts: 2, OutageBackoffMax: 20 * time.Millisecond})
		r.Handle("long-outage", func(ctx context.Context, j *Job) error {
			return Unavailable(errors.New("s3 down for good"))
		}, Options{MaxAttempts: 2, OutageBackoffMax: 10 * time.Millisecond, OutageBudget: 3,
			Backoff: func(int) time.Duration { return 10 * time.Millisecond }})
		go r.Run(ctx, time.Second)
		q.Enqueue(ctx, nil, Spec{Kind: "outage", Key: "x"})
		q.Enqueue(ctx, nil, Spec{Kind: "long-outage", Key: "y"})
		j := waitState(t, q, "outage", "x", StateDone, 20*time.Second)
		if calls.Load() != 8 || j.Attempts != 1 || j.OutageWaits != 7 {
			t.Fatalf("calls = %d, attempts = %d, outage waits = %d; want 8, 1, 7", calls.Load(), j.Attempts, j.OutageWaits)
		}
		f := waitState(t, q, "long-outage", "y", StateFailed, 20*time.Second)
		if f.OutageWaits != 3 || f.Attempts != 2 {
			t.Fatalf("past the budget: outage waits = %d, attempts = %d; want 3 and 2", f.OutageWaits, f.Attempts)
		}
	})
}

func TestPermanentErrorFailsAtOnce(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		q := testenv.Must(NewQueue(QueueConfig{DB: db.DB, Now: time.Now}))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r := newRunner(q, t, "w", 10*time.Second)
		var fixed atomic.Bool
		r.Handle("p", func(ctx context.Context, j *Job) error {
			if fixed.Load() {
				return nil
			}
			return Permanent(errors.New("bad input"))
		}, Options{MaxAttempts: 5})
		go r.Run(ctx, time.Second)
		q.Enqueue(ctx, nil, Spec{Kind: "p", Key: "x"})
		j := waitState(t, q, "p", "x", StateFailed, 10*time.Second)
		if j.Attempts != 1 {
			t.Fatalf("attempts = %d, want 1", j.Attempts)
		}
		// An operator fixes the cause and retries: the job runs again.
		fixed.Store(true)
		if ok, err := q.Retry(ctx, "p", "x"); err != nil || !ok {
			t.Fatalf("retry: %v %v", ok, err)
		}
		waitState(t, q, "p", "x", StateDone, 10*time.Second)
	})
}

// A stale worker's late finish is rejected after another worker claimed the
// job; the heartbeat keeps a long job owned past its lease.
func TestFencing(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		now := time.Now()
		var mu sync.Mutex
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
		q := testenv.Must(NewQueue(QueueConfig{DB: db.DB, Now: clock}))
		ctx := context.Background()
		q.Enqueue(ctx, nil, Spec{Kind: "f", Key: "x"})
		first, _ := q.claim(ctx, "f", "old", 1, time.Second)
		if len(first) != 1 {
			t.Fatal("first claim failed")
		}
		if again, _ := q.claim(ctx, "f", "new", 1, time.Second); len(again) != 0 {
			t.Fatal("claimed a job whose lease is live")
		}
		advance(2 * time.Second)
		second, _ := q.claim(ctx, "f", "new", 1, time.Second)
		if len(second) != 1 {
			t.Fatal("lapsed lease was not reclaimable")
		}
		if err := q.complete(ctx, nil, first[0].ID, first[0].fence); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("stale finish: err = %v, want ErrLeaseLost", err)
		}
		if err := first[0].Finish(ctx, db.DB); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("stale Finish: err = %v, want ErrLeaseLost", err)
		}
		if err := q.extend(ctx, first[0].ID, first[0].fence, time.Minute); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("stale heartbeat: err = %v, want ErrLeaseLost", err)
		}
		if err := second[0].Finish(ctx, db.DB); err != nil {
			t.Fatalf("current owner's finish: %v", err)
		}
		j, _ := q.Get(ctx, "f", "x")
		if j.State != StateDone || j.Attempts != 2 {
			t.Fatalf("job = %s after %d attempts, want done after 2", j.State, j.Attempts)
		}
	})
}

func TestHeartbeatKeepsLongJobOwned(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		q := testenv.Must(NewQueue(QueueConfig{DB: db.DB, Now: time.Now}))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var runs atomic.Int32
		for _, owner := range []string{"a", "b"} {
			r := newRunner(q, t, owner, 600*time.Millisecond)
			r.Handle("long", func(ctx context.Context, j *Job) error {
				runs.Add(1)
				select { // three leases long
				case <-time.After(1800 * time.Millisecond):
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}, Options{})
			go r.Run(ctx, time.Second)
		}
		q.Enqueue(ctx, nil, Spec{Kind: "long", Key: "x"})
		waitState(t, q, "long", "x", StateDone, 10*time.Second)
		if runs.Load() != 1 {
			t.Fatalf("long job ran %d times; the heartbeat should have kept it owned", runs.Load())
		}
	})
}

// At shutdown, a job that does not finish within the drain period is
// handed back at once, without using up an attempt.
func TestShutdownReleasesRunningJobs(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		q := testenv.Must(NewQueue(QueueConfig{DB: db.DB, Now: time.Now}))
		ctx, cancel := context.WithCancel(context.Background())
		started := make(chan struct{})
		r := newRunner(q, t, "w", time.Minute)
		r.Handle("stuck", func(ctx context.Context, j *Job) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		}, Options{})
		done := make(chan struct{})
		go func() { r.Run(ctx, 100*time.Millisecond); close(done) }()
		q.Enqueue(context.Background(), nil, Spec{Kind: "stuck", Key: "x"})
		<-started
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("runner did not stop")
		}
		j, _ := q.Get(context.Background(), "stuck", "x")
		if j.State != StateQueued || j.Attempts != 0 || j.LeaseOwner != nil {
			t.Fatalf("after shutdown: state=%s attempts=%d owner=%v; want queued, 0, none", j.State, j.Attempts, j.LeaseOwner)
		}
	})
}

// A worker process is SIGKILLed mid-job. After its lease lapses another
// worker reclaims and finishes the job, and the dead worker's claim can no
// longer finish it.
func TestKilledWorkerJobIsReclaimed(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		q := testenv.Must(NewQueue(QueueConfig{DB: db.DB, Now: time.Now}))
		ctx := context.Background()
		if _, err := q.Enqueue(ctx, nil, Spec{Kind: "crashy", Key: "x"}); err != nil {
			t.Fatal(err)
		}
		cmd := testenv.Child("TestWorkerProcess", "FERRY_JOBS_CHILD=1", "FERRY_JOBS_CHILD_DIALECT="+db.Dialect, "FERRY_JOBS_CHILD_DSN="+db.DSN)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		var id, fence int64
		lines := bufio.NewScanner(out)
		found := make(chan bool, 1)
		go func() {
			for lines.Scan() {
				if f := strings.Fields(lines.Text()); len(f) == 3 && f[0] == "CLAIMED" {
					id, _ = strconv.ParseInt(f[1], 10, 64)
					fence, _ = strconv.ParseInt(f[2], 10, 64)
					found <- true
					return
				}
			}
			found <- false
		}()
		select {
		case ok := <-found:
			if !ok {
				t.Fatal("worker exited without claiming")
			}
		case <-time.After(30 * time.Second):
			t.Fatal("worker did not claim the job")
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
		j, _ := q.Get(ctx, "crashy", "x")
		if j.State != StateRunning || j.LeaseOwner == nil || *j.LeaseOwner != "child" {
			t.Fatalf("after kill: %s owned by %v; want running, owned by the dead child", j.State, j.LeaseOwner)
		}

		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		r := newRunner(q, t, "survivor", 2*time.Second)
		var ran atomic.Int32
		r.Handle("crashy", func(ctx context.Context, j *Job) error { ran.Add(1); return nil }, Options{})
		go r.Run(rctx, time.Second)
		start := time.Now()
		done := waitState(t, q, "crashy", "x", StateDone, 30*time.Second)
		t.Logf("reclaimed and finished %.1fs after the kill (lease 2s)", time.Since(start).Seconds())
		if ran.Load() != 1 || done.Attempts != 2 {
			t.Fatalf("survivor ran %d times, attempts %d; want 1 and 2", ran.Load(), done.Attempts)
		}
		if err := q.complete(ctx, nil, id, fence); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("dead worker's late finish: %v, want ErrLeaseLost", err)
		}
	})
}

// TestWorkerProcess is the child of TestKilledWorkerJobIsReclaimed: it
// claims the job, reports it, and hangs until killed.
func TestWorkerProcess(t *testing.T) {
	if os.Getenv("FERRY_JOBS_CHILD") != "1" {
		t.Skip("helper process for TestKilledWorkerJobIsReclaimed")
	}
	db, err := models.Open(context.Background(), os.Getenv("FERRY_JOBS_CHILD_DIALECT"), os.Getenv("FERRY_JOBS_CHILD_DSN"), testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	q := testenv.Must(NewQueue(QueueConfig{DB: db, Now: time.Now}))
	r := newRunner(q, t, "child", 2*time.Second)
	r.Handle("crashy", func(ctx context.Context, j *Job) error {
		fmt.Printf("CLAIMED %d %d\n", j.ID, j.fence)
		os.Stdout.Sync()
		select {} // hang until SIGKILL
	}, Options{})
	r.Run(context.Background(), time.Second)
}

func TestPeriodicJobRunsOncePerWindowAcrossRunners(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		q := testenv.Must(NewQueue(QueueConfig{DB: db.DB, Now: time.Now}))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var runs atomic.Int32
		for _, owner := range []string{"a", "b", "c"} {
			r := newRunner(q, t, owner, 10*time.Second)
			r.Handle("tick", func(ctx context.Context, j *Job) error { runs.Add(1); return nil }, Options{Every: time.Hour})
			go r.Run(ctx, time.Second)
		}
		deadline := time.Now().Add(10 * time.Second)
		for runs.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond) // room for a wrong second run
		if runs.Load() != 1 {
			t.Fatalf("periodic job ran %d times in one window across 3 runners, want 1", runs.Load())
		}
	})
}

func TestExponential(t *testing.T) {
	b := Exponential(time.Second, 10*time.Second)
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 30: 10 * time.Second} {
		if got := b(n); got != want {
			t.Errorf("backoff(%d) = %s, want %s", n, got, want)
		}
	}
}

func TestCollectorReportsBacklog(t *testing.T) {
	db := testenv.NewDB(t, "sqlite")
	q := testenv.Must(NewQueue(QueueConfig{DB: db.DB, Now: time.Now}))
	ctx := context.Background()
	for i := range 3 {
		q.Enqueue(ctx, nil, Spec{Kind: "merge", Key: strconv.Itoa(i)})
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(q))
	n, err := testutil.GatherAndCount(reg, "ferry_jobs")
	if err != nil || n != 1 {
		t.Fatalf("series = %d, %v", n, err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ferry_jobs Jobs in the queue by kind and state (all replicas).
# TYPE ferry_jobs gauge
ferry_jobs{kind="merge",state="queued"} 3
`), "ferry_jobs"); err != nil {
		t.Fatal(err)
	}
}

// Finished jobs past the retention are deleted by the runner's own hourly
// job, counted in ferry_rows_pruned_total{table="jobs"}; queued, running
// and recently finished ones stay.
func TestFinishedJobsArePruned(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		q := testenv.Must(NewQueue(QueueConfig{DB: db.DB, Now: time.Now}))
		ctx := context.Background()
		old := models.Time(time.Now().Add(-10 * 24 * time.Hour))
		for i := range 7 {
			q.Enqueue(ctx, nil, Spec{Kind: "k", Key: fmt.Sprint(i)})
		}
		// 0-2 finished long ago, 3 failed long ago, 4 finished now, 5 queued, 6 running.
		db.Model(&models.Job{}).Where("business_key IN ?", []string{"0", "1", "2"}).Updates(map[string]any{"state": StateDone, "finished_at": old})
		db.Model(&models.Job{}).Where("business_key = ?", "3").Updates(map[string]any{"state": StateFailed, "finished_at": old})
		db.Model(&models.Job{}).Where("business_key = ?", "4").Updates(map[string]any{"state": StateDone, "finished_at": models.Time(time.Now())})
		db.Model(&models.Job{}).Where("business_key = ?", "6").Updates(map[string]any{"state": StateRunning})
		reg := prometheus.NewRegistry()
		r := NewRunner(q, RunnerConfig{Lease: time.Second, Poll: 20 * time.Millisecond, Log: testenv.Logger(t), Registerer: reg, Retention: 7 * 24 * time.Hour})
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { r.Run(rctx, time.Second); close(done) }()
		deadline := time.Now().Add(20 * time.Second)
		var left []string
		for {
			left = nil
			db.Model(&models.Job{}).Where("kind = ?", "k").Order("business_key").Pluck("business_key", &left)
			if len(left) == 3 || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		cancel()
		<-done
		if fmt.Sprint(left) != "[4 5 6]" {
			t.Fatalf("jobs left %v, want [4 5 6]", left)
		}
		if n := testutil.ToFloat64(r.metrics.pruned.WithLabelValues("jobs")); n != 4 {
			t.Fatalf("ferry_rows_pruned_total{table=jobs} = %v, want 4", n)
		}
	})
}

// An idle runner asks the database once per poll interval, whatever the
// number of kinds it runs, and that poll still finds work no Wake
// announced: a job another replica enqueued.
func TestIdleRunnerPollsOnceForAllKinds(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		var queries atomic.Int64
		if err := db.Callback().Query().After("gorm:query").Register("test:count_jobs_queries", func(tx *gorm.DB) {
			if tx.Statement.Table == "jobs" {
				queries.Add(1)
			}
		}); err != nil {
			t.Fatal(err)
		}
		q := testenv.Must(NewQueue(QueueConfig{DB: db.DB, Now: time.Now}))
		const poll, kinds = 50 * time.Millisecond, 12
		r := NewRunner(q, RunnerConfig{Lease: 10 * time.Second, Poll: poll, Owner: "idle", Log: testenv.Logger(t)})
		var ran atomic.Int32
		for i := range kinds {
			r.Handle(fmt.Sprintf("kind-%d", i), func(context.Context, *Job) error { ran.Add(1); return nil }, Options{})
		}
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan struct{})
		go func() { r.Run(ctx, time.Second); close(stopped) }()
		defer func() { cancel(); <-stopped }()

		const idle = time.Second
		time.Sleep(idle)
		n := queries.Load()
		t.Logf("%d kinds, idle %s with a %s poll: %d queries of the jobs table", kinds, idle, poll, n)
		if polls := int64(idle/poll) + 2; n > polls {
			t.Fatalf("idle runner made %d queries in %s; one per %s poll is at most %d (a query per kind would be about %d)",
				n, idle, poll, polls, polls*kinds)
		}

		// Another replica's queue: its Enqueue wakes nothing here.
		other := testenv.Must(NewQueue(QueueConfig{DB: db.DB, Now: time.Now}))
		if _, err := other.Enqueue(context.Background(), nil, Spec{Kind: "kind-7", Key: "elsewhere"}); err != nil {
			t.Fatal(err)
		}
		waitState(t, q, "kind-7", "elsewhere", StateDone, 5*time.Second)
		if ran.Load() != 1 {
			t.Fatalf("handlers ran %d times, want 1", ran.Load())
		}
	})
}

// A job runs with its kind as a profile label, so a CPU profile of the
// process (FERRY_PPROF) tells the kinds' work apart.
func TestJobsRunWithTheirKindAsProfileLabel(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		q := testenv.Must(NewQueue(QueueConfig{DB: db.DB, Now: time.Now}))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		r := newRunner(q, t, "w", 10*time.Second)
		labels := make(chan string, 2)
		for _, kind := range []string{"upload.merge", "export"} {
			r.Handle(kind, func(ctx context.Context, j *Job) error {
				v, ok := pprof.Label(ctx, "job")
				labels <- fmt.Sprintf("%s: %q %v", j.Kind, v, ok)
				return nil
			}, Options{})
		}
		go r.Run(ctx, time.Second)
		q.Enqueue(ctx, nil, Spec{Kind: "upload.merge", Key: "a"})
		q.Enqueue(ctx, nil, Spec{Kind: "export", Key: "b"})
		got := map[string]bool{}
		for range 2 {
			select {
			case l := <-labels:
				got[l] = true
			case <-time.After(10 * time.Second):
				t.Fatalf("jobs not run within 10s; labels so far: %v", got)
			}
		}
		for _, want := range []string{`upload.merge: "upload.merge" true`, `export: "export" true`} {
			if !got[want] {
				t.Errorf("handler saw labels %v, want %s", got, want)
			}
		}
	})
}
