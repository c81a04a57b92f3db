package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/models"
)

// States of a job.
const (
	StateQueued  = "queued"
	StateRunning = "running"
	StateDone    = "done"
	StateFailed  = "failed"
)

// ErrLeaseLost means the job was claimed by someone else since this worker
// claimed it; whatever the worker was about to record must be dropped.
var ErrLeaseLost = errors.New("jobs: lease lost")

// Queue enqueues jobs and owns the SQL every runner shares.
type Queue struct {
	db  *gorm.DB
	now func() time.Time

	mu   sync.Mutex
	wake map[string]chan struct{}
}

// QueueConfig configures a Queue.
type QueueConfig struct {
	DB *gorm.DB // required
	// Now is the clock; nil means time.Now. Every replica's clock should
	// be NTP-synchronised, since leases are compared across them.
	Now func() time.Time
}

// NewQueue returns a queue over c.DB.
func NewQueue(c QueueConfig) (*Queue, error) {
	if c.DB == nil {
		return nil, errors.New("jobs: QueueConfig.DB is required")
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return &Queue{db: c.DB, now: c.Now, wake: map[string]chan struct{}{}}, nil
}

// Spec describes a job to enqueue.
type Spec struct {
	Kind string
	// Key identifies the work within its kind ("upload id", "export id").
	// Enqueueing an existing (Kind, Key) does nothing.
	Key string
	// Payload is marshalled to JSON; nil means {}.
	Payload any
	// RunAt delays the first attempt; zero means now.
	RunAt time.Time
	// MaxAttempts overrides the runner's default for this kind when > 0.
	MaxAttempts int
}

// Enqueue inserts the job unless (Kind, Key) already exists, and reports
// whether it inserted. Pass a transaction as db to make the job part of a
// larger change; then call Wake after the commit. With db == nil the
// queue's own database is used and local runners are woken.
func (q *Queue) Enqueue(ctx context.Context, db *gorm.DB, s Spec) (bool, error) {
	if s.Kind == "" || s.Key == "" {
		return false, errors.New("jobs: kind and key are required")
	}
	payload := []byte("{}")
	if s.Payload != nil {
		var err error
		if payload, err = json.Marshal(s.Payload); err != nil {
			return false, fmt.Errorf("jobs: payload: %w", err)
		}
	}
	now := models.Time(q.now())
	runAt := now
	if !s.RunAt.IsZero() {
		runAt = models.Time(s.RunAt)
	}
	own := db == nil
	if own {
		db = q.db
	}
	// Raw SQL because the two engines spell "insert unless present"
	// differently, and GORM's portable form adds RETURNING on MariaDB,
	// which makes RowsAffected count the duplicate as inserted.
	onConflict := "ON CONFLICT (kind, business_key) DO NOTHING"
	if models.Dialect(db) == models.MySQL {
		onConflict = "ON DUPLICATE KEY UPDATE id = id"
	}
	res := db.WithContext(ctx).Exec(`INSERT INTO jobs
		(kind, business_key, payload, state, attempts, max_attempts, run_at, fence, created_at, updated_at)
		VALUES (?, ?, ?, ?, 0, ?, ?, 0, ?, ?) `+onConflict,
		s.Kind, s.Key, string(payload), StateQueued, s.MaxAttempts, runAt, now, now)
	if res.Error != nil {
		return false, fmt.Errorf("jobs: enqueue %s/%s: %w", s.Kind, s.Key, res.Error)
	}
	if own {
		q.Wake(s.Kind)
	}
	return res.RowsAffected == 1, nil
}

// Wake tells local runners of kind that work may be waiting. It never blocks.
func (q *Queue) Wake(kind string) {
	select {
	case q.wakeChan(kind) <- struct{}{}:
	default:
	}
}

// Woken returns the channel Wake(name) signals, for a loop of this
// process that is not a job runner (the webhook dispatcher) but wants the
// same prompt wake-ups. Each Wake is received by one listener.
func (q *Queue) Woken(name string) <-chan struct{} { return q.wakeChan(name) }

func (q *Queue) wakeChan(kind string) chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	ch, ok := q.wake[kind]
	if !ok {
		ch = make(chan struct{}, 1)
		q.wake[kind] = ch
	}
	return ch
}

// Again puts a finished (done or failed) job back in the queue with a fresh
// attempt budget, inside db when it is a transaction, for work that must
// run once more under the same key (an upload completed a second time). A
// queued or running job is left alone. It reports whether it changed the
// job; call Wake after the commit.
func (q *Queue) Again(ctx context.Context, db *gorm.DB, kind, key string) (bool, error) {
	if db == nil {
		db = q.db
	}
	now := models.Time(q.now())
	res := db.WithContext(ctx).Model(&models.Job{}).
		Where("kind = ? AND business_key = ? AND state IN ?", kind, key, []string{StateDone, StateFailed}).
		Updates(map[string]any{"state": StateQueued, "attempts": 0, "outage_waits": 0, "run_at": now,
			"updated_at": now, "finished_at": nil, "last_error": nil})
	return res.RowsAffected == 1, res.Error
}

// Prune deletes jobs that finished (done or failed) longer ago than
// retention and returns how many. A job's unique key is free again once
// its row is gone, which is what a long-finished job needs anyway.
func (q *Queue) Prune(ctx context.Context, retention time.Duration) (int64, error) {
	cutoff := models.Time(q.now().Add(-retention))
	n, err := models.DeleteInBatches[int64](ctx, q.db, &models.Job{}, "id", "state IN ? AND finished_at < ?",
		[]string{StateDone, StateFailed}, cutoff)
	if err != nil {
		return n, fmt.Errorf("jobs: prune: %w", err)
	}
	return n, nil
}

// Get returns the job (kind, key), or gorm.ErrRecordNotFound.
func (q *Queue) Get(ctx context.Context, kind, key string) (*models.Job, error) {
	var j models.Job
	err := q.db.WithContext(ctx).Where("kind = ? AND business_key = ?", kind, key).Take(&j).Error
	if err != nil {
		return nil, err
	}
	return &j, nil
}

// Retry puts a failed job back in the queue with a fresh attempt budget
// (for operators and admin "redeliver" actions). It only touches failed
// jobs and reports whether it did.
func (q *Queue) Retry(ctx context.Context, kind, key string) (bool, error) {
	now := models.Time(q.now())
	res := q.db.WithContext(ctx).Model(&models.Job{}).
		Where("kind = ? AND business_key = ? AND state = ?", kind, key, StateFailed).
		Updates(map[string]any{"state": StateQueued, "attempts": 0, "run_at": now, "updated_at": now, "finished_at": nil})
	if res.Error != nil {
		return false, res.Error
	}
	if res.RowsAffected == 1 {
		q.Wake(kind)
	}
	return res.RowsAffected == 1, nil
}

// claim takes up to n due jobs of kind for owner. A job is due when it is
// queued and its time has come, or running with a lapsed lease (its worker
// died). Each candidate is taken with a conditional UPDATE on the fence it
// was read with, so of several racing workers exactly one wins each job.
func (q *Queue) claim(ctx context.Context, kind, owner string, n int, lease time.Duration) ([]*Job, error) {
	now := models.Time(q.now())
	due := "kind = ? AND " + dueWhere
	args := []any{kind, StateQueued, now, StateRunning, now}

	var cands []struct {
		ID    int64
		Fence int64
	}
	if err := q.db.WithContext(ctx).Model(&models.Job{}).Select("id, fence").
		Where(due, args...).Order("run_at, id").Limit(n).Find(&cands).Error; err != nil {
		return nil, fmt.Errorf("jobs: claim %s: %w", kind, err)
	}
	var out []*Job
	for _, c := range cands {
		until := now.Add(lease)
		res := q.db.WithContext(ctx).Model(&models.Job{}).
			Where("id = ? AND fence = ? AND "+due, append([]any{c.ID, c.Fence}, args...)...).
			Updates(map[string]any{
				"state":       StateRunning,
				"lease_owner": owner,
				"lease_until": until,
				"fence":       gorm.Expr("fence + 1"),
				"attempts":    gorm.Expr("attempts + 1"),
				"updated_at":  now,
			})
		if res.Error != nil {
			return out, fmt.Errorf("jobs: claim %s/%d: %w", kind, c.ID, res.Error)
		}
		if res.RowsAffected != 1 {
			continue // another worker won it
		}
		var row models.Job
		if err := q.db.WithContext(ctx).Take(&row, c.ID).Error; err != nil {
			return out, fmt.Errorf("jobs: load %d: %w", c.ID, err)
		}
		if row.Fence != c.Fence+1 || row.LeaseOwner == nil || *row.LeaseOwner != owner {
			continue // claimed and re-claimed between our UPDATE and SELECT
		}
		out = append(out, &Job{
			ID: row.ID, Kind: row.Kind, Key: row.BusinessKey, Payload: []byte(row.Payload),
			Attempt: row.Attempts, MaxAttempts: row.MaxAttempts, OutageWaits: row.OutageWaits, fence: row.Fence, q: q,
		})
	}
	return out, nil
}

// dueWhere is the condition of a due job; its arguments are StateQueued,
// now, StateRunning, now.
const dueWhere = "((state = ? AND run_at <= ?) OR (state = ? AND lease_until < ?))"

// dueKinds returns which of kinds have a job due, in one query whatever
// their number: what an idle runner asks the database each poll.
func (q *Queue) dueKinds(ctx context.Context, kinds []string) ([]string, error) {
	now := models.Time(q.now())
	var out []string
	err := q.db.WithContext(ctx).Model(&models.Job{}).Distinct("kind").
		Where("kind IN ? AND "+dueWhere, kinds, StateQueued, now, StateRunning, now).
		Pluck("kind", &out).Error
	if err != nil {
		return nil, fmt.Errorf("jobs: poll: %w", err)
	}
	return out, nil
}

// fenced returns a query scoped to the job as claimed: it matches only while
// the job is still running under the same fence.
func (q *Queue) fenced(db *gorm.DB, id, fence int64) *gorm.DB {
	return db.Model(&models.Job{}).Where("id = ? AND fence = ? AND state = ?", id, fence, StateRunning)
}

func (q *Queue) update(ctx context.Context, db *gorm.DB, id, fence int64, fields map[string]any) error {
	if db == nil {
		db = q.db
	}
	fields["updated_at"] = models.Time(q.now())
	res := q.fenced(db.WithContext(ctx), id, fence).Updates(fields)
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected != 1 {
		return ErrLeaseLost
	}
	return nil
}

func (q *Queue) complete(ctx context.Context, db *gorm.DB, id, fence int64) error {
	now := models.Time(q.now())
	return q.update(ctx, db, id, fence, map[string]any{
		"state": StateDone, "finished_at": now, "lease_owner": nil, "lease_until": nil, "last_error": nil,
	})
}

func (q *Queue) fail(ctx context.Context, id, fence int64, reason string) error {
	now := models.Time(q.now())
	return q.update(ctx, nil, id, fence, map[string]any{
		"state": StateFailed, "finished_at": now, "lease_owner": nil, "lease_until": nil, "last_error": reason,
	})
}

func (q *Queue) reschedule(ctx context.Context, id, fence int64, at time.Time, reason string) error {
	return q.update(ctx, nil, id, fence, map[string]any{
		"state": StateQueued, "run_at": models.Time(at), "lease_owner": nil, "lease_until": nil, "last_error": reason,
	})
}

// wait reschedules a job whose run found a store unreachable: the attempt
// the claim took is given back, and the outage is counted instead.
func (q *Queue) wait(ctx context.Context, id, fence int64, at time.Time, reason string) error {
	return q.update(ctx, nil, id, fence, map[string]any{
		"state": StateQueued, "run_at": models.Time(at), "lease_owner": nil, "lease_until": nil, "last_error": reason,
		"attempts": gorm.Expr("attempts - 1"), "outage_waits": gorm.Expr("outage_waits + 1"),
	})
}

// release hands a job back untouched (shutdown): the attempt it used is
// returned, and it is due at once for any other worker.
func (q *Queue) release(ctx context.Context, id, fence int64) error {
	return q.update(ctx, nil, id, fence, map[string]any{
		"state": StateQueued, "run_at": models.Time(q.now()), "lease_owner": nil, "lease_until": nil,
		"attempts": gorm.Expr("attempts - 1"),
	})
}

func (q *Queue) extend(ctx context.Context, id, fence int64, lease time.Duration) error {
	return q.update(ctx, nil, id, fence, map[string]any{"lease_until": models.Time(q.now().Add(lease))})
}

// Job is a claimed job as its handler sees it.
type Job struct {
	ID          int64
	Kind        string
	Key         string
	Payload     []byte
	Attempt     int // 1 on the first run
	MaxAttempts int
	OutageWaits int // earlier runs that found a store unreachable (not counted in Attempt)

	fence    int64
	q        *Queue
	mu       sync.Mutex
	finished bool
}

// Decode unmarshals the payload into v.
func (j *Job) Decode(v any) error { return json.Unmarshal(j.Payload, v) }

// Finish marks the job done inside tx, fenced on this worker's claim. Call it
// in the same transaction as the state change the job produced: if the lease
// was lost, Finish returns ErrLeaseLost and the whole transaction must roll
// back, so a stale worker's result never lands.
func (j *Job) Finish(ctx context.Context, tx *gorm.DB) error {
	if err := j.q.complete(ctx, tx, j.ID, j.fence); err != nil {
		return err
	}
	j.mu.Lock()
	j.finished = true
	j.mu.Unlock()
	return nil
}

// Check verifies inside tx that this worker still holds the job, and
// holds the row until tx ends so nobody can claim it meanwhile.
func (j *Job) Check(ctx context.Context, tx *gorm.DB) error {
	return j.q.update(ctx, tx, j.ID, j.fence, map[string]any{})
}

func (j *Job) isFinished() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.finished
}
