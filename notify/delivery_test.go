package notify_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/notify"
	"github.com/ferry-io/ferry/notify/receiver"
)

// A receiver answers 500 four times, then 200. The five attempts come at
// the scheduled offsets, each with the same webhook-id, a fresh timestamp,
// the exact outbox bytes, and a signature the reference Standard Webhooks
// library accepts.
func TestRetriesFollowTheSchedule(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		t.Parallel()
		schedule := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}
		h := newHarness(t, db.DB, notify.Config{Schedule: schedule, AllowPrivate: true}).run()
		rec := newRecorder(t, func(n int, w http.ResponseWriter) {
			if n <= 4 {
				http.Error(w, "not yet", http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusOK)
		})
		sub, secret := h.subscribe(rec.URL + "/hooks")
		ref, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		id, payload := h.emit(notify.UploadCompleted, map[string]any{"file_id": "fil_1", "size": 42, "sha256": strings.Repeat("ab", 32)})

		d := h.waitDelivery(sub.ID, id, notify.StateDelivered, 30*time.Second)
		hits := rec.got()
		if len(hits) != 5 {
			t.Fatalf("receiver got %d requests, want 5", len(hits))
		}
		var lastTS int64
		for i, hit := range hits {
			if got := hit.header.Get("webhook-id"); got != id {
				t.Errorf("attempt %d: webhook-id %q, want the event id %q", i+1, got, id)
			}
			if string(hit.body) != payload {
				t.Errorf("attempt %d: body %s, want the outbox payload %s", i+1, hit.body, payload)
			}
			if err := ref.Verify(hit.body, hit.header); err != nil {
				t.Errorf("attempt %d: reference library rejects ferry's signature: %v", i+1, err)
			}
			ts, _ := strconv.ParseInt(hit.header.Get("webhook-timestamp"), 10, 64)
			if ts <= lastTS {
				t.Errorf("attempt %d: timestamp %d not fresh (previous %d)", i+1, ts, lastTS)
			}
			lastTS = ts
			if i == 0 {
				continue
			}
			gap := hit.at.Sub(hits[i-1].at)
			want := schedule[min(i, len(schedule))-1]
			// The runner polls every 20ms; the race detector and a shared
			// machine add some more.
			if gap < want-50*time.Millisecond || gap > want+1500*time.Millisecond {
				t.Errorf("gap before attempt %d = %s, want about %s", i+1, gap.Round(time.Millisecond), want)
			}
			t.Logf("attempt %d after %s (scheduled %s)", i+1, gap.Round(time.Millisecond), want)
		}
		if len(d.Attempts) != 5 {
			t.Fatalf("%d attempts recorded, want 5: %+v", len(d.Attempts), d.Attempts)
		}
		for i, a := range d.Attempts {
			want := 500
			if i == 4 {
				want = 200
			}
			if a.Status != want || a.N != i+1 || a.Round != 1 || a.At.IsZero() {
				t.Errorf("attempt record %d = %+v, want status %d", i+1, a, want)
			}
			if want == 500 && !strings.Contains(a.Error, "HTTP 500: not yet") {
				t.Errorf("attempt record %d error = %q", i+1, a.Error)
			}
		}
		if d.DeliveredAt == nil || d.LastStatus != 200 {
			t.Fatalf("delivery = %+v", d)
		}
	})
}

// Retry-After postpones the next attempt when it asks for longer than the
// schedule, and is ignored when it asks for less.
func TestRetryAfterWhenLonger(t *testing.T) {
	db := testenv.NewDB(t, models.SQLite)
	h := newHarness(t, db.DB, notify.Config{Schedule: []time.Duration{time.Second}, AllowPrivate: true}).run()
	rec := newRecorder(t, func(n int, w http.ResponseWriter) {
		switch n {
		case 1:
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusTooManyRequests)
		case 2:
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})
	sub, _ := h.subscribe(rec.URL)
	id, _ := h.emit(notify.UploadCompleted, map[string]int{"n": 1})
	h.waitDelivery(sub.ID, id, notify.StateDelivered, 30*time.Second)
	hits := rec.got()
	if len(hits) != 3 {
		t.Fatalf("%d requests, want 3", len(hits))
	}
	if gap := hits[1].at.Sub(hits[0].at); gap < 3*time.Second-50*time.Millisecond {
		t.Errorf("Retry-After: 3 honoured after only %s", gap)
	}
	if gap := hits[2].at.Sub(hits[1].at); gap < time.Second-50*time.Millisecond {
		t.Errorf("Retry-After: 0 shortened the schedule's 1s to %s", gap)
	}
}

// A receiver that is down for good fails the delivery after the last
// attempt; once it is back, redeliver succeeds with the same webhook-id.
func TestFailedDeliveryRedeliver(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		t.Parallel()
		h := newHarness(t, db.DB, notify.Config{Schedule: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}, MaxAttempts: 3, AllowPrivate: true}).run()
		addr := testenv.FreeAddr(t) // nothing listens here: connection refused
		sub, _ := h.subscribe("http://"+addr+"/hooks", notify.UploadFailed)
		id, payload := h.emit(notify.UploadFailed, map[string]string{"reason": "sha256 mismatch"})

		d := h.waitDelivery(sub.ID, id, notify.StateFailed, 30*time.Second)
		if len(d.Attempts) != 3 {
			t.Fatalf("%d attempts, want 3: %+v", len(d.Attempts), d.Attempts)
		}
		for _, a := range d.Attempts {
			if a.Status != 0 || !strings.Contains(a.Error, "refused") {
				t.Errorf("attempt %+v: want no status and a connection error", a)
			}
		}
		if !strings.Contains(d.LastError, "refused") {
			t.Errorf("last error = %q", d.LastError)
		}

		// Nothing more happens to a failed delivery on its own.
		time.Sleep(500 * time.Millisecond)
		if again, _ := h.delivery(sub.ID, id); len(again.Attempts) != 3 || again.State != notify.StateFailed {
			t.Fatalf("failed delivery changed by itself: %+v", again)
		}

		// The receiver comes back on the same address. It holds the first
		// request until released, so the delivery is seen pending.
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		var mu sync.Mutex
		var got []hit
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-release
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			got = append(got, hit{header: r.Header.Clone(), body: b})
			mu.Unlock()
		})}
		go srv.Serve(l)
		defer srv.Close()

		rd, err := h.svc.Redeliver(context.Background(), d.ID)
		if err != nil || rd.State != notify.StatePending || rd.Round != 2 {
			close(release)
			t.Fatalf("redeliver: %+v %v", rd, err)
		}
		if _, err := h.svc.Redeliver(context.Background(), d.ID); !errors.Is(err, errkind.Conflict) {
			close(release)
			t.Fatalf("redeliver while pending: %v, want a conflict", err)
		}
		close(release)
		d = h.waitDelivery(sub.ID, id, notify.StateDelivered, 30*time.Second)
		mu.Lock()
		defer mu.Unlock()
		if len(got) != 1 || got[0].header.Get("webhook-id") != id || string(got[0].body) != payload {
			t.Fatalf("receiver got %d requests %+v; want 1 with webhook-id %q and the same body", len(got), got, id)
		}
		if last := d.Attempts[len(d.Attempts)-1]; len(d.Attempts) != 4 || last.Round != 2 || last.N != 1 || last.Status != 200 {
			t.Fatalf("attempts after redelivery: %+v", d.Attempts)
		}
	})
}

// A 410 fails the delivery at once and disables the subscription: later
// events are not delivered to it and redelivery is refused.
func TestGoneDisablesSubscription(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		t.Parallel()
		h := newHarness(t, db.DB, notify.Config{Schedule: []time.Duration{100 * time.Millisecond}, AllowPrivate: true}).run()
		gone := newRecorder(t, status(http.StatusGone))
		ok := newRecorder(t, status(http.StatusOK))
		sub, _ := h.subscribe(gone.URL)
		other, _ := h.subscribe(ok.URL)
		id, _ := h.emit(notify.UploadCompleted, map[string]int{"n": 1})

		d := h.waitDelivery(sub.ID, id, notify.StateFailed, 30*time.Second)
		if len(d.Attempts) != 1 || d.Attempts[0].Status != 410 {
			t.Fatalf("attempts = %+v, want one 410", d.Attempts)
		}
		s, err := h.svc.GetSubscription(context.Background(), sub.ID)
		if err != nil || s.Active || !strings.Contains(s.DisabledReason, "410") {
			t.Fatalf("subscription after 410: %+v %v", s, err)
		}
		if _, err := h.svc.Redeliver(context.Background(), d.ID); !errors.Is(err, errkind.Conflict) {
			t.Fatalf("redeliver to a disabled webhook: %v, want a conflict", err)
		}
		h.waitDelivery(other.ID, id, notify.StateDelivered, 30*time.Second)

		id2, _ := h.emit(notify.UploadCompleted, map[string]int{"n": 2})
		h.waitDelivery(other.ID, id2, notify.StateDelivered, 30*time.Second)
		if _, found := h.delivery(sub.ID, id2); found {
			t.Fatal("an event was dispatched to a disabled webhook")
		}
		if n := len(gone.got()); n != 1 {
			t.Fatalf("the gone receiver got %d requests, want 1", n)
		}
	})
}

// During the grace period after a rotation both secrets sign, so a
// receiver holding either verifies; afterwards only the new one does.
func TestRotation(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		t.Parallel()
		var mu sync.Mutex
		offset := time.Duration(0)
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return time.Now().Add(offset) }
		h := newHarness(t, db.DB, notify.Config{AllowPrivate: true, Now: clock}).run()
		rec := newRecorder(t, status(http.StatusOK))
		sub, oldSecret := h.subscribe(rec.URL)
		rotated, newSecret, err := h.svc.RotateSecret(context.Background(), sub.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		if newSecret == oldSecret || !strings.HasPrefix(newSecret, "whsec_") {
			t.Fatalf("new secret %q", newSecret)
		}
		if rotated.PreviousSecretUntil() == nil || rotated.PreviousSecretUntil().Sub(clock()) < 23*time.Hour {
			t.Fatalf("previous secret until %v, want about 24h from now", rotated.PreviousSecretUntil())
		}
		verify := func(secret string, hit hit) error {
			v, err := receiver.NewVerifier(secret)
			if err != nil {
				t.Fatal(err)
			}
			v.Now = clock
			_, _, err = v.Verify(hit.header, hit.body)
			return err
		}

		id, _ := h.emit(notify.UploadCompleted, map[string]int{"n": 1})
		h.waitDelivery(sub.ID, id, notify.StateDelivered, 30*time.Second)
		during := rec.got()[0]
		if n := len(strings.Fields(during.header.Get("webhook-signature"))); n != 2 {
			t.Fatalf("%d signatures during the grace period, want 2", n)
		}
		for name, secret := range map[string]string{"old": oldSecret, "new": newSecret} {
			if err := verify(secret, during); err != nil {
				t.Errorf("during grace, a receiver with the %s secret: %v", name, err)
			}
			ref, _ := standardwebhooks.NewWebhook(secret)
			if err := ref.Verify(during.body, during.header); err != nil {
				t.Errorf("during grace, the reference library with the %s secret: %v", name, err)
			}
		}

		mu.Lock()
		offset = 24*time.Hour + time.Minute
		mu.Unlock()
		if s, _ := h.svc.GetSubscription(context.Background(), sub.ID); s.PreviousSecretUntil() != nil {
			t.Fatalf("grace still shown after it ended: %v", s.PreviousSecretsUntil)
		}
		id2, _ := h.emit(notify.UploadCompleted, map[string]int{"n": 2})
		h.waitDelivery(sub.ID, id2, notify.StateDelivered, 30*time.Second)
		after := rec.got()[1]
		if n := len(strings.Fields(after.header.Get("webhook-signature"))); n != 1 {
			t.Fatalf("%d signatures after the grace period, want 1", n)
		}
		if err := verify(newSecret, after); err != nil {
			t.Errorf("after grace, the new secret: %v", err)
		}
		if err := verify(oldSecret, after); !errors.Is(err, receiver.ErrSignature) {
			t.Errorf("after grace, the old secret: %v, want ErrSignature", err)
		}

		// A rotation without grace drops the old secret at once.
		zero := time.Duration(0)
		if s, third, err := h.svc.RotateSecret(context.Background(), sub.ID, &zero); err != nil || s.PreviousSecretUntil() != nil || third == newSecret {
			t.Fatalf("rotate without grace: %+v %v", s, err)
		}
	})
}

// Each event fans out to exactly the active subscriptions that asked for
// its type, once, however many dispatchers race.
func TestDispatchFanOutExactlyOnce(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		t.Parallel()
		h := newHarness(t, db.DB, notify.Config{AllowPrivate: true})
		uploads, _ := h.subscribe("http://127.0.0.1:1/a", notify.UploadCompleted)
		both, _ := h.subscribe("http://127.0.0.1:1/b", notify.UploadCompleted, notify.ExportCompleted)
		h.subscribe("http://127.0.0.1:1/c", notify.ExportFailed)

		const n = 30
		want := map[string]int{}
		for i := range n {
			typ := []string{notify.UploadCompleted, notify.ExportCompleted, notify.UploadFailed}[i%3]
			h.emit(typ, map[string]int{"i": i})
			want[typ]++
		}
		// Eight dispatchers on separate services race for the same events.
		var wg sync.WaitGroup
		for range 8 {
			other := newHarness(t, db.DB, notify.Config{})
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 20 {
					if k, err := other.svc.Dispatch(context.Background()); err != nil {
						t.Error(err)
						return
					} else if k == 0 {
						return
					}
				}
			}()
		}
		wg.Wait()

		var rows []struct {
			SubscriptionID string
			N              int
		}
		db.Raw("SELECT subscription_id, COUNT(*) AS n FROM webhook_deliveries GROUP BY subscription_id").Scan(&rows)
		got := map[string]int{}
		for _, r := range rows {
			got[r.SubscriptionID] = r.N
		}
		if got[uploads.ID] != want[notify.UploadCompleted] || got[both.ID] != want[notify.UploadCompleted]+want[notify.ExportCompleted] || len(got) != 2 {
			t.Fatalf("deliveries per subscription = %v; want %d for uploads-only, %d for both, none for export.failed",
				got, want[notify.UploadCompleted], want[notify.UploadCompleted]+want[notify.ExportCompleted])
		}
		var jobs, undispatched int64
		db.Raw("SELECT COUNT(*) FROM jobs WHERE kind = ?", notify.KindDeliver).Scan(&jobs)
		db.Raw("SELECT COUNT(*) FROM outbox WHERE dispatched_at IS NULL").Scan(&undispatched)
		if int(jobs) != got[uploads.ID]+got[both.ID] || undispatched != 0 {
			t.Fatalf("jobs = %d, undispatched = %d", jobs, undispatched)
		}
	})
}

func TestSubscriptionValidationAndAdmin(t *testing.T) {
	db := testenv.NewDB(t, models.SQLite)
	h := newHarness(t, db.DB, notify.Config{AllowPrivate: true})
	ctx := context.Background()
	for _, tc := range []struct {
		url    string
		events []string
		code   string
	}{
		{"ftp://example.com/x", []string{notify.UploadCompleted}, "invalid_url"},
		{"file:///etc/passwd", []string{notify.UploadCompleted}, "invalid_url"},
		{"http://", []string{notify.UploadCompleted}, "invalid_url"},
		{"/relative", []string{notify.UploadCompleted}, "invalid_url"},
		{"http://user:pw@127.0.0.1/x", []string{notify.UploadCompleted}, "invalid_url"},
		{"http://127.0.0.1/x", nil, "invalid_events"},
		{"http://127.0.0.1/x", []string{"upload.exploded"}, "invalid_events"},
	} {
		_, _, err := h.svc.CreateSubscription(ctx, tc.url, tc.events)
		var e *errkind.Error
		if !errors.As(err, &e) || e.Kind != errkind.Invalid || e.Code != tc.code {
			t.Errorf("create %q %v: %v, want %s", tc.url, tc.events, err, tc.code)
		}
	}
	sub, secret := h.subscribe("http://127.0.0.1:9/x", notify.UploadCompleted, notify.UploadCompleted, notify.ExportFailed)
	if key, err := receiver.ParseSecret(secret); err != nil || len(key) != 32 {
		t.Fatalf("secret %q: %d bytes, %v; want whsec_ and 32 bytes", secret, len(key), err)
	}
	if strings.Join(sub.Events, ",") != "upload.completed,export.failed" {
		t.Fatalf("events = %v, want deduplicated", sub.Events)
	}
	list, _ := h.svc.Subscriptions(ctx)
	if len(list) != 1 || list[0].ID != sub.ID {
		t.Fatalf("list = %+v", list)
	}
	id, _ := h.emit(notify.UploadCompleted, nil)
	h.svc.Dispatch(ctx)
	if _, ok := h.delivery(sub.ID, id); !ok {
		t.Fatal("no delivery")
	}
	if err := h.svc.DeleteSubscription(ctx, sub.ID); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		h.svc.DeleteSubscription(ctx, sub.ID),
		func() error { _, err := h.svc.Deliveries(ctx, sub.ID, 0); return err }(),
		func() error { _, _, err := h.svc.RotateSecret(ctx, sub.ID, nil); return err }(),
		func() error { _, err := h.svc.Redeliver(ctx, "dlv_nope"); return err }(),
	} {
		if !errors.Is(err, errkind.NotFound) {
			t.Errorf("after delete: %v, want not found", err)
		}
	}
	var left int64
	db.Raw("SELECT COUNT(*) FROM webhook_deliveries").Scan(&left)
	if left != 0 {
		t.Fatalf("%d deliveries left after deleting their webhook", left)
	}
	bad := 31 * 24 * time.Hour
	sub2, _ := h.subscribe("http://127.0.0.1:9/y")
	if _, _, err := h.svc.RotateSecret(ctx, sub2.ID, &bad); !errors.Is(err, errkind.Invalid) {
		t.Fatalf("31-day grace: %v", err)
	}
}

// An attempt follows no redirect, gives up at the timeout, and reads no
// more than 64 KiB of the answer.
func TestAttemptLimits(t *testing.T) {
	db := testenv.NewDB(t, models.SQLite)
	h := newHarness(t, db.DB, notify.Config{AllowPrivate: true, MaxAttempts: 1, Timeout: 2 * time.Second}).run()
	target := newRecorder(t, status(http.StatusOK))
	for _, tc := range []struct {
		name   string
		answer func(hang <-chan struct{}) func(int, http.ResponseWriter)
		state  string
		status int
		err    string
		slow   bool
	}{
		{"redirect", func(<-chan struct{}) func(int, http.ResponseWriter) {
			return func(_ int, w http.ResponseWriter) {
				w.Header().Set("Location", target.URL)
				w.WriteHeader(http.StatusFound)
			}
		}, notify.StateFailed, 302, "HTTP 302", false},
		{"timeout", func(hang <-chan struct{}) func(int, http.ResponseWriter) {
			return func(int, http.ResponseWriter) { <-hang }
		}, notify.StateFailed, 0, "timed out", true},
		{"endless answer", func(hang <-chan struct{}) func(int, http.ResponseWriter) {
			return func(_ int, w http.ResponseWriter) {
				w.WriteHeader(http.StatusOK)
				w.Write(make([]byte, notify.MaxResponseBytes+1))
				w.(http.Flusher).Flush()
				<-hang // the rest never comes; reading it would time out
			}
		}, notify.StateDelivered, 200, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hang := make(chan struct{})
			rec := newRecorder(t, tc.answer(hang))
			t.Cleanup(func() { close(hang) }) // before rec.Close, which waits for handlers
			sub, _ := h.subscribe(rec.URL)
			id, _ := h.emit(notify.UploadCompleted, map[string]string{"case": tc.name})
			d := h.waitDelivery(sub.ID, id, tc.state, 30*time.Second)
			a := d.Attempts[0]
			if a.Status != tc.status || !strings.Contains(a.Error, tc.err) {
				t.Fatalf("attempt %+v; want status %d, error %q", a, tc.status, tc.err)
			}
			if slow := a.Duration >= 1900*time.Millisecond; slow != tc.slow || a.Duration > 5*time.Second {
				t.Fatalf("attempt took %s", a.Duration)
			}
		})
	}
	if n := len(target.got()); n != 0 {
		t.Fatalf("the redirect was followed (%d requests)", n)
	}
}

// A subscription disabled by a 410 can be enabled again: later events are
// delivered to it, the failed delivery stays failed (redeliver it by
// hand), and enabling is refused while another active subscription sends
// the same events to the same endpoint.
func TestEnableAfterGone(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		t.Parallel()
		h := newHarness(t, db.DB, notify.Config{Schedule: []time.Duration{100 * time.Millisecond}, AllowPrivate: true}).run()
		var gone atomic.Bool
		gone.Store(true)
		rec := newRecorder(t, func(n int, w http.ResponseWriter) {
			if gone.Load() {
				w.WriteHeader(http.StatusGone)
				return
			}
			w.WriteHeader(http.StatusOK)
		})
		sub, _ := h.subscribe(rec.URL)
		id, _ := h.emit(notify.UploadCompleted, map[string]int{"n": 1})
		first := h.waitDelivery(sub.ID, id, notify.StateFailed, 30*time.Second)
		ctx := context.Background()
		if s, _ := h.svc.GetSubscription(ctx, sub.ID); s.Active {
			t.Fatal("the 410 did not disable the subscription")
		}

		// While it is off, someone subscribes the same endpoint again.
		twin, _ := h.subscribe(rec.URL)
		if _, err := h.svc.EnableSubscription(ctx, sub.ID); !errors.Is(err, errkind.Conflict) {
			t.Fatalf("enable beside an active twin: %v, want webhook_exists", err)
		}
		if err := h.svc.DeleteSubscription(ctx, twin.ID); err != nil {
			t.Fatal(err)
		}

		gone.Store(false)
		s, err := h.svc.EnableSubscription(ctx, sub.ID)
		if err != nil || !s.Active || s.DisabledReason != "" {
			t.Fatalf("enable = %+v %v", s, err)
		}
		if again, err := h.svc.EnableSubscription(ctx, sub.ID); err != nil || !again.Active {
			t.Fatalf("enable again = %+v %v", again, err)
		}
		id2, _ := h.emit(notify.UploadCompleted, map[string]int{"n": 2})
		h.waitDelivery(sub.ID, id2, notify.StateDelivered, 30*time.Second)
		if d, _ := h.delivery(sub.ID, id); d.State != notify.StateFailed || d.ID != first.ID {
			t.Fatalf("the delivery that failed while disabled is %s, want still failed", d.State)
		}
		if _, err := h.svc.Redeliver(ctx, first.ID); err != nil {
			t.Fatalf("redeliver after enabling: %v", err)
		}
		h.waitDelivery(sub.ID, id, notify.StateDelivered, 30*time.Second)
		if _, err := h.svc.EnableSubscription(ctx, "whk_nosuch"); !errors.Is(err, errkind.NotFound) {
			t.Fatalf("enable of no subscription: %v", err)
		}
	})
}

// Emitting an event and waking the dispatcher delivers it within a moment
// of the state change, not at the next poll (here an hour away).
func TestEmitWakesTheDispatcher(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		t.Parallel()
		h := newHarness(t, db.DB, notify.Config{Schedule: []time.Duration{time.Second}, AllowPrivate: true, Poll: time.Hour}).run()
		rec := newRecorder(t, status(http.StatusOK))
		sub, _ := h.subscribe(rec.URL)
		time.Sleep(200 * time.Millisecond) // the dispatcher's first pass is over
		start := time.Now()
		id, _ := h.emit(notify.UploadCompleted, map[string]int{"n": 1})
		h.q.Wake(notify.WakeDispatch) // what emitting code does after its commit
		h.waitDelivery(sub.ID, id, notify.StateDelivered, 10*time.Second)
		if took := time.Since(start); took > time.Second {
			t.Fatalf("delivered %s after the event; want well under a second", took)
		}
		t.Logf("delivered %s after the event", time.Since(start).Round(time.Millisecond))
	})
}

// Webhook history past the retention is pruned: finished deliveries with
// their attempts, and outbox events no delivery refers to; a pending
// delivery and its event stay, and so does recent history.
func TestWebhookHistoryIsPruned(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		t.Parallel()
		now := time.Now()
		h := newHarness(t, db.DB, notify.Config{AllowPrivate: true, Retention: 30 * 24 * time.Hour})
		old := models.Time(now.Add(-40 * 24 * time.Hour))
		mk := func(id, state string, at time.Time) {
			ev := models.OutboxEvent{ID: "evt_" + id, Type: notify.UploadCompleted, Subject: "s", UserID: "u", Payload: "{}", CreatedAt: at, DispatchedAt: &at}
			if err := db.Create(&ev).Error; err != nil {
				t.Fatal(err)
			}
			if state == "" {
				return
			}
			d := models.WebhookDelivery{ID: "dlv_" + id, SubscriptionID: "whk_x", EventID: ev.ID, EventType: ev.Type, State: state, Round: 1, CreatedAt: at, UpdatedAt: at}
			if err := db.Create(&d).Error; err != nil {
				t.Fatal(err)
			}
			db.Create(&models.WebhookAttempt{DeliveryID: d.ID, Round: 1, Attempt: 1, StartedAt: at, Status: 200})
			db.Create(&models.WebhookAttempt{DeliveryID: d.ID, Round: 1, Attempt: 2, StartedAt: at, Status: 500})
		}
		mk("old_delivered", notify.StateDelivered, old)
		mk("old_failed", notify.StateFailed, old)
		mk("old_pending", notify.StatePending, old)
		mk("old_no_subscriber", "", old)
		mk("new_delivered", notify.StateDelivered, models.Time(now))
		rep, err := h.svc.Prune(context.Background())
		if err != nil || rep != (notify.PruneReport{Deliveries: 2, Attempts: 4, Events: 3}) {
			t.Fatalf("prune = %+v %v, want 2 deliveries, 4 attempts, 3 events", rep, err)
		}
		var events, deliveries []string
		db.Model(&models.OutboxEvent{}).Order("id").Pluck("id", &events)
		db.Model(&models.WebhookDelivery{}).Order("id").Pluck("id", &deliveries)
		if fmt.Sprint(events) != "[evt_new_delivered evt_old_pending]" || fmt.Sprint(deliveries) != "[dlv_new_delivered dlv_old_pending]" {
			t.Fatalf("left events %v, deliveries %v", events, deliveries)
		}
		if again, _ := h.svc.Prune(context.Background()); again != (notify.PruneReport{}) {
			t.Fatalf("a second prune deleted %+v", again)
		}
	})
}
