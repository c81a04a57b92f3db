package receiver_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/notify/receiver"
)

func newSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	rand.Read(b)
	return receiver.SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

// signed builds the headers ferry would send for body at ts.
func signed(t *testing.T, secret, id string, ts time.Time, body []byte) http.Header {
	t.Helper()
	key, err := receiver.ParseSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set(receiver.HeaderID, id)
	h.Set(receiver.HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(receiver.HeaderSignature, receiver.Sign(key, id, ts, body))
	return h
}

func TestVerify(t *testing.T) {
	secret, other := newSecret(t), newSecret(t)
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"type":"upload.completed","timestamp":"2026-11-02T10:00:00Z","data":{"size":1}}`)
	good := signed(t, secret, "evt_1", now, body)
	otherSig := signed(t, other, "evt_1", now, body).Get(receiver.HeaderSignature)
	with := func(k, v string) http.Header {
		h := good.Clone()
		h.Set(k, v)
		return h
	}
	tests := []struct {
		name   string
		header http.Header
		body   []byte
		now    time.Time
		want   error
	}{
		{"valid", good, body, now, nil},
		{"clock 5 min behind", good, body, now.Add(-5 * time.Minute), nil},
		{"clock 5 min ahead", good, body, now.Add(5 * time.Minute), nil},
		{"too old", good, body, now.Add(5*time.Minute + time.Second), receiver.ErrTimestamp},
		{"too new", good, body, now.Add(-5*time.Minute - time.Second), receiver.ErrTimestamp},
		{"tampered body", good, append([]byte{' '}, body...), now, receiver.ErrSignature},
		{"other id", with(receiver.HeaderID, "evt_2"), body, now, receiver.ErrSignature},
		{"other timestamp", with(receiver.HeaderTimestamp, strconv.FormatInt(now.Unix()+1, 10)), body, now, receiver.ErrSignature},
		{"timestamp not a number", with(receiver.HeaderTimestamp, "2026-11-02"), body, now, receiver.ErrTimestamp},
		{"other secret", with(receiver.HeaderSignature, otherSig), body, now, receiver.ErrSignature},
		{"one of several signatures", with(receiver.HeaderSignature, otherSig+" v1,AAAA "+good.Get(receiver.HeaderSignature)), body, now, nil},
		{"wrong version", with(receiver.HeaderSignature, "v2"+strings.TrimPrefix(good.Get(receiver.HeaderSignature), "v1")), body, now, receiver.ErrSignature},
		{"no signature", with(receiver.HeaderSignature, ""), body, now, receiver.ErrMissingHeaders},
		{"no id", with(receiver.HeaderID, ""), body, now, receiver.ErrMissingHeaders},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := receiver.NewVerifier(secret)
			if err != nil {
				t.Fatal(err)
			}
			v.Now = func() time.Time { return tc.now }
			id, ts, err := v.Verify(tc.header, tc.body)
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if tc.want == nil && (id != "evt_1" || !ts.Equal(now)) {
				t.Fatalf("id, ts = %q, %v", id, ts)
			}
		})
	}
	// A receiver holding several secrets accepts any of them.
	v, _ := receiver.NewVerifier(other, secret)
	v.Now = func() time.Time { return now }
	if _, _, err := v.Verify(good, body); err != nil {
		t.Fatalf("second of two secrets: %v", err)
	}
}

// Interop with the reference Standard Webhooks library, both ways.
func TestStandardWebhooksInterop(t *testing.T) {
	secret := newSecret(t)
	ref, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := receiver.NewVerifier(secret)
	body := []byte(`{"type":"export.completed","timestamp":"2026-11-02T10:00:00.123456Z","data":{"export_id":"exp_1"}}`)
	now := time.Now()

	t.Run("receiver verifies the reference signature", func(t *testing.T) {
		sig, err := ref.Sign("msg_ref", now, body)
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		h.Set("webhook-id", "msg_ref")
		h.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
		h.Set("webhook-signature", sig)
		if _, _, err := v.Verify(h, body); err != nil {
			t.Fatalf("receiver rejected the reference library's signature: %v", err)
		}
		if _, _, err := v.Verify(h, append(body, '\n')); !errors.Is(err, receiver.ErrSignature) {
			t.Fatalf("tampered body: %v", err)
		}
	})
	t.Run("reference verifies receiver.Sign", func(t *testing.T) {
		h := signed(t, secret, "msg_ours", now, body)
		if err := ref.Verify(body, h); err != nil {
			t.Fatalf("reference library rejected receiver.Sign: %v", err)
		}
		if err := ref.Verify(append(body, '\n'), h); err == nil {
			t.Fatal("reference library accepted a tampered body")
		}
	})
}

// countingStore records the calls Handler makes, so tests can show that
// nothing is looked up for a message that failed verification.
type countingStore struct {
	receiver.Store
	mu      sync.Mutex
	seen    []string
	records []string
}

func (c *countingStore) Seen(ctx context.Context, id string) (bool, error) {
	c.mu.Lock()
	c.seen = append(c.seen, id)
	c.mu.Unlock()
	return c.Store.Seen(ctx, id)
}

func (c *countingStore) Record(ctx context.Context, id string) error {
	c.mu.Lock()
	c.records = append(c.records, id)
	c.mu.Unlock()
	return c.Store.Record(ctx, id)
}

func (c *countingStore) calls() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen), len(c.records)
}

// forEachStore runs fn with a MemoryStore, and with an SQLStore on SQLite
// and on MariaDB.
func forEachStore(t *testing.T, fn func(t *testing.T, s receiver.Store)) {
	t.Run("memory", func(t *testing.T) { fn(t, receiver.NewMemoryStore(time.Hour, nil)) })
	for _, dialect := range []string{models.SQLite, models.MySQL} {
		t.Run("sql-"+dialect, func(t *testing.T) {
			db := testenv.NewDB(t, dialect)
			sqlDB, err := db.DB.DB()
			if err != nil {
				t.Fatal(err)
			}
			for _, stmt := range []string{receiver.CreateTableSQL, receiver.CreateIndexSQL} {
				if _, err := sqlDB.Exec(stmt); err != nil {
					t.Fatal(err)
				}
			}
			fn(t, &receiver.SQLStore{DB: sqlDB})
		})
	}
}

type post struct {
	header http.Header
	body   []byte
}

func send(t *testing.T, url string, p post) int {
	t.Helper()
	req, _ := http.NewRequest("POST", url, bytes.NewReader(p.body))
	for k, v := range p.header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestHandler(t *testing.T) {
	forEachStore(t, func(t *testing.T, store receiver.Store) {
		secret := newSecret(t)
		v, _ := receiver.NewVerifier(secret)
		cs := &countingStore{Store: store}
		var mu sync.Mutex
		processed := map[string]int{}
		var failNext atomic.Bool
		h := &receiver.Handler{Verifier: v, Store: cs, Process: func(ctx context.Context, m *receiver.Message) error {
			if failNext.Swap(false) {
				return errors.New("backend down")
			}
			mu.Lock()
			processed[m.ID]++
			mu.Unlock()
			return nil
		}}
		srv := httptest.NewServer(h)
		defer srv.Close()
		count := func(id string) int { mu.Lock(); defer mu.Unlock(); return processed[id] }
		body := func(n int) []byte {
			return fmt.Appendf(nil, `{"type":"upload.completed","timestamp":"2026-11-02T10:00:00Z","data":{"n":%d}}`, n)
		}
		now := time.Now()
		id := "evt_" + testenv.RandomHex(6)

		t.Run("replay is processed once", func(t *testing.T) {
			p := post{signed(t, secret, id, now, body(1)), body(1)}
			for i := range 3 {
				if code := send(t, srv.URL, p); code != 204 {
					t.Fatalf("send #%d: %d, want 204", i+1, code)
				}
			}
			// A retry with a fresh timestamp is a duplicate too.
			later := now.Add(time.Minute)
			if code := send(t, srv.URL, post{signed(t, secret, id, later, body(1)), body(1)}); code != 204 {
				t.Fatalf("retry: %d", code)
			}
			if n := count(id); n != 1 {
				t.Fatalf("processed %d times, want 1", n)
			}
		})

		t.Run("forgeries are rejected before any lookup", func(t *testing.T) {
			seen0, rec0 := cs.calls()
			realID := "evt_" + testenv.RandomHex(6)
			forger := newSecret(t)
			forged := []post{
				{signed(t, forger, realID, now, body(2)), body(2)},                     // wrong secret, real id
				{signed(t, secret, realID, now.Add(-6*time.Minute), body(2)), body(2)}, // too old
				{signed(t, secret, realID, now.Add(6*time.Minute), body(2)), body(2)},  // too new
				{signed(t, secret, realID, now, body(2)), body(3)},                     // body swapped
				{func() http.Header {
					h := signed(t, secret, "evt_other", now, body(2))
					h.Set(receiver.HeaderID, realID)
					return h
				}(), body(2)}, // id swapped
			}
			for i, p := range forged {
				if code := send(t, srv.URL, p); code != 401 {
					t.Fatalf("forgery #%d: %d, want 401", i+1, code)
				}
			}
			if s, r := cs.calls(); s != seen0 || r != rec0 {
				t.Fatalf("store consulted for forgeries: %d lookups, %d records", s-seen0, r-rec0)
			}
			// The real message with that id still goes through.
			if code := send(t, srv.URL, post{signed(t, secret, realID, now, body(2)), body(2)}); code != 204 {
				t.Fatalf("real message after forgeries: %d", code)
			}
			if n := count(realID); n != 1 {
				t.Fatalf("real message processed %d times, want 1", n)
			}
		})

		t.Run("handler error leaves the id unrecorded", func(t *testing.T) {
			id := "evt_" + testenv.RandomHex(6)
			failNext.Store(true)
			if code := send(t, srv.URL, post{signed(t, secret, id, now, body(4)), body(4)}); code != 500 {
				t.Fatalf("failing handler: %d, want 500", code)
			}
			if seen, err := store.Seen(context.Background(), id); err != nil || seen {
				t.Fatalf("id recorded after a failure: %v %v", seen, err)
			}
			if code := send(t, srv.URL, post{signed(t, secret, id, now.Add(30*time.Second), body(4)), body(4)}); code != 204 {
				t.Fatalf("retry: %d", code)
			}
			if n := count(id); n != 1 {
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
	})
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
	body := []byte(`{"type":"upload.completed","timestamp":"2026-11-02T10:00:00Z","data":{}}`)
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
	now := time.Unix(1_800_000_000, 0)
	s := receiver.NewMemoryStore(time.Hour, func() time.Time { return now })
	ctx := context.Background()
	s.Record(ctx, "a")
	if ok, _ := s.Seen(ctx, "a"); !ok {
		t.Fatal("recorded id not seen")
	}
	now = now.Add(time.Hour)
	if ok, _ := s.Seen(ctx, "a"); ok {
		t.Fatal("id still seen after its TTL")
	}
	s.Record(ctx, "b") // sweeps
	if s.Len() != 1 {
		t.Fatalf("len = %d after sweep, want 1", s.Len())
	}
}

func TestSQLStorePurge(t *testing.T) {
	db := testenv.NewDB(t, models.SQLite)
	sqlDB, _ := db.DB.DB()
	sqlDB.Exec(receiver.CreateTableSQL)
	now := time.Unix(1_800_000_000, 0)
	s := &receiver.SQLStore{DB: sqlDB, Now: func() time.Time { return now }}
	ctx := context.Background()
	for _, id := range []string{"old", "old"} { // twice: the second insert is a no-op
		if err := s.Record(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(2 * time.Hour)
	s.Record(ctx, "new")
	if n, err := s.Purge(ctx, time.Hour); err != nil || n != 1 {
		t.Fatalf("purge: %d %v, want 1", n, err)
	}
	if ok, _ := s.Seen(ctx, "old"); ok {
		t.Fatal("purged id still seen")
	}
	if ok, _ := s.Seen(ctx, "new"); !ok {
		t.Fatal("recent id purged")
	}
	if err := (&receiver.SQLStore{DB: sqlDB, Table: "x; DROP TABLE y"}).Record(ctx, "z"); err == nil {
		t.Fatal("accepted an injected table name")
	}
}

// The package must stay cheap to import: the standard library and nothing
// else, in particular none of gin, gorm or the rest of ferry.
func TestImportsOnlyStandardLibrary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "github.com/ferry-io/ferry/notify/receiver").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) != 1 || deps[0] != "github.com/ferry-io/ferry/notify/receiver" {
		t.Fatalf("receiver imports non-standard packages: %v", deps)
	}
}
