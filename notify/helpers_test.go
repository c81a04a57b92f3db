package notify_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/notify"
)

// harness is a notify.Service on a test database with its job runner and
// dispatcher.
type harness struct {
	t     *testing.T
	db    *gorm.DB
	q     *jobs.Queue
	svc   *notify.Service
	lease time.Duration // the job lease of the runner start makes
}

func newHarness(t *testing.T, db *gorm.DB, o notify.Config, opts ...notify.Option) *harness {
	t.Helper()
	if o.Poll == 0 {
		o.Poll = 50 * time.Millisecond
	}
	o.Log = testenv.Logger(t)
	q := testenv.Must(jobs.NewQueue(jobs.QueueConfig{DB: db, Now: time.Now}))
	o.DB, o.Queue = db, q
	return &harness{t: t, db: db, q: q, svc: testenv.Must(notify.New(o, opts...)), lease: 10 * time.Second}
}

// start runs the job runner and the dispatcher until ctx ends; wait
// returns when both have stopped.
func (h *harness) start(ctx context.Context) (wait func()) {
	r := jobs.NewRunner(h.q, jobs.RunnerConfig{Lease: h.lease, Poll: 20 * time.Millisecond, Log: testenv.Logger(h.t)})
	h.svc.Register(r)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); r.Run(ctx, time.Second) }()
	go func() { defer wg.Done(); h.svc.RunDispatcher(ctx) }()
	return wg.Wait
}

// run starts the job runner and the dispatcher until the test ends.
func (h *harness) run() *harness {
	ctx, cancel := context.WithCancel(context.Background())
	wait := h.start(ctx)
	h.t.Cleanup(func() { cancel(); wait() })
	return h
}

// emit writes an outbox event the way domain code does, and returns its id
// and payload.
func (h *harness) emit(typ string, data any) (string, string) {
	h.t.Helper()
	var id string
	err := h.db.Transaction(func(tx *gorm.DB) error {
		var err error
		id, err = notify.Emit(context.Background(), tx, time.Now(), notify.Event{Type: typ, Subject: "upl_test", UserID: "usr_test", Data: data})
		return err
	})
	if err != nil {
		h.t.Fatal(err)
	}
	var payload string
	if err := h.db.Raw("SELECT payload FROM outbox WHERE id = ?", id).Scan(&payload).Error; err != nil {
		h.t.Fatal(err)
	}
	return id, payload
}

func (h *harness) subscribe(url string, events ...string) (notify.Subscription, string) {
	h.t.Helper()
	if len(events) == 0 {
		events = []string{notify.UploadCompleted}
	}
	sub, secret, err := h.svc.CreateSubscription(context.Background(), url, events)
	if err != nil {
		h.t.Fatalf("subscribe %s: %v", url, err)
	}
	return sub, secret
}

// delivery finds the delivery of event to sub.
func (h *harness) delivery(sub, event string) (notify.Delivery, bool) {
	h.t.Helper()
	ds, err := h.svc.Deliveries(context.Background(), sub, notify.MaxDeliveriesListed)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, d := range ds {
		if d.WebhookID == event {
			return d, true
		}
	}
	return notify.Delivery{}, false
}

// waitDelivery polls until the delivery of event to sub is in state.
func (h *harness) waitDelivery(sub, event, state string, within time.Duration) notify.Delivery {
	h.t.Helper()
	deadline := time.Now().Add(within)
	for {
		d, ok := h.delivery(sub, event)
		if ok && d.State == state {
			return d
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("delivery of %s: want %s within %s, have %+v (found %v)", event, state, within, d, ok)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// hit is one request a test receiver got.
type hit struct {
	at     time.Time
	header http.Header
	body   []byte
}

// recorder is a test receiver that records every request and answers
// with whatever answer says for the n-th one (1-based).
type recorder struct {
	*httptest.Server
	mu     sync.Mutex
	hits   []hit
	answer func(n int, w http.ResponseWriter)
}

func newRecorder(t *testing.T, answer func(n int, w http.ResponseWriter)) *recorder {
	rec := &recorder{answer: answer}
	rec.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.hits = append(rec.hits, hit{at: time.Now(), header: r.Header.Clone(), body: body})
		n := len(rec.hits)
		rec.mu.Unlock()
		rec.answer(n, w)
	}))
	t.Cleanup(rec.Close)
	return rec
}

func (r *recorder) got() []hit {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hit(nil), r.hits...)
}

func status(code int) func(int, http.ResponseWriter) {
	return func(_ int, w http.ResponseWriter) { w.WriteHeader(code) }
}
