package export

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"

	"github.com/ferry-io/ferry/chat"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/notify"
)

// gate stops one export's first run at its first assembly step, lets the
// test act, and then fails that run so the job retries.
type gate struct {
	id       atomic.Value // the export id to stop
	once     sync.Once
	stopped  chan struct{}
	proceed  chan struct{}
	mu       sync.Mutex
	writes   map[string][]int // export id → shards written, in order
	mutating atomic.Bool
	calls    atomic.Int64
}

func newGate() *gate {
	return &gate{stopped: make(chan struct{}), proceed: make(chan struct{}), writes: map[string][]int{}}
}

func (g *gate) hooks() Hooks {
	return Hooks{
		ShardWritten: func(id string, n int) {
			g.mu.Lock()
			g.writes[id] = append(g.writes[id], n)
			g.mu.Unlock()
		},
		Assembled: func(id string, n int) error {
			if g.id.Load() != id {
				return nil
			}
			first := false
			g.once.Do(func() { first = true })
			if !first {
				return nil
			}
			close(g.stopped)
			<-g.proceed
			return errors.New("test: run stopped before the artifact was complete")
		},
		MutateShard: func(id string, n int, b []byte) []byte {
			if !g.mutating.Load() {
				return b
			}
			return fmt.Appendf(append([]byte(nil), b...), "{\"generation\":%d}\n", g.calls.Add(1))
		},
	}
}

// seq is from, from+1, … up to to (not included).
func seq(from, to int) []int {
	var s []int
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

func (g *gate) written(id string) []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.writes[id])
}

func (g *gate) await(t *testing.T) {
	t.Helper()
	select {
	case <-g.stopped:
	case <-time.After(60 * time.Second):
		t.Fatal("the export never reached assembly")
	}
}

func seedUsers(t *testing.T, e *env, n, messages int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		ids = append(ids, e.user(fmt.Sprintf("u%d", i), false).ID)
	}
	if _, err := chat.Seed(context.Background(), e.db.DB, chat.SeedOptions{Users: ids, Conversations: 2, Messages: messages, Seed: 11}); err != nil {
		t.Fatal(err)
	}
	return ids
}

// gatedRun is two exports of the same history: victim, whose first run
// a gate stopped at its first assembly step (its shards written so far
// are in the bucket), and ref, an undisturbed one.
type gatedRun struct {
	t           *testing.T
	env         *env
	gate        *gate
	ref, victim View
}

// forEachGatedRun runs f on a gatedRun of each of makers on each
// database: a history of 13 shards of 5 messages, the victim's first run
// stopped at the gate.
func forEachGatedRun(t *testing.T, f func(t *testing.T, db *testenv.DB, r gatedRun)) {
	forEachMaker(t, func(t *testing.T, opts []Option) {
		testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) { f(t, db, stopFirstRun(t, db, opts)) })
	})
}

// stopFirstRun sets up one gatedRun of forEachGatedRun's.
func stopFirstRun(t *testing.T, db *testenv.DB, opts []Option) gatedRun {
	t.Helper()
	g := newGate()
	e := newEnv(t, db, nil, Config{ShardSize: 5}, slices.Concat(opts, []Option{WithHooks(g.hooks())})...)
	users := seedUsers(t, e, 3, 60)
	owner := chat.Actor{ID: users[0]}
	r := gatedRun{t: t, env: e, gate: g, ref: e.create(owner, "reference", "all"), victim: e.create(owner, "victim", "all")}
	g.id.Store(r.victim.ID)
	e.start()
	g.await(t)
	return r
}

// finish lets the victim's first run fail at the gate and waits for both
// exports: the victim must be done after a second run, with the
// undisturbed export's artifact.
func (r gatedRun) finish() models.Export {
	r.t.Helper()
	close(r.gate.proceed)
	ref := r.env.wait(r.ref.ID, 60*time.Second, StateDone, StateFailed)
	victim := r.env.wait(r.victim.ID, 60*time.Second, StateDone, StateFailed)
	if victim.State != StateDone || victim.Runs != 2 {
		r.t.Fatalf("victim %s after %d runs (%v)", victim.State, victim.Runs, victim.Error)
	}
	if *victim.SHA256 != *ref.SHA256 {
		r.t.Fatalf("artifact %s, undisturbed export %s", *victim.SHA256, *ref.SHA256)
	}
	return victim
}

// makers are the two ways a run makes shards: their generation tasks
// render and check them ahead, or, for shards too large for that (here
// every one, under a tiny budget), the producer does in its turn.
var makers = []struct {
	name string
	opts []Option
}{
	{"ahead", nil},
	{"in turn", []Option{withStageBytes(4 << 10)}},
}

// forEachMaker runs f as a subtest once with each of makers.
func forEachMaker(t *testing.T, f func(t *testing.T, opts []Option)) {
	for _, m := range makers {
		t.Run(m.name, func(t *testing.T) { f(t, m.opts) })
	}
}

// X3: shards truncated, appended to or deleted in the bucket between runs
// are rewritten to their recorded bytes; the others are verified and
// skipped; the artifact equals an undisturbed export's.
func TestAlteredShardsAreRewritten(t *testing.T) {
	forEachGatedRun(t, func(t *testing.T, db *testenv.DB, r gatedRun) {
		e, g, victim := r.env, r.gate, r.victim
		bucket := e.store.Bucket()
		s0 := object(t, bucket, shardKey(victim.ID, 0))
		putObject(t, bucket, shardKey(victim.ID, 0), s0[:len(s0)/2])
		s1 := object(t, bucket, shardKey(victim.ID, 1))
		putObject(t, bucket, shardKey(victim.ID, 1), append(s1, "{\"garbage\":true}\n"...))
		if err := e.store.Delete(context.Background(), shardKey(victim.ID, 2)); err != nil {
			t.Fatal(err)
		}

		xv := r.finish()
		// The first run wrote the shards that reached the stages before
		// its first assembly: all 13 when they are made ahead (they fit
		// one window), those that fit the budget when they are made in
		// turn. The second wrote 0, 1 and 2 again and then the rest.
		count := *xv.ShardCount
		w := g.written(victim.ID)
		k := slices.Index(w[1:], 0) + 1
		want := slices.Concat(seq(0, k), []int{0, 1, 2}, seq(k, count))
		if k < 3 || !slices.Equal(w, want) {
			t.Fatalf("shard writes %v; want the first run's in order, then 0, 1, 2 again and the rest of %d", w, count)
		}
		for n := range 3 {
			var sh models.ExportShard
			db.Where("export_id = ? AND n = ?", victim.ID, n).Take(&sh)
			sum := sha256.Sum256(shardJSON(t, object(t, bucket, shardKey(victim.ID, n))))
			if hex.EncodeToString(sum[:]) != *sh.SHA256 {
				t.Fatalf("shard %d in the bucket does not match its record after the rerun", n)
			}
		}
	})
}

// shardJSON is the JSON a shard object holds (see encodeShard).
func shardJSON(t *testing.T, obj []byte) []byte {
	t.Helper()
	if len(obj) == 0 {
		t.Fatal("shard object missing or empty") // even an empty shard has the stream identifier
	}
	b, err := io.ReadAll(s2.NewReader(bytes.NewReader(obj)))
	if err != nil {
		t.Fatalf("shard object of %d bytes is not Snappy-framed: %v", len(obj), err)
	}
	return b
}

// Shard objects are their JSON in Snappy's framing format, a fraction of
// its size, and the JSON hashes to the record.
func TestShardObjectsAreSnappyFramed(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil, Config{ShardSize: 50})
		users := seedUsers(t, e, 3, 300)
		v := e.create(chat.Actor{ID: users[0]}, "k", "all")
		e.start()
		x := e.wait(v.ID, 60*time.Second, StateDone)
		var shards []models.ExportShard
		db.Where("export_id = ?", v.ID).Order("n").Find(&shards)
		if len(shards) != *x.ShardCount || len(shards) < 4 {
			t.Fatalf("%d shard records for %d shards", len(shards), *x.ShardCount)
		}
		stored, json := 0, 0
		for _, sh := range shards {
			obj := object(t, e.store.Bucket(), shardKey(v.ID, sh.N))
			b := shardJSON(t, obj)
			sum := sha256.Sum256(b)
			if hex.EncodeToString(sum[:]) != *sh.SHA256 || int64(len(b)) != *sh.Bytes {
				t.Fatalf("shard %d holds %d bytes of JSON with SHA-256 %x; recorded %d, %s", sh.N, len(b), sum, *sh.Bytes, *sh.SHA256)
			}
			stored, json = stored+len(obj), json+len(b)
		}
		if 3*stored > json {
			t.Fatalf("shards stored in %d bytes for %d of JSON", stored, json)
		}
		t.Logf("%d shards stored in %d bytes for %d of JSON", len(shards), stored, json)
	})
}

// X3 across an upgrade: shard objects stored as plain JSON, as versions
// before encodeShard stored them, are verified and kept by the rerun
// rather than written again, and the artifact equals an undisturbed
// export's.
func TestPlainShardsAreKept(t *testing.T) {
	forEachGatedRun(t, func(t *testing.T, db *testenv.DB, r gatedRun) {
		e, g, victim := r.env, r.gate, r.victim
		bucket := e.store.Bucket()
		plain := map[int][]byte{}
		for n := range 3 {
			plain[n] = shardJSON(t, object(t, bucket, shardKey(victim.ID, n)))
			putObject(t, bucket, shardKey(victim.ID, n), plain[n])
		}

		xv := r.finish()
		// Each shard written once: the first run's, then the rest.
		if w := g.written(victim.ID); !slices.Equal(w, seq(0, *xv.ShardCount)) {
			t.Fatalf("shard writes %v; want each of the %d once, in order", w, *xv.ShardCount)
		}
		for n, b := range plain {
			if !bytes.Equal(object(t, bucket, shardKey(victim.ID, n)), b) {
				t.Fatalf("shard %d's plain object was replaced", n)
			}
		}
	})
}

// X3: a generator that does not reproduce its bytes is caught the first
// time a shard must be regenerated, and the export fails for good with
// export.failed in the outbox.
func TestNondeterministicGeneratorFails(t *testing.T) {
	forEachMaker(t, nondeterministicGeneratorFails)
}

func nondeterministicGeneratorFails(t *testing.T, opts []Option) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		g := newGate()
		g.mutating.Store(true)
		e := newEnv(t, db, nil, Config{ShardSize: 5}, slices.Concat(opts, []Option{WithHooks(g.hooks())})...)
		users := seedUsers(t, e, 3, 30)
		x := e.create(chat.Actor{ID: users[0]}, "k", "all")
		g.id.Store(x.ID)
		e.start()
		g.await(t)
		// Shard 1 must now be regenerated, and will come out different.
		if err := e.store.Delete(context.Background(), shardKey(x.ID, 1)); err != nil {
			t.Fatal(err)
		}
		close(g.proceed)

		done := e.wait(x.ID, 60*time.Second, StateDone, StateFailed)
		if done.State != StateFailed || done.Error == nil || !strings.Contains(*done.Error, "shard 1 regenerated to different bytes") {
			t.Fatalf("state %s, error %v; want failed for non-determinism", done.State, done.Error)
		}
		waitJob(t, e, x.ID, jobs.StateFailed) // the runner records it just after the handler returns
		j, _ := e.queue.Get(context.Background(), JobKind, x.ID)
		if j.State != jobs.StateFailed || j.Attempts != 2 {
			t.Fatalf("job %s after %d attempts; want failed at once on the second", j.State, j.Attempts)
		}
		var ev models.OutboxEvent
		if err := db.Where("subject = ? AND type = ?", x.ID, notify.ExportFailed).Take(&ev).Error; err != nil {
			t.Fatalf("no export.failed outbox row: %v", err)
		}
		if object(t, e.store.Bucket(), artifactKey(x.ID)) != nil {
			t.Fatal("a failed export left an artifact")
		}
		v, _ := e.svc.Get(context.Background(), users[0], x.ID)
		if v.DownloadURL != "" || !strings.Contains(v.Error, "not deterministic") {
			t.Fatalf("view of the failed export: %+v", v)
		}
	})
}

// Revoking works for the owner and admins, in any state: downloads would
// get 410 (Artifact reports the state), the objects go, and a run that was
// under way does not bring the export back.
func TestRevoke(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		var midRun atomic.Value
		var e *env
		e = newEnv(t, db, nil, Config{ShardSize: 2}, WithHooks(Hooks{AfterShard: func(id string, n int) error {
			if midRun.Load() == id && n == 0 {
				_, err := e.svc.Revoke(context.Background(), "", id)
				return err
			}
			return nil
		}}))
		ctx := context.Background()
		alice, bob := e.user("alice", false), e.user("bob", false)
		c, _ := e.chat.CreateConversation(ctx, alice, "c")
		for i := range 5 {
			if _, err := e.chat.Post(ctx, alice, c.ID, fmt.Sprintf("m%d", i), nil); err != nil {
				t.Fatal(err)
			}
		}
		bucket := e.store.Bucket()

		queued := e.create(alice, "queued", "all")
		if v, err := e.svc.Revoke(ctx, alice.ID, queued.ID); err != nil || v.State != StateRevoked {
			t.Fatalf("revoke queued: %+v %v", v, err)
		}
		mid := e.create(alice, "mid-run", "all")
		midRun.Store(mid.ID)
		done := e.create(alice, "done", "all")
		byAdmin := e.create(alice, "admin", "all")
		e.start()
		for _, id := range []string{done.ID, byAdmin.ID} {
			e.wait(id, 30*time.Second, StateDone)
		}
		for _, id := range []string{queued.ID, mid.ID} {
			waitJob(t, e, id, jobs.StateDone)
		}

		if _, err := e.svc.Revoke(ctx, bob.ID, done.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("bob revoking alice's export: %v", err)
		}
		if len(keysUnder(t, bucket, prefix(done.ID))) == 0 {
			t.Fatal("a done export has no objects")
		}
		for i, tc := range []struct{ owner, id string }{{alice.ID, done.ID}, {alice.ID, done.ID}, {"", byAdmin.ID}} {
			v, err := e.svc.Revoke(ctx, tc.owner, tc.id)
			if err != nil || v.State != StateRevoked || v.DownloadURL != "" {
				t.Fatalf("revoke #%d: %+v %v", i, v, err)
			}
		}
		for _, id := range []string{queued.ID, mid.ID, done.ID, byAdmin.ID} {
			a, err := e.svc.Artifact(ctx, id)
			if err != nil || a.State != StateRevoked || a.Key != "" {
				t.Fatalf("artifact of %s: %+v %v", id, a, err)
			}
			if keys := keysUnder(t, bucket, prefix(id)); len(keys) != 0 {
				t.Fatalf("revoked export %s left %v", id, keys)
			}
		}
		var completed int64
		db.Model(&models.OutboxEvent{}).Where("subject = ? AND type = ?", mid.ID, notify.ExportCompleted).Count(&completed)
		if completed != 0 {
			t.Fatal("an export revoked mid-run was announced as completed")
		}
	})
}

func waitJob(t *testing.T, e *env, id, state string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		j, err := e.queue.Get(context.Background(), JobKind, id)
		if err == nil && j.State == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: want %s, have %+v (%v)", id, state, j, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// clock is a settable test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// Retention: after it, a done export is expired and its objects deleted;
// an export whose job ran out of attempts without the export being marked
// is failed (with its outbox row), and purged after retention too.
func TestSweep(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		clk := &clock{now: time.Now()}
		e := newEnv(t, db, nil, Config{Retention: time.Hour, Now: clk.Now})
		ctx := context.Background()
		alice := e.user("alice", false)
		c, _ := e.chat.CreateConversation(ctx, alice, "c")
		e.chat.Post(ctx, alice, c.ID, "hello", nil)
		x := e.create(alice, "x", "all")
		stop := e.start()
		e.wait(x.ID, 30*time.Second, StateDone)
		stop()
		bucket := e.store.Bucket()

		stuck := e.create(alice, "stuck", "all")
		db.Model(&models.Job{}).Where("kind = ? AND business_key = ?", JobKind, stuck.ID).Update("state", jobs.StateFailed)

		if err := e.svc.SweepNow(ctx); err != nil {
			t.Fatal(err)
		}
		if v, _ := e.svc.Get(ctx, alice.ID, x.ID); v.State != StateDone || v.DownloadURL == "" {
			t.Fatalf("before retention: %+v", v)
		}
		f := e.wait(stuck.ID, time.Second, StateFailed)
		var failedEvents int64
		db.Model(&models.OutboxEvent{}).Where("subject = ? AND type = ?", stuck.ID, notify.ExportFailed).Count(&failedEvents)
		if failedEvents != 1 || f.Error == nil {
			t.Fatalf("stuck export: %d export.failed rows, error %v", failedEvents, f.Error)
		}

		clk.Advance(61 * time.Minute)
		if err := e.svc.SweepNow(ctx); err != nil {
			t.Fatal(err)
		}
		v, _ := e.svc.Get(ctx, alice.ID, x.ID)
		if v.State != StateExpired || v.DownloadURL != "" {
			t.Fatalf("after retention: %+v", v)
		}
		if keys := keysUnder(t, bucket, prefix(x.ID)); len(keys) != 0 {
			t.Fatalf("expired export left %v", keys)
		}
		for _, id := range []string{x.ID, stuck.ID} {
			var got models.Export
			db.Where("id = ?", id).Take(&got)
			if got.PurgedAt == nil {
				t.Fatalf("export %s (%s) not marked purged", id, got.State)
			}
		}
		if err := e.svc.SweepNow(ctx); err != nil { // nothing left to do
			t.Fatal(err)
		}
		if a, _ := e.svc.Artifact(ctx, x.ID); a.State != StateExpired || a.Key != "" {
			t.Fatalf("artifact after expiry: %+v", a)
		}
	})
}
