package notify_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/notify"
	"github.com/ferry-io/ferry/notify/receiver"
)

// Every rotated-out secret signs until its own expiry: a second rotation
// an hour after the first keeps the first old secret for the rest of the
// 24 h it was promised. Before, the second rotation replaced it at once.
func TestRotationKeepsEverySecretUntilItsExpiry(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		t.Parallel()
		var mu sync.Mutex
		offset := time.Duration(0)
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return time.Now().Add(offset) }
		advance := func(d time.Duration) { mu.Lock(); offset += d; mu.Unlock() }
		h := newHarness(t, db.DB, notify.Config{AllowPrivate: true, Now: clock}).run()
		rec := newRecorder(t, status(http.StatusOK))
		sub, first := h.subscribe(rec.URL)
		ctx := context.Background()

		_, second, err := h.svc.RotateSecret(ctx, sub.ID, nil) // first signs for 24 h
		if err != nil {
			t.Fatal(err)
		}
		advance(time.Hour)
		rotated, third, err := h.svc.RotateSecret(ctx, sub.ID, nil) // second signs for 24 h from now
		if err != nil {
			t.Fatal(err)
		}
		if n := len(rotated.PreviousSecretsUntil); n != 2 {
			t.Fatalf("previous secrets after two rotations: %v, want 2", rotated.PreviousSecretsUntil)
		}
		if got := rotated.PreviousSecretsUntil[1].Sub(clock()); got < 22*time.Hour || got > 23*time.Hour {
			t.Fatalf("the first old secret now expires in %s, want the 23 h left of its 24 h", got)
		}
		verifies := func(secret string, hit hit) bool {
			v, _ := receiver.NewVerifier(secret)
			v.Now = clock
			_, _, err := v.Verify(hit.header, hit.body)
			return err == nil
		}
		id, _ := h.emit(notify.UploadCompleted, map[string]int{"n": 1})
		h.waitDelivery(sub.ID, id, notify.StateDelivered, 30*time.Second)
		got := rec.got()[0]
		for name, secret := range map[string]string{"first": first, "second": second, "third": third} {
			if !verifies(secret, got) {
				t.Errorf("an hour after the second rotation, a receiver holding the %s secret cannot verify", name)
			}
		}

		advance(23*time.Hour + time.Minute) // the first old secret's 24 h are over
		if s, _ := h.svc.GetSubscription(ctx, sub.ID); len(s.PreviousSecretsUntil) != 1 {
			t.Fatalf("previous secrets after the first expired: %v, want 1", s.PreviousSecretsUntil)
		}
		id2, _ := h.emit(notify.UploadCompleted, map[string]int{"n": 2})
		h.waitDelivery(sub.ID, id2, notify.StateDelivered, 30*time.Second)
		got = rec.got()[1]
		if verifies(first, got) || !verifies(second, got) || !verifies(third, got) {
			t.Fatalf("after the first expired: first %v, second %v, third %v; want false, true, true",
				verifies(first, got), verifies(second, got), verifies(third, got))
		}

		// At most MaxPreviousSecrets sign beside the current one; past
		// that a rotation with grace is refused, one without is not.
		for range notify.MaxPreviousSecrets - 1 {
			if _, _, err := h.svc.RotateSecret(ctx, sub.ID, nil); err != nil {
				t.Fatal(err)
			}
		}
		_, _, err = h.svc.RotateSecret(ctx, sub.ID, nil)
		var e *errkind.Error
		if !errors.As(err, &e) || e.Code != "too_many_secrets" || !errors.Is(err, errkind.Conflict) {
			t.Fatalf("rotation past the limit: %v, want 409 too_many_secrets", err)
		}
		zero := time.Duration(0)
		if s, _, err := h.svc.RotateSecret(ctx, sub.ID, &zero); err != nil || len(s.PreviousSecretsUntil) != notify.MaxPreviousSecrets {
			t.Fatalf("rotation without grace at the limit: %v %v", s.PreviousSecretsUntil, err)
		}
	})
}

// A URL an admin could register but ferry could never call is refused.
func TestSubscriptionURLsThatCannotWork(t *testing.T) {
	db := testenv.NewDB(t, models.SQLite)
	h := newHarness(t, db.DB, notify.Config{AllowPrivate: true, Resolver: &fakeDNS{hosts: map[string][]string{}}})
	ctx := context.Background()
	for _, u := range []string{
		"http://127.0.0.1:0/x",
		"http://127.0.0.1:65536/x",
		"http://127.0.0.1:99999/x",
		"http://127.0.0.1:/x",
		"http://127.0.0.1:-1/x",
		"http://example.com/hooks/a b",
		"http://example.com/hooks?a=b c",
		"http://example.com/hooks\t",
		"http://example.com/\u00a0",
		"http://[fe80::1%25eth0]:8080/x",
		"http://[fe80::1%25eth0]/x",
	} {
		_, _, err := h.svc.CreateSubscription(ctx, u, []string{notify.UploadCompleted})
		var e *errkind.Error
		if !errors.As(err, &e) || e.Code != "invalid_url" {
			t.Errorf("create %q: %v, want invalid_url", u, err)
		}
	}
	for _, u := range []string{"http://127.0.0.1:1/x", "http://127.0.0.1:65535/x", "http://[fe80::1]:8080/x", "http://example.com/hooks/a%20b"} {
		if _, _, err := h.svc.CreateSubscription(ctx, u, []string{notify.UploadCompleted}); err != nil {
			t.Errorf("create %q: %v", u, err)
		}
	}
}

// Two active subscriptions that would send one event to one endpoint are
// refused, however the URL is spelled and however many admins try at
// once: the receiver would get one webhook-id under two secrets.
func TestDuplicateSubscriptionRefused(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		t.Parallel()
		h := newHarness(t, db.DB, notify.Config{AllowPrivate: true, Resolver: &fakeDNS{hosts: map[string][]string{}}})
		ctx := context.Background()
		first, _ := h.subscribe("http://backend.test:8080/hooks", notify.UploadCompleted, notify.ExportCompleted)
		for _, u := range []string{
			"http://backend.test:8080/hooks",
			"HTTP://Backend.TEST:8080/hooks",
			"http://backend.test.:08080/hooks",
		} {
			_, _, err := h.svc.CreateSubscription(ctx, u, []string{notify.ExportCompleted, notify.ExportFailed})
			var e *errkind.Error
			if !errors.As(err, &e) || e.Code != "webhook_exists" || !errors.Is(err, errkind.Conflict) || !strings.Contains(e.Detail, first.ID) {
				t.Errorf("create %q: %v, want 409 webhook_exists naming %s", u, err, first.ID)
			}
		}
		// Other events to the same URL, or the same events elsewhere, are
		// separate streams of ids.
		h.subscribe("http://backend.test:8080/hooks", notify.UploadFailed)
		h.subscribe("http://backend.test:8080/other", notify.UploadCompleted)
		h.subscribe("http://backend.test:8080/hooks?tenant=2", notify.UploadCompleted)
		h.subscribe("https://backend.test:8080/hooks", notify.UploadCompleted)

		// Eight admins create the same subscription at the same moment,
		// ten times over.
		for round := range 10 {
			target := fmt.Sprintf("http://race%d.test/hooks", round)
			const n = 8
			errs := make([]error, n)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					_, _, errs[i] = h.svc.CreateSubscription(ctx, target, []string{notify.UploadCompleted})
				}()
			}
			close(start)
			wg.Wait()
			created := 0
			for _, err := range errs {
				switch {
				case err == nil:
					created++
				case !errors.Is(err, errkind.Conflict):
					t.Errorf("racing create: %v", err)
				}
			}
			var rows int64
			db.Raw("SELECT COUNT(*) FROM webhook_subscriptions WHERE url = ?", target).Scan(&rows)
			if created != 1 || rows != 1 {
				t.Fatalf("round %d: %d of %d racing creates succeeded, %d rows; want 1", round, created, n, rows)
			}
		}
	})
}

// A target the SSRF guard refuses fails at the first attempt instead of
// being retried to the end of the schedule.
func TestBlockedTargetFailsAtOnce(t *testing.T) {
	db := testenv.NewDB(t, models.SQLite)
	lenient := newHarness(t, db.DB, notify.Config{AllowPrivate: true})
	sub, _ := lenient.subscribe("http://10.20.30.40/hook")
	strict := newHarness(t, db.DB, notify.Config{Schedule: []time.Duration{50 * time.Millisecond}, MaxAttempts: 5, Dialer: &fenceDialer{}}).run()
	id, _ := strict.emit(notify.UploadCompleted, map[string]int{"n": 1})
	d := strict.waitDelivery(sub.ID, id, notify.StateFailed, 30*time.Second)
	time.Sleep(300 * time.Millisecond) // room for retries that must not come
	d, _ = strict.delivery(sub.ID, id)
	if len(d.Attempts) != 1 || !strings.Contains(d.LastError, "not a public address") {
		t.Fatalf("attempts %+v, last error %q; want one attempt refused by the guard", d.Attempts, d.LastError)
	}
}

// A 200 whose body trickles in past the attempt's time limit is no
// answer: the attempt fails and is retried.
func TestTricklingAnswerIsNotDelivered(t *testing.T) {
	db := testenv.NewDB(t, models.SQLite)
	h := newHarness(t, db.DB, notify.Config{AllowPrivate: true, MaxAttempts: 2, Timeout: time.Second, Schedule: []time.Duration{100 * time.Millisecond}}).run()
	stop := make(chan struct{})
	rec := newRecorder(t, func(n int, w http.ResponseWriter) {
		w.WriteHeader(http.StatusOK)
		if n > 1 {
			return // the retry gets a complete answer
		}
		for range 30 { // 3 s of one byte every 100 ms
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			w.Write([]byte{'.'})
			w.(http.Flusher).Flush()
		}
	})
	t.Cleanup(func() { close(stop) }) // before rec.Close, which waits for handlers
	sub, _ := h.subscribe(rec.URL)
	id, _ := h.emit(notify.UploadCompleted, map[string]int{"n": 1})
	d := h.waitDelivery(sub.ID, id, notify.StateDelivered, 30*time.Second)
	if len(d.Attempts) != 2 {
		t.Fatalf("attempts %+v, want 2", d.Attempts)
	}
	if a := d.Attempts[0]; a.Status != 200 || !strings.Contains(a.Error, "timed out") || a.Duration > 2*time.Second {
		t.Fatalf("first attempt %+v; want the 200 counted as timed out after about 1 s", a)
	}
}

// Deleting a subscription while one of its attempts is on the wire leaves
// no attempt row behind.
func TestDeleteDuringAttemptLeavesNoOrphan(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		t.Parallel()
		var h *harness
		var sub notify.Subscription
		deleted := make(chan error, 1)
		h = newHarness(t, db.DB, notify.Config{AllowPrivate: true, MaxAttempts: 1}, notify.WithAfterSend(func(string, int) {
			deleted <- h.svc.DeleteSubscription(context.Background(), sub.ID)
		}))
		rec := newRecorder(t, status(http.StatusInternalServerError))
		sub, _ = h.subscribe(rec.URL)
		h.run()
		h.emit(notify.UploadCompleted, map[string]int{"n": 1})
		select {
		case err := <-deleted:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("no attempt was made")
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			var open int64
			db.Raw("SELECT COUNT(*) FROM jobs WHERE kind = ? AND state NOT IN ?", notify.KindDeliver, []string{jobs.StateDone, jobs.StateFailed}).Scan(&open)
			if open == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the delivery job did not end")
			}
			time.Sleep(20 * time.Millisecond)
		}
		var orphans int64
		db.Raw("SELECT COUNT(*) FROM webhook_attempts").Scan(&orphans)
		if orphans != 0 {
			t.Fatalf("%d attempt rows left after their subscription was deleted", orphans)
		}
	})
}

// Logs name a subscription subscription_id and an event webhook_id (the
// header the receiver sees), and never carry the URL, whose query or path
// may hold the receiver's token.
func TestLogsKeepURLsOutAndNameIDsOneWay(t *testing.T) {
	db := testenv.NewDB(t, models.SQLite)
	var buf testenv.SyncBuffer
	q := testenv.Must(jobs.NewQueue(jobs.QueueConfig{DB: db.DB, Now: time.Now}))
	svc := testenv.Must(notify.New(notify.Config{DB: db.DB, Queue: q, AllowPrivate: true, Poll: 50 * time.Millisecond,
		Log: slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}))
	h := &harness{t: t, db: db.DB, q: q, svc: svc, lease: 10 * time.Second}
	h.run()
	rec := newRecorder(t, status(http.StatusNoContent))
	ctx := context.Background()
	sub, _ := h.subscribe(rec.URL + "/hooks/tok_pathsecret?token=querysecret")
	if _, _, err := svc.RotateSecret(ctx, sub.ID, nil); err != nil {
		t.Fatal(err)
	}
	id, _ := h.emit(notify.UploadCompleted, map[string]int{"n": 1})
	h.waitDelivery(sub.ID, id, notify.StateDelivered, 30*time.Second)
	if err := svc.DeleteSubscription(ctx, sub.ID); err != nil {
		t.Fatal(err)
	}

	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if strings.Contains(line, "pathsecret") || strings.Contains(line, "querysecret") {
			t.Errorf("log line carries the URL: %s", line)
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		msg, _ := rec["msg"].(string)
		if w, ok := rec["webhook_id"]; ok && w != id {
			t.Errorf("%q: webhook_id = %v, want only the event id %s", msg, w, id)
		}
		switch msg {
		case "webhook created", "webhook secret rotated", "webhook deleted", "webhook delivered":
			if rec["subscription_id"] != sub.ID {
				t.Errorf("%q: subscription_id = %v, want %s", msg, rec["subscription_id"], sub.ID)
			}
			seen[msg] = true
		}
	}
	if len(seen) != 4 {
		t.Fatalf("logged %v; want created, rotated, delivered and deleted", seen)
	}
}
