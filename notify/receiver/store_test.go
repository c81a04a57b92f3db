package receiver_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/notify/receiver"
)

// testStore is a Store the tests can also ask whether an id was processed.
type testStore interface {
	receiver.Store
	Seen(ctx context.Context, id string) (bool, error)
}

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Now()} }

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// forEachStore runs fn with a MemoryStore, and with an SQLStore on SQLite
// and on MariaDB. open returns a store over the same ids each time it is
// called: the same MemoryStore, or an SQLStore with its own connection
// pool on the same table, as another replica would have. The first clock
// given to the MemoryStore is the one it keeps.
func forEachStore(t *testing.T, fn func(t *testing.T, open func(now func() time.Time) testStore)) {
	t.Run("memory", func(t *testing.T) {
		var m *receiver.MemoryStore
		fn(t, func(now func() time.Time) testStore {
			if m == nil {
				m = receiver.NewMemoryStore(time.Hour, now)
			}
			return m
		})
	})
	for _, dialect := range []string{models.SQLite, models.MySQL} {
		t.Run("sql-"+dialect, func(t *testing.T) {
			db := testenv.NewDB(t, dialect)
			create := receiver.CreateTableSQL
			if dialect == models.MySQL {
				create = receiver.CreateTableMySQL
			}
			for _, stmt := range []string{create, receiver.CreateIndexSQL} {
				if err := db.Exec(stmt).Error; err != nil {
					t.Fatal(err)
				}
			}
			fn(t, func(now func() time.Time) testStore {
				return &receiver.SQLStore{DB: openPool(t, db), Now: now}
			})
		})
	}
}

// openPool opens a connection pool of its own to db.
func openPool(t *testing.T, db *testenv.DB) *sql.DB {
	t.Helper()
	g, err := models.Open(context.Background(), db.Dialect, db.DSN, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	p, err := g.DB()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// countingStore records the calls Handler makes, so tests can show that
// nothing is looked up for a message that failed verification.
type countingStore struct {
	testStore
	claims, dones, releases atomic.Int32
}

func (c *countingStore) Claim(ctx context.Context, id string, lease time.Duration) (string, error) {
	c.claims.Add(1)
	return c.testStore.Claim(ctx, id, lease)
}

func (c *countingStore) Done(ctx context.Context, id, token string) error {
	c.dones.Add(1)
	return c.testStore.Done(ctx, id, token)
}

func (c *countingStore) Release(ctx context.Context, id, token string) error {
	c.releases.Add(1)
	return c.testStore.Release(ctx, id, token)
}

func (c *countingStore) calls() int32 { return c.claims.Load() + c.dones.Load() + c.releases.Load() }

type post struct {
	header http.Header
	body   []byte
}

func send(t *testing.T, url string, p post) int {
	t.Helper()
	code, err := sendWith(http.DefaultClient, url, p)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

func sendWith(c *http.Client, url string, p post) (int, error) {
	req, _ := http.NewRequest("POST", url, bytes.NewReader(p.body))
	for k, v := range p.header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func eventBody(n int) []byte {
	return fmt.Appendf(nil, `{"type":"upload.completed","timestamp":"2026-11-02T10:00:00Z","data":{"n":%d}}`, n)
}

// counter counts Process runs per id.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) add(id string) { c.mu.Lock(); c.n[id]++; c.mu.Unlock() }

func (c *counter) get(id string) int { c.mu.Lock(); defer c.mu.Unlock(); return c.n[id] }

func newCounter() *counter { return &counter{n: map[string]int{}} }

func TestHandler(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(func() time.Time) testStore) {
		secret := newSecret(t)
		v, _ := receiver.NewVerifier(secret)
		store := open(nil)
		cs := &countingStore{testStore: store}
		processed := newCounter()
		var failNext atomic.Bool
		h := &receiver.Handler{Verifier: v, Store: cs, Process: func(ctx context.Context, m *receiver.Message) error {
			if failNext.Swap(false) {
				return errors.New("backend down")
			}
			processed.add(m.ID)
			return nil
		}}
		srv := httptest.NewServer(h)
		defer srv.Close()
		now := time.Now()
		id := "evt_" + testenv.RandomHex(6)

		t.Run("replay is processed once", func(t *testing.T) {
			p := post{signed(t, secret, id, now, eventBody(1)), eventBody(1)}
			for i := range 3 {
				if code := send(t, srv.URL, p); code != 204 {
					t.Fatalf("send #%d: %d, want 204", i+1, code)
				}
			}
			// A retry with a fresh timestamp is a duplicate too.
			later := now.Add(time.Minute)
			if code := send(t, srv.URL, post{signed(t, secret, id, later, eventBody(1)), eventBody(1)}); code != 204 {
				t.Fatalf("retry: %d", code)
			}
			if n := processed.get(id); n != 1 {
				t.Fatalf("processed %d times, want 1", n)
			}
		})

		t.Run("forgeries are rejected before any lookup", func(t *testing.T) {
			calls0 := cs.calls()
			realID := "evt_" + testenv.RandomHex(6)
			forger := newSecret(t)
			forged := []post{
				{signed(t, forger, realID, now, eventBody(2)), eventBody(2)},                     // wrong secret, real id
				{signed(t, secret, realID, now.Add(-6*time.Minute), eventBody(2)), eventBody(2)}, // too old
				{signed(t, secret, realID, now.Add(6*time.Minute), eventBody(2)), eventBody(2)},  // too new
				{signed(t, secret, realID, now, eventBody(2)), eventBody(3)},                     // body swapped
				{func() http.Header {
					h := signed(t, secret, "evt_other", now, eventBody(2))
					h.Set(receiver.HeaderID, realID)
					return h
				}(), eventBody(2)}, // id swapped
			}
			for i, p := range forged {
				if code := send(t, srv.URL, p); code != 401 {
					t.Fatalf("forgery #%d: %d, want 401", i+1, code)
				}
			}
			if n := cs.calls() - calls0; n != 0 {
				t.Fatalf("store consulted %d times for forgeries", n)
			}
			// The real message with that id still goes through.
			if code := send(t, srv.URL, post{signed(t, secret, realID, now, eventBody(2)), eventBody(2)}); code != 204 {
				t.Fatalf("real message after forgeries: %d", code)
			}
			if n := processed.get(realID); n != 1 {
				t.Fatalf("real message processed %d times, want 1", n)
			}
		})

		t.Run("handler error releases the claim", func(t *testing.T) {
			id := "evt_" + testenv.RandomHex(6)
			failNext.Store(true)
			if code := send(t, srv.URL, post{signed(t, secret, id, now, eventBody(4)), eventBody(4)}); code != 500 {
				t.Fatalf("failing handler: %d, want 500", code)
			}
			if seen, err := store.Seen(context.Background(), id); err != nil || seen {
				t.Fatalf("id recorded after a failure: %v %v", seen, err)
			}
			// Released, not left to lapse: the retry is processed at once.
			if code := send(t, srv.URL, post{signed(t, secret, id, now.Add(30*time.Second), eventBody(4)), eventBody(4)}); code != 204 {
				t.Fatalf("retry: %d", code)
			}
			if n := processed.get(id); n != 1 {
				t.Fatalf("retry processed %d times, want 1", n)
			}
			if seen, _ := store.Seen(context.Background(), id); !seen {
				t.Fatal("id not recorded after success")
			}
		})

		t.Run("malformed verified body", func(t *testing.T) {
			b := []byte(`not json`)
			if code := send(t, srv.URL, post{signed(t, secret, "evt_bad", now, b), b}); code != 400 {
				t.Fatalf("malformed: %d, want 400", code)
			}
		})

		t.Run("id over 255 bytes", func(t *testing.T) {
			long := "evt_" + strings.Repeat("x", receiver.MaxIDBytes-3)
			calls0 := cs.calls()
			if code := send(t, srv.URL, post{signed(t, secret, long, now, eventBody(5)), eventBody(5)}); code != 400 {
				t.Fatalf("256-byte id: %d, want 400", code)
			}
			if processed.get(long) != 0 || cs.calls() != calls0 {
				t.Fatal("a 256-byte id reached the store or Process")
			}
			if _, err := store.Claim(context.Background(), long, time.Minute); !errors.Is(err, receiver.ErrIDTooLong) {
				t.Fatalf("store claim of a 256-byte id: %v, want ErrIDTooLong", err)
			}
		})
	})
}

// The store contract: one claim at a time, done is final, a release
// frees the id at once, a lapsed claim is taken over and its first owner
// can no longer mark it done, and ids compare byte for byte.
func TestStoreClaims(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(func() time.Time) testStore) {
		ctx := context.Background()
		clk := newClock()
		s := open(clk.Now)
		other := open(clk.Now) // a second replica on the same ids
		id := "evt_" + testenv.RandomHex(6)

		tok, err := s.Claim(ctx, id, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.Claim(ctx, id, time.Minute); !errors.Is(err, receiver.ErrInProgress) {
			t.Fatalf("second claim: %v, want ErrInProgress", err)
		}
		if seen, _ := other.Seen(ctx, id); seen {
			t.Fatal("a claim counts as processed")
		}
		if err := other.Done(ctx, id, "not-the-token"); !errors.Is(err, receiver.ErrClaimLost) {
			t.Fatalf("done with a wrong token: %v, want ErrClaimLost", err)
		}
		if err := s.Done(ctx, id, tok); err != nil {
			t.Fatal(err)
		}
		if _, err := other.Claim(ctx, id, time.Minute); !errors.Is(err, receiver.ErrProcessed) {
			t.Fatalf("claim after done: %v, want ErrProcessed", err)
		}
		clk.Add(30 * time.Minute) // long past any lease: done stays done
		if _, err := other.Claim(ctx, id, time.Minute); !errors.Is(err, receiver.ErrProcessed) {
			t.Fatalf("claim 30 min after done: %v, want ErrProcessed", err)
		}

		released := "evt_" + testenv.RandomHex(6)
		tok, _ = s.Claim(ctx, released, time.Minute)
		if err := other.Release(ctx, released, "not-the-token"); err != nil {
			t.Fatal(err)
		}
		if _, err := other.Claim(ctx, released, time.Minute); !errors.Is(err, receiver.ErrInProgress) {
			t.Fatalf("a release with a wrong token freed the claim: %v", err)
		}
		if err := s.Release(ctx, released, tok); err != nil {
			t.Fatal(err)
		}
		if _, err := other.Claim(ctx, released, time.Minute); err != nil {
			t.Fatalf("claim after release: %v", err)
		}

		// A processor that dies leaves its claim; once the lease lapses
		// another takes it over, and the dead one's token is void.
		crashed := "evt_" + testenv.RandomHex(6)
		dead, _ := s.Claim(ctx, crashed, time.Minute)
		clk.Add(59 * time.Second)
		if _, err := other.Claim(ctx, crashed, time.Minute); !errors.Is(err, receiver.ErrInProgress) {
			t.Fatalf("claim within the lease: %v, want ErrInProgress", err)
		}
		clk.Add(2 * time.Second)
		alive, err := other.Claim(ctx, crashed, time.Minute)
		if err != nil {
			t.Fatalf("claim after the lease lapsed: %v", err)
		}
		if err := s.Done(ctx, crashed, dead); !errors.Is(err, receiver.ErrClaimLost) {
			t.Fatalf("done by the lapsed owner: %v, want ErrClaimLost", err)
		}
		if err := other.Done(ctx, crashed, alive); err != nil {
			t.Fatal(err)
		}

		// Ids are compared byte for byte: neither trailing spaces nor
		// case make two ids one.
		base := "evt_" + testenv.RandomHex(6)
		for _, v := range []string{base, base + " ", strings.ToUpper(base), base + "\t"} {
			tok, err := s.Claim(ctx, v, time.Minute)
			if err != nil {
				t.Fatalf("claim %q: %v (taken for another id)", v, err)
			}
			if err := s.Done(ctx, v, tok); err != nil {
				t.Fatalf("done %q: %v", v, err)
			}
		}
		long := strings.Repeat("y", receiver.MaxIDBytes)
		if tok, err := s.Claim(ctx, long, time.Minute); err != nil || s.Done(ctx, long, tok) != nil {
			t.Fatalf("255-byte id: %v", err)
		}
		if _, err := s.Claim(ctx, long+"y", time.Minute); !errors.Is(err, receiver.ErrIDTooLong) {
			t.Fatalf("256-byte id: %v, want ErrIDTooLong", err)
		}
	})
}

// On MySQL/MariaDB, a table whose id column pads with spaces (the
// portable CreateTableSQL there, under utf8mb4_bin) would take "evt_x "
// for "evt_x". SQLStore notices and fails loudly instead of dropping the
// second message as a duplicate.
func TestSQLStoreRefusesInexactTable(t *testing.T) {
	db := testenv.NewDB(t, models.MySQL)
	if err := db.Exec(receiver.CreateTableSQL).Error; err != nil {
		t.Fatal(err)
	}
	s := &receiver.SQLStore{DB: openPool(t, db)}
	ctx := context.Background()
	if err := s.Record(ctx, "evt_x"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "evt_x ", time.Minute); !errors.Is(err, receiver.ErrInexactIDs) {
		t.Fatalf("claim of %q beside %q: %v, want ErrInexactIDs", "evt_x ", "evt_x", err)
	}
}

// A sender that gives up on a slow attempt and retries: Process is not
// cancelled by the hang-up, the id is marked done on its own context, and
// every later copy is a duplicate. Before, the cancelled request context
// cut Process short (or failed the record) and each retry ran it again.
func TestSlowProcessAfterSenderTimeout(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(func() time.Time) testStore) {
		secret := newSecret(t)
		v, _ := receiver.NewVerifier(secret)
		processed := newCounter()
		var started atomic.Int32
		h := &receiver.Handler{Verifier: v, Store: open(nil), ProcessTimeout: 10 * time.Second,
			Process: func(ctx context.Context, m *receiver.Message) error {
				started.Add(1)
				select {
				case <-time.After(800 * time.Millisecond):
				case <-ctx.Done():
					return ctx.Err()
				}
				processed.add(m.ID)
				return nil
			}}
		srv := httptest.NewServer(h)
		defer srv.Close()
		sender := &http.Client{Timeout: 200 * time.Millisecond}
		id := "evt_" + testenv.RandomHex(6)

		var codes []int
		deadline := time.Now().Add(15 * time.Second)
		for attempt := 0; attempt < 60 && time.Now().Before(deadline); attempt++ {
			code, err := sendWith(sender, srv.URL, post{signed(t, secret, id, time.Now(), eventBody(1)), eventBody(1)})
			codes = append(codes, code) // 0: timed out
			if err == nil && code == 204 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if codes[0] != 0 || codes[len(codes)-1] != 204 {
			t.Fatalf("answers %v; want a timeout first and 204 at last", codes)
		}
		if n := processed.get(id); n != 1 || started.Load() != 1 {
			t.Fatalf("Process started %d times, finished %d; want 1 and 1 (answers %v)", started.Load(), n, codes)
		}
		// And a copy after the sender's next retry delay is a duplicate.
		if code := send(t, srv.URL, post{signed(t, secret, id, time.Now(), eventBody(1)), eventBody(1)}); code != 204 || processed.get(id) != 1 {
			t.Fatalf("late copy: %d, processed %d times", code, processed.get(id))
		}
		t.Logf("answers: %v", codes)
	})
}

// Two replicas of a backend, each with its own Handler and connection pool
// on one shared store, get the same message at the same moment, many
// times over: it is processed once. Before, both looked the id up, both
// found nothing, and both processed.
func TestReplicasShareOneStore(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(func() time.Time) testStore) {
		secret := newSecret(t)
		v, _ := receiver.NewVerifier(secret)
		processed := newCounter()
		var urls []string
		for range 2 {
			h := &receiver.Handler{Verifier: v, Store: open(nil), Process: func(ctx context.Context, m *receiver.Message) error {
				time.Sleep(200 * time.Millisecond)
				processed.add(m.ID)
				return nil
			}}
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			urls = append(urls, srv.URL)
		}
		for round := range 5 {
			id := fmt.Sprintf("evt_%s_%d", testenv.RandomHex(4), round)
			p := post{signed(t, secret, id, time.Now(), eventBody(round)), eventBody(round)}
			const copies = 8
			start := make(chan struct{})
			codes := make([]int, copies)
			var wg sync.WaitGroup
			for i := range copies {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					codes[i], _ = sendWith(http.DefaultClient, urls[i%2], p)
				}()
			}
			close(start)
			wg.Wait()
			ok := 0
			for _, c := range codes {
				switch c {
				case 204:
					ok++
				case 409: // in progress on the other replica: the sender retries
				default:
					t.Fatalf("round %d: answers %v", round, codes)
				}
			}
			if n := processed.get(id); n != 1 || ok == 0 {
				t.Fatalf("round %d: processed %d times (answers %v), want once", round, n, codes)
			}
			for i := range 2 {
				if code := send(t, urls[i], p); code != 204 {
					t.Fatalf("round %d: retry at replica %d: %d", round, i, code)
				}
			}
			if n := processed.get(id); n != 1 {
				t.Fatalf("round %d: processed %d times after retries", round, n)
			}
		}
	})
}

// A processor that crashed between claim and done holds the id only until
// the lease lapses; the sender's next attempt after that is processed.
func TestCrashedClaimLapses(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func(func() time.Time) testStore) {
		clk := newClock()
		secret := newSecret(t)
		v, _ := receiver.NewVerifier(secret)
		v.Now = clk.Now
		store := open(clk.Now)
		processed := newCounter()
		h := &receiver.Handler{Verifier: v, Store: store, ProcessTimeout: time.Minute,
			Process: func(ctx context.Context, m *receiver.Message) error { processed.add(m.ID); return nil }}
		id := "evt_" + testenv.RandomHex(6)
		// The crashed replica's claim, made as Handler makes it.
		if _, err := store.Claim(context.Background(), id, time.Minute+30*time.Second); err != nil {
			t.Fatal(err)
		}
		attempt := func() error {
			_, err := h.Handle(context.Background(), signed(t, secret, id, clk.Now(), eventBody(1)), eventBody(1))
			return err
		}
		if err := attempt(); !errors.Is(err, receiver.ErrInProgress) {
			t.Fatalf("within the lease: %v, want ErrInProgress", err)
		}
		clk.Add(91 * time.Second)
		if err := attempt(); err != nil || processed.get(id) != 1 {
			t.Fatalf("after the lease: %v, processed %d times", err, processed.get(id))
		}
	})
}

// A panicking Process releases its claim, as a failing one does.
func TestPanicReleasesClaim(t *testing.T) {
	secret := newSecret(t)
	v, _ := receiver.NewVerifier(secret)
	panicked := false
	h := &receiver.Handler{Verifier: v, Store: receiver.NewMemoryStore(0, nil), Process: func(ctx context.Context, m *receiver.Message) error {
		if !panicked {
			panicked = true
			panic("bug")
		}
		return nil
	}}
	hdr := signed(t, secret, "evt_panic", time.Now(), eventBody(1))
	func() {
		defer func() { recover() }()
		h.Handle(context.Background(), hdr, eventBody(1))
	}()
	if out, err := h.Handle(context.Background(), hdr, eventBody(1)); err != nil || out != receiver.Processed {
		t.Fatalf("after a panic: %v %v, want Processed", out, err)
	}
}

// While one copy of an id is being processed, another copy waits its turn
// (409) instead of running beside it.
func TestHandlerSerialisesOneID(t *testing.T) {
	secret := newSecret(t)
	v, _ := receiver.NewVerifier(secret)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	var runs atomic.Int32
	h := &receiver.Handler{Verifier: v, Store: receiver.NewMemoryStore(0, nil), Process: func(ctx context.Context, m *receiver.Message) error {
		runs.Add(1)
		started <- struct{}{}
		<-release
		return nil
	}}
	body := eventBody(0)
	hdr := signed(t, secret, "evt_slow", time.Now(), body)
	first := make(chan error, 1)
	go func() { _, err := h.Handle(context.Background(), hdr, body); first <- err }()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("first copy did not start")
	}
	if _, err := h.Handle(context.Background(), hdr, body); !errors.Is(err, receiver.ErrInProgress) {
		t.Fatalf("concurrent copy: %v, want ErrInProgress", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if out, err := h.Handle(context.Background(), hdr, body); err != nil || out != receiver.Duplicate {
		t.Fatalf("after the first finished: %v %v, want Duplicate", out, err)
	}
	if runs.Load() != 1 {
		t.Fatalf("processed %d times", runs.Load())
	}
}

func TestMemoryStoreForgetsAfterTTL(t *testing.T) {
	clk := newClock()
	s := receiver.NewMemoryStore(time.Hour, clk.Now)
	ctx := context.Background()
	s.Record(ctx, "a")
	if ok, _ := s.Seen(ctx, "a"); !ok {
		t.Fatal("recorded id not seen")
	}
	clk.Add(time.Hour)
	if ok, _ := s.Seen(ctx, "a"); ok {
		t.Fatal("id still seen after its TTL")
	}
	s.Record(ctx, "b") // sweeps
	if s.Len() != 1 {
		t.Fatalf("len = %d after sweep, want 1", s.Len())
	}
}

// A retention shorter than a replay stays valid is raised (MemoryStore)
// or refused (Purge): a replay within the tolerance is a duplicate.
func TestRetentionFloor(t *testing.T) {
	clk := newClock()
	secret := newSecret(t)
	v, _ := receiver.NewVerifier(secret)
	v.Now = clk.Now
	s := receiver.NewMemoryStore(time.Minute, clk.Now)
	if s.TTL() != receiver.MinRetention {
		t.Fatalf("TTL = %s, want it raised to %s", s.TTL(), receiver.MinRetention)
	}
	processed := newCounter()
	h := &receiver.Handler{Verifier: v, Store: s, Process: func(ctx context.Context, m *receiver.Message) error { processed.add(m.ID); return nil }}
	// A message stamped by a sender clock 5 minutes ahead, and its replay
	// 9 minutes later, when it still verifies.
	hdr := signed(t, secret, "evt_replayed", clk.Now().Add(receiver.DefaultTolerance), eventBody(1))
	if _, err := h.Handle(context.Background(), hdr, eventBody(1)); err != nil {
		t.Fatal(err)
	}
	clk.Add(9 * time.Minute)
	if out, err := h.Handle(context.Background(), hdr, eventBody(1)); err != nil || out != receiver.Duplicate || processed.get("evt_replayed") != 1 {
		t.Fatalf("replay: %v %v, processed %d times", out, err, processed.get("evt_replayed"))
	}

	db := testenv.NewDB(t, models.SQLite)
	db.Exec(receiver.CreateTableSQL)
	sqlDB, _ := db.DB.DB()
	if _, err := (&receiver.SQLStore{DB: sqlDB}).Purge(context.Background(), 5*time.Minute); !errors.Is(err, receiver.ErrRetentionTooShort) {
		t.Fatalf("purge after 5 min: %v, want ErrRetentionTooShort", err)
	}
}

func TestSQLStorePurge(t *testing.T) {
	db := testenv.NewDB(t, models.SQLite)
	sqlDB, _ := db.DB.DB()
	sqlDB.Exec(receiver.CreateTableSQL)
	clk := newClock()
	s := &receiver.SQLStore{DB: sqlDB, Now: clk.Now}
	ctx := context.Background()
	for _, id := range []string{"old", "old"} { // twice: the second insert is a no-op
		if err := s.Record(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	s.Claim(ctx, "lapsed", time.Minute)
	s.Claim(ctx, "claimed", 3*time.Hour)
	clk.Add(2 * time.Hour)
	s.Record(ctx, "new")
	if n, err := s.Purge(ctx, time.Hour); err != nil || n != 2 {
		t.Fatalf("purge: %d %v, want 2 (old, lapsed)", n, err)
	}
	if ok, _ := s.Seen(ctx, "old"); ok {
		t.Fatal("purged id still seen")
	}
	if ok, _ := s.Seen(ctx, "new"); !ok {
		t.Fatal("recent id purged")
	}
	if _, err := s.Claim(ctx, "claimed", time.Minute); !errors.Is(err, receiver.ErrInProgress) {
		t.Fatalf("a live claim was purged: %v", err)
	}
	if err := (&receiver.SQLStore{DB: sqlDB, Table: "x; DROP TABLE y"}).Record(ctx, "z"); err == nil {
		t.Fatal("accepted an injected table name")
	}
}
