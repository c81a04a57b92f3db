package notify_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/notify"
	"github.com/ferry-io/ferry/notify/receiver"
)

// countingReceiver is a backend built on notify/receiver that counts what
// arrives and what it processes, per webhook-id.
type countingReceiver struct {
	mu        sync.Mutex
	arrived   map[string]int
	processed map[string]int
	handler   *receiver.Handler
}

func newCountingReceiver(t *testing.T, secret string) (*countingReceiver, string) {
	v, err := receiver.NewVerifier(secret)
	if err != nil {
		t.Fatal(err)
	}
	c := &countingReceiver{arrived: map[string]int{}, processed: map[string]int{}}
	c.handler = &receiver.Handler{Verifier: v, Store: receiver.NewMemoryStore(time.Hour, nil),
		Process: func(ctx context.Context, m *receiver.Message) error {
			c.mu.Lock()
			c.processed[m.ID]++
			c.mu.Unlock()
			return nil
		}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.arrived[r.Header.Get("webhook-id")]++
		c.mu.Unlock()
		c.handler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return c, srv.URL
}

// subscribeCounting registers a countingReceiver for events. The secret
// exists only once the subscription does, so the URL is filled in after.
func (h *harness) subscribeCounting(events ...string) (notify.Subscription, *countingReceiver) {
	h.t.Helper()
	sub, secret := h.subscribe("http://127.0.0.1:1/placeholder/"+testenv.RandomHex(4), events...)
	recv, u := newCountingReceiver(h.t, secret)
	if err := h.db.Exec("UPDATE webhook_subscriptions SET url = ? WHERE id = ?", u, sub.ID).Error; err != nil {
		h.t.Fatal(err)
	}
	return sub, recv
}

// crashAfterSending emits one event with a sender child that dies right
// after the receiver answered it, and returns the event id once the child
// is dead.
func (h *harness) crashAfterSending(db *testenv.DB, env ...string) string {
	h.t.Helper()
	crashed := startSender(h.t, db, 0, append(env, "FERRY_NOTIFY_CHILD_CRASH=1")...)
	id, _ := h.emit(notify.UploadCompleted, map[string]int{"n": 1})
	select {
	case <-crashed:
	case <-time.After(30 * time.Second):
		h.t.Fatal("the crashing sender did not die")
	}
	return id
}

func (c *countingReceiver) counts(id string) (arrived, processed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.arrived[id], c.processed[id]
}

// Three sender processes share one database. Every outbox event becomes
// exactly one delivery per matching subscription, each sent once, and
// each receiver processes each webhook-id once.
func TestThreeSenderProcesses(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		h := newHarness(t, db.DB, notify.Config{AllowPrivate: true}) // admin side only; the children send
		_, recvA := h.subscribeCounting(notify.UploadCompleted, notify.ExportCompleted)
		_, recvB := h.subscribeCounting(notify.UploadCompleted)

		for i := range 3 {
			startSender(t, db, i)
		}

		// Events arrive in bursts while the three senders run.
		type sent struct{ id, typ string }
		var events []sent
		for burst := range 6 {
			for i := range 10 {
				typ := notify.UploadCompleted
				if i%3 == 0 {
					typ = notify.ExportCompleted
				}
				id, _ := h.emit(typ, map[string]int{"burst": burst, "i": i})
				events = append(events, sent{id, typ})
			}
			time.Sleep(100 * time.Millisecond)
		}
		want := 0
		for _, e := range events {
			want++ // subscription A takes both types
			if e.typ == notify.UploadCompleted {
				want++
			}
		}

		deadline := time.Now().Add(60 * time.Second)
		var delivered int64
		for {
			db.Raw("SELECT COUNT(*) FROM webhook_deliveries WHERE state = ?", notify.StateDelivered).Scan(&delivered)
			if int(delivered) == want || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		var total, dupes, attempts int64
		db.Raw("SELECT COUNT(*) FROM webhook_deliveries").Scan(&total)
		db.Raw("SELECT COUNT(*) FROM (SELECT event_id FROM webhook_deliveries GROUP BY event_id, subscription_id HAVING COUNT(*) > 1) AS d").Scan(&dupes)
		db.Raw("SELECT COUNT(*) FROM webhook_attempts").Scan(&attempts)
		if int(delivered) != want || int(total) != want || dupes != 0 {
			t.Fatalf("deliveries: %d delivered, %d in all, %d duplicated (event, subscription) pairs; want %d, %d, 0", delivered, total, dupes, want, want)
		}
		if int(attempts) != want {
			t.Errorf("%d attempts for %d deliveries to healthy receivers; want one each", attempts, want)
		}
		for _, e := range events {
			for name, c := range map[string]*countingReceiver{"A": recvA, "B": recvB} {
				arrived, processed := c.counts(e.id)
				wantN := 1
				if name == "B" && e.typ != notify.UploadCompleted {
					wantN = 0
				}
				if processed != wantN || arrived != wantN {
					t.Errorf("receiver %s, %s %s: arrived %d, processed %d; want %d", name, e.typ, e.id, arrived, processed, wantN)
				}
			}
		}
		t.Logf("%d events, %d deliveries by 3 sender processes on %s", len(events), want, db.Dialect)
	})
}

// startSender runs TestSenderProcess as a child process on db until the
// test ends, with env added to its environment. The channel it returns
// is closed when the child has exited.
func startSender(t *testing.T, db *testenv.DB, n int, env ...string) <-chan struct{} {
	t.Helper()
	cmd := testenv.Child("TestSenderProcess", append([]string{"FERRY_NOTIFY_CHILD=1", "FERRY_NOTIFY_CHILD_DIALECT=" + db.Dialect, "FERRY_NOTIFY_CHILD_DSN=" + db.DSN}, env...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	exited := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		ok := false
		for !ok && sc.Scan() {
			ok = strings.TrimSpace(sc.Text()) == "SENDER READY"
		}
		ready <- ok
		io.Copy(io.Discard, out)
		cmd.Wait() // after the pipe is drained, as os/exec requires
		close(exited)
	}()
	t.Cleanup(func() {
		stdin.Close() // the child shuts down gracefully on EOF
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
		}
	})
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("sender %d exited before it was ready", n)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("sender %d not ready", n)
	}
	return exited
}

// A sender is SIGKILLed after the receiver processed a delivery but before
// the attempt was recorded. Another sender takes the job over once the
// lease lapses and sends it again with the same webhook-id; the receiver
// answers 2xx without processing it a second time.
func TestSenderKilledAfterSending(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		h := newHarness(t, db.DB, notify.Config{AllowPrivate: true})
		sub, recv := h.subscribeCounting()
		id := h.crashAfterSending(db, "FERRY_NOTIFY_CHILD_LEASE=2s")
		if arrived, processed := recv.counts(id); arrived != 1 || processed != 1 {
			t.Fatalf("before the crash: %d arrived, %d processed; want 1 and 1", arrived, processed)
		}
		d, _ := h.delivery(sub.ID, id)
		if d.State != notify.StatePending || len(d.Attempts) != 0 {
			t.Fatalf("after the crash: %+v; want pending with nothing recorded", d)
		}

		start := time.Now()
		startSender(t, db, 1, "FERRY_NOTIFY_CHILD_LEASE=2s")
		d = h.waitDelivery(sub.ID, id, notify.StateDelivered, 30*time.Second)
		t.Logf("taken over and delivered %.1fs after the survivor started (lease 2s)", time.Since(start).Seconds())
		if arrived, processed := recv.counts(id); arrived != 2 || processed != 1 {
			t.Fatalf("after the takeover: %d arrived, %d processed; want 2 and 1", arrived, processed)
		}
		if len(d.Attempts) != 1 || d.Attempts[0].N != 2 || d.Attempts[0].Status != 204 {
			t.Fatalf("attempts %+v; want one recorded, the job's second", d.Attempts)
		}
	})
}

// A sender dies during a delivery's last attempt. The next claim marks
// the delivery failed, with the reason, instead of sending beyond the
// attempt budget or leaving it pending forever; it can be redelivered.
func TestSenderLostOnLastAttempt(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		h := newHarness(t, db.DB, notify.Config{AllowPrivate: true})
		sub, recv := h.subscribeCounting()
		id := h.crashAfterSending(db, "FERRY_NOTIFY_CHILD_LEASE=2s", "FERRY_NOTIFY_CHILD_MAX_ATTEMPTS=1")
		startSender(t, db, 1, "FERRY_NOTIFY_CHILD_LEASE=2s", "FERRY_NOTIFY_CHILD_MAX_ATTEMPTS=1")
		d := h.waitDelivery(sub.ID, id, notify.StateFailed, 30*time.Second)
		if !strings.Contains(d.LastError, "lost during the last attempt") || len(d.Attempts) != 0 {
			t.Fatalf("delivery %+v; want failed for the lost worker, nothing recorded", d)
		}
		if arrived, _ := recv.counts(id); arrived != 1 {
			t.Fatalf("the receiver got %d requests, want 1 (no attempt beyond the budget)", arrived)
		}
		if _, err := h.svc.Redeliver(context.Background(), d.ID); err != nil {
			t.Fatal(err)
		}
		h.waitDelivery(sub.ID, id, notify.StateDelivered, 30*time.Second)
		if arrived, processed := recv.counts(id); arrived != 2 || processed != 1 {
			t.Fatalf("after redelivery: %d arrived, %d processed; want 2 and 1", arrived, processed)
		}
	})
}

// TestSenderProcess is the child process of the tests above: a ferry
// replica's webhook side (dispatcher and sender) on a shared database,
// until its stdin closes. FERRY_NOTIFY_CHILD_CRASH=1 makes it SIGKILL
// itself right after a receiver answers.
func TestSenderProcess(t *testing.T) {
	if os.Getenv("FERRY_NOTIFY_CHILD") != "1" {
		t.Skip("helper process for the multi-process tests")
	}
	db, err := models.Open(context.Background(), os.Getenv("FERRY_NOTIFY_CHILD_DIALECT"), os.Getenv("FERRY_NOTIFY_CHILD_DSN"), testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	o := notify.Config{AllowPrivate: true, Poll: 20 * time.Millisecond}
	if v := os.Getenv("FERRY_NOTIFY_CHILD_MAX_ATTEMPTS"); v != "" {
		if o.MaxAttempts, err = strconv.Atoi(v); err != nil {
			t.Fatal(err)
		}
	}
	var opts []notify.Option
	if os.Getenv("FERRY_NOTIFY_CHILD_CRASH") == "1" {
		// Die the moment the receiver has answered, before anything is
		// recorded.
		opts = append(opts, notify.WithAfterSend(func(string, int) { syscall.Kill(os.Getpid(), syscall.SIGKILL) }))
	}
	h := newHarness(t, db, o, opts...)
	if v := os.Getenv("FERRY_NOTIFY_CHILD_LEASE"); v != "" {
		if h.lease, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	wait := h.start(ctx)
	os.Stdout.WriteString("SENDER READY\n")
	os.Stdout.Sync()
	wait()
}
