package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/models"
)

// Handler does one job. Returning nil finishes it (unless the handler
// already called Job.Finish); returning an error retries it with backoff, or
// fails it for good after MaxAttempts or when the error is Permanent.
type Handler func(ctx context.Context, j *Job) error

// Options tune one kind of job.
type Options struct {
	// Concurrency is how many jobs of this kind one runner runs at once.
	Concurrency int
	// MaxAttempts is the default attempt budget for jobs enqueued without
	// one. A lease that lapses (a crashed worker) uses an attempt too.
	MaxAttempts int
	// Backoff returns the delay before attempt n+1 after attempt n failed.
	Backoff func(attempt int) time.Duration
	// Every, when set, makes the kind periodic: each runner enqueues one job
	// per interval window, and the unique key makes that one job across all
	// replicas.
	Every time.Duration
	// OutageBackoffMax caps the wait between runs that found a store
	// unreachable (default RunnerConfig.OutageBackoffMax), and OutageBudget bounds how many such
	// waits a job takes before they count as attempts (default 1,440: a
	// day of waits at the cap).
	OutageBackoffMax time.Duration
	OutageBudget     int
}

// Exponential returns a backoff of base·2^(n-1), capped at max.
func Exponential(base, max time.Duration) func(int) time.Duration {
	return func(n int) time.Duration {
		d := base
		for i := 1; i < n && d < max; i++ {
			d *= 2
		}
		return min(d, max)
	}
}

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as not worth retrying: the job fails at once.
func Permanent(err error) error { return permanentError{err} }

type unavailableError struct{ err error }

func (e unavailableError) Error() string { return e.err.Error() }
func (e unavailableError) Unwrap() error { return e.err }

// Unavailable marks err as caused by a store the job needs being
// unreachable (S3 refusing connections, hanging, or answering 503; the
// database gone). Errors of kind errkind.Unavailable, which s3store and
// models give outages, count as such without it. Such a run does not use up an attempt: the job waits with
// the outage backoff (2 s doubling to Options.OutageBackoffMax) and tries
// again, for as long as Options.OutageBudget allows in all; an outage of
// minutes therefore fails no job. Past the budget the run counts as an
// ordinary failed attempt.
func Unavailable(err error) error { return unavailableError{err} }

type retryAfterError struct {
	err   error
	delay time.Duration
}

func (e retryAfterError) Error() string { return e.err.Error() }
func (e retryAfterError) Unwrap() error { return e.err }

// RetryAfter asks for the next attempt no sooner than d from now, overriding
// the kind's backoff when d is longer.
func RetryAfter(err error, d time.Duration) error { return retryAfterError{err, d} }

type registration struct {
	kind    string
	handler Handler
	opts    Options
	slots   chan struct{}
}

// Runner claims and runs jobs for the kinds registered with Handle.
type Runner struct {
	q       *Queue
	owner   string
	log     *slog.Logger
	lease   time.Duration
	poll    time.Duration
	kinds   []*registration
	metrics *metrics

	outageMax time.Duration // default OutageBackoffMax

	wg       sync.WaitGroup
	mu       sync.Mutex
	inflight map[int64]inflight
}

type inflight struct {
	job    *Job
	cancel context.CancelCauseFunc
}

// RunnerConfig configures a Runner.
type RunnerConfig struct {
	Lease time.Duration // how long a claim lasts without a heartbeat
	Poll  time.Duration // how often to look for work when nobody wakes us
	Owner string        // this worker's name in lease_owner; default host-pid
	Log   *slog.Logger
	// Registerer receives the queue metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// OutageBackoffMax is the default Options.OutageBackoffMax for kinds
	// that set none (default 1 min).
	OutageBackoffMax time.Duration
	// Retention, when set, makes the runner delete jobs finished (done or
	// failed) longer ago than this, hourly (KindPrune). Unset keeps them.
	Retention time.Duration
}

// KindPrune is the runner's own periodic job that deletes finished jobs
// past RunnerConfig.Retention.
const KindPrune = "jobs.prune"

// NewRunner returns a runner over q.
func NewRunner(q *Queue, cfg RunnerConfig) *Runner {
	if cfg.Owner == "" {
		host, _ := os.Hostname()
		cfg.Owner = host + "-" + strconv.Itoa(os.Getpid()) + "-" + models.NewID("w")[2:10]
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.OutageBackoffMax <= 0 {
		cfg.OutageBackoffMax = time.Minute
	}
	r := &Runner{
		q: q, owner: cfg.Owner, log: cfg.Log, lease: cfg.Lease, poll: cfg.Poll, outageMax: cfg.OutageBackoffMax,
		metrics: newMetrics(cfg.Registerer), inflight: map[int64]inflight{},
	}
	if cfg.Retention > 0 {
		r.Handle(KindPrune, func(ctx context.Context, _ *Job) error {
			n, err := q.Prune(ctx, cfg.Retention)
			r.CountPruned("jobs", n)
			return err
		}, Options{Every: time.Hour, MaxAttempts: 1})
	}
	return r
}

// CountPruned adds n to ferry_rows_pruned_total{table}: every package's
// periodic pruning reports the rows it deleted there, so one metric shows
// that every table stays bounded.
func (r *Runner) CountPruned(table string, n int64) {
	if n > 0 {
		r.metrics.pruned.WithLabelValues(table).Add(float64(n))
	}
}

// Owner is the name this runner writes into lease_owner.
func (r *Runner) Owner() string { return r.owner }

// Handle registers h for kind. Call before Run.
func (r *Runner) Handle(kind string, h Handler, opts Options) {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 1
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 5
	}
	if opts.Backoff == nil {
		opts.Backoff = Exponential(time.Second, 5*time.Minute)
	}
	if opts.OutageBackoffMax <= 0 {
		opts.OutageBackoffMax = r.outageMax
	}
	if opts.OutageBudget <= 0 {
		opts.OutageBudget = 1440
	}
	r.kinds = append(r.kinds, &registration{kind: kind, handler: h, opts: opts, slots: make(chan struct{}, opts.Concurrency)})
}

// Run claims and runs jobs until ctx is done. Then it stops claiming, lets
// running handlers finish for up to drain, cancels the rest and hands their
// jobs back (so another replica picks them up at once instead of waiting
// for the lease), and returns.
func (r *Runner) Run(ctx context.Context, drain time.Duration) {
	// Handlers run on a context detached from ctx: a shutdown must not
	// abort a merge half-way through; it gets the drain period first.
	work, stopWork := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopWork(nil)

	var loops sync.WaitGroup
	loops.Add(1)
	go func() {
		defer loops.Done()
		r.watch(ctx)
	}()
	for _, reg := range r.kinds {
		loops.Add(1)
		go func() {
			defer loops.Done()
			r.loop(ctx, work, reg)
		}()
		if reg.opts.Every > 0 {
			loops.Add(1)
			go func() {
				defer loops.Done()
				r.schedule(ctx, reg)
			}()
		}
	}
	<-ctx.Done()
	loops.Wait()

	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-time.After(drain):
	}
	r.log.Warn("jobs drain timeout; releasing running jobs", "running", r.running())
	stopWork(errShutdown)
	<-done
}

var errShutdown = errors.New("jobs: runner shutting down")

func (r *Runner) running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.inflight)
}

// watch is the runner's fallback for work that no Wake announced: jobs
// enqueued by another replica, retries whose time has come, leases that
// lapsed. Every poll interval, from the start, it asks which kinds have
// a job due and wakes their loops. One query for all kinds: with a loop
// polling for each, an idle replica asked the database a dozen times
// per interval, a steady cost on every replica and in every request's
// latency on SQLite.
func (r *Runner) watch(ctx context.Context) {
	kinds := make([]string, len(r.kinds))
	for i, reg := range r.kinds {
		kinds[i] = reg.kind
	}
	if len(kinds) == 0 {
		return
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		due, err := r.q.dueKinds(ctx, kinds)
		if err != nil && ctx.Err() == nil {
			r.log.Error("jobs poll failed", "err", err)
		}
		for _, kind := range due {
			r.q.Wake(kind)
		}
		timer.Reset(r.poll)
	}
}

// loop claims jobs of one kind whenever it is woken (by Enqueue, a freed
// slot or watch) and a slot is free.
func (r *Runner) loop(ctx, work context.Context, reg *registration) {
	wake := r.q.wakeChan(reg.kind)
	more := time.NewTimer(0)
	more.Stop()
	defer more.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-more.C:
		}
		free := cap(reg.slots) - len(reg.slots)
		if free == 0 {
			continue // the slot that frees wakes the loop
		}
		jobs, err := r.q.claim(ctx, reg.kind, r.owner, free, r.lease)
		if err != nil && ctx.Err() == nil {
			r.log.Error("jobs claim failed", "kind", reg.kind, "err", err)
		}
		for _, j := range jobs {
			reg.slots <- struct{}{}
			r.start(work, reg, j)
		}
		if len(jobs) == free {
			// There may be more: look again as soon as a slot frees.
			more.Reset(10 * time.Millisecond)
		}
	}
}

func (r *Runner) start(work context.Context, reg *registration, j *Job) {
	ctx, cancel := context.WithCancelCause(work)
	r.mu.Lock()
	r.inflight[j.ID] = inflight{job: j, cancel: cancel}
	r.mu.Unlock()
	r.metrics.claimed.WithLabelValues(reg.kind).Inc()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer func() {
			r.mu.Lock()
			delete(r.inflight, j.ID)
			r.mu.Unlock()
			cancel(nil)
			<-reg.slots
			r.q.Wake(reg.kind) // a slot is free
		}()
		// The job's goroutine, and every goroutine its handler starts,
		// carries its kind as a profile label, so a CPU profile of the
		// process (FERRY_PPROF) tells one kind's work from another's and
		// from the requests'.
		pprof.Do(ctx, pprof.Labels("job", reg.kind), func(ctx context.Context) {
			r.run(ctx, cancel, reg, j)
		})
	}()
}

func (r *Runner) run(ctx context.Context, cancel context.CancelCauseFunc, reg *registration, j *Job) {
	log := r.log.With("job_id", j.ID, "kind", j.Kind, "key", j.Key, "attempt", j.Attempt)
	if j.MaxAttempts <= 0 {
		j.MaxAttempts = reg.opts.MaxAttempts
	}
	// bg is for bookkeeping after the handler: it must work even when the
	// handler's context was cancelled.
	bg, stop := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer stop()
	if j.Attempt > j.MaxAttempts {
		// The previous worker died on the last attempt.
		err := r.q.fail(bg, j.ID, j.fence, "lease expired on the last attempt")
		log.Error("job failed: out of attempts", "err", err)
		r.metrics.outcome.WithLabelValues(j.Kind, "failed").Inc()
		return
	}

	hbDone := make(chan struct{})
	go r.heartbeat(ctx, cancel, j, hbDone)

	start := time.Now()
	err := safeCall(ctx, reg.handler, j)
	close(hbDone)
	r.metrics.duration.WithLabelValues(j.Kind).Observe(time.Since(start).Seconds())

	switch cause := context.Cause(ctx); {
	case errors.Is(cause, ErrLeaseLost):
		log.Warn("job lease lost; result dropped", "err", err)
		r.metrics.outcome.WithLabelValues(j.Kind, "lease_lost").Inc()
		return
	case errors.Is(cause, errShutdown):
		rerr := r.q.release(bg, j.ID, j.fence)
		log.Info("job released at shutdown", "err", rerr)
		r.metrics.outcome.WithLabelValues(j.Kind, "released").Inc()
		return
	}

	if err == nil {
		if !j.isFinished() {
			err = r.q.complete(bg, nil, j.ID, j.fence)
		}
		if err == nil {
			log.Debug("job done", "elapsed", time.Since(start))
			r.metrics.outcome.WithLabelValues(j.Kind, "done").Inc()
			return
		}
	}
	if errors.Is(err, ErrLeaseLost) {
		log.Warn("job finished late; result rejected by fence")
		r.metrics.outcome.WithLabelValues(j.Kind, "lease_lost").Inc()
		return
	}

	reason := err.Error()
	var perm permanentError
	var down unavailableError
	if (errors.As(err, &down) || errors.Is(err, errkind.Unavailable)) && !errors.As(err, &perm) && j.OutageWaits < reg.opts.OutageBudget {
		delay := Exponential(2*time.Second, reg.opts.OutageBackoffMax)(j.OutageWaits + 1)
		serr := r.q.wait(bg, j.ID, j.fence, r.q.now().Add(delay), reason)
		log.Warn("job waits for an unreachable store; the attempt is not used up", "err", err, "delay", delay,
			"waits", j.OutageWaits+1, "record_err", serr)
		r.metrics.outcome.WithLabelValues(j.Kind, "outage").Inc()
		return
	}
	if errors.As(err, &perm) || j.Attempt >= j.MaxAttempts {
		ferr := r.q.fail(bg, j.ID, j.fence, reason)
		log.Error("job failed", "err", err, "record_err", ferr)
		r.metrics.outcome.WithLabelValues(j.Kind, "failed").Inc()
		return
	}
	delay := reg.opts.Backoff(j.Attempt)
	var ra retryAfterError
	if errors.As(err, &ra) && ra.delay > delay {
		delay = ra.delay
	}
	serr := r.q.reschedule(bg, j.ID, j.fence, r.q.now().Add(delay), reason)
	log.Warn("job will retry", "err", err, "delay", delay, "record_err", serr)
	r.metrics.outcome.WithLabelValues(j.Kind, "retry").Inc()
}

// safeCall turns a handler panic into an error, so one bad job cannot take
// the process down.
func safeCall(ctx context.Context, h Handler, j *Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return h(ctx, j)
}

// heartbeat extends the lease every third of its length. If the extension
// finds the fence moved on, the job belongs to someone else: cancel the
// handler so it stops spending effort on a result that will be rejected.
func (r *Runner) heartbeat(ctx context.Context, cancel context.CancelCauseFunc, j *Job, done <-chan struct{}) {
	t := time.NewTicker(r.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
			err := r.q.extend(ctx, j.ID, j.fence, r.lease)
			if errors.Is(err, ErrLeaseLost) {
				if !j.isFinished() {
					cancel(ErrLeaseLost)
				}
				return
			}
			if err != nil && ctx.Err() == nil {
				r.log.Warn("job heartbeat failed", "job_id", j.ID, "err", err)
			}
		}
	}
}

// schedule enqueues one job per window for a periodic kind. Every replica
// does this; the window's key makes it one job in total.
func (r *Runner) schedule(ctx context.Context, reg *registration) {
	every := reg.opts.Every
	for {
		window := r.q.now().Truncate(every)
		_, err := r.q.Enqueue(ctx, nil, Spec{Kind: reg.kind, Key: window.UTC().Format(time.RFC3339)})
		if err != nil && ctx.Err() == nil {
			r.log.Warn("jobs schedule failed", "kind", reg.kind, "err", err)
		}
		// Keep the table small: periodic jobs are not looked up later.
		if err == nil {
			cutoff := models.Time(r.q.now().Add(-24*time.Hour - every))
			r.q.db.WithContext(ctx).Where("kind = ? AND state IN ? AND updated_at < ?", reg.kind, []string{StateDone, StateFailed}, cutoff).
				Delete(&models.Job{})
		}
		next := window.Add(every).Sub(r.q.now())
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
	}
}

// Stats counts jobs by kind and state, for metrics and the admin view.
func (q *Queue) Stats(ctx context.Context) (map[[2]string]int64, error) {
	var rows []struct {
		Kind  string
		State string
		N     int64
	}
	err := q.db.WithContext(ctx).Model(&models.Job{}).Select("kind, state, COUNT(*) AS n").Group("kind, state").Scan(&rows).Error
	out := map[[2]string]int64{}
	for _, r := range rows {
		out[[2]string{r.Kind, r.State}] = r.N
	}
	return out, err
}

type metrics struct {
	claimed  *prometheus.CounterVec
	outcome  *prometheus.CounterVec
	duration *prometheus.HistogramVec
	pruned   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		claimed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_jobs_claimed_total", Help: "Jobs claimed by this process, by kind.",
		}, []string{"kind"}),
		outcome: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_jobs_finished_total", Help: "Job runs by kind and outcome (done, retry, outage, failed, lease_lost, released).",
		}, []string{"kind", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ferry_job_duration_seconds", Help: "Handler run time by kind.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10),
		}, []string{"kind"}),
		pruned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_rows_pruned_total", Help: "Rows deleted by periodic pruning after their retention, by table.",
		}, []string{"table"}),
	}
	if reg != nil {
		reg.MustRegister(m.claimed, m.outcome, m.duration, m.pruned)
	}
	return m
}
