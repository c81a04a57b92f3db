package notify

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"github.com/ferry-io/ferry/jobs"
)

// KindDeliver is the job kind that sends one delivery; its key is
// "<delivery id>#<round>".
const KindDeliver = "webhook.deliver"

// Delivery states.
const (
	StatePending   = "pending"
	StateDelivered = "delivered"
	StateFailed    = "failed"
)

// Defaults for Config.
const (
	DefaultMaxAttempts   = 10
	DefaultRotationGrace = 24 * time.Hour
	DefaultTimeout       = 10 * time.Second
	// MaxResponseBytes is how much of a receiver's answer is read.
	MaxResponseBytes = 64 << 10
)

// DefaultSchedule is the stepped retry schedule: the delay after the
// first failed attempt, the second, and so on; the last step repeats.
var DefaultSchedule = []time.Duration{30 * time.Second, time.Minute, 5 * time.Minute, 10 * time.Minute}

// Resolver looks up a host's addresses; *net.Resolver is one.
type Resolver interface {
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
}

// Dialer opens connections; *net.Dialer is one.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Config configures a Service. Zero values take the defaults.
type Config struct {
	DB    *gorm.DB    // required
	Queue *jobs.Queue // required: deliveries are its jobs
	// Schedule is the delay after each failed attempt, in order; the last
	// entry repeats (config.WebhookRetrySchedule).
	Schedule []time.Duration
	// MaxAttempts is how many attempts a delivery gets before it is failed
	// (config.WebhookMaxAttempts).
	MaxAttempts int
	// AllowPrivate permits loopback, private and link-local targets
	// (config.WebhookAllowPrivate): tests and development only.
	AllowPrivate bool
	// RotationGrace is how long a rotated-out secret keeps signing when
	// the caller names no grace period.
	RotationGrace time.Duration
	// Timeout bounds one attempt, from dial to the last byte read.
	Timeout time.Duration
	// Concurrency is how many deliveries one process sends at once.
	Concurrency int
	// Poll is how often the dispatcher looks for new outbox events.
	Poll time.Duration
	// Resolver and Dialer reach receivers; nil means the system's. Tests
	// inject both so that nothing leaves the machine.
	Resolver Resolver
	Dialer   Dialer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	Log *slog.Logger
	// Registerer receives the webhook metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Retention is how long finished deliveries, their attempts and their
	// outbox events are kept (FERRY_WEBHOOK_RETENTION, default 30 days).
	Retention time.Duration
}

// Service manages subscriptions and delivers outbox events to them.
type Service struct {
	db      *gorm.DB
	q       *jobs.Queue
	o       Config
	now     func() time.Time
	log     *slog.Logger
	guard   *guard
	client  *http.Client
	metrics *metrics
	kick    chan struct{}
	// afterSend, when set, runs after each attempt's HTTP exchange and
	// before the attempt is recorded: the moment a crash hurts most.
	afterSend func(deliveryID string, status int)
}

// An Option changes a Service for a test.
type Option func(*Service)

// WithAfterSend makes the sender call fn after each attempt's HTTP
// exchange, before the attempt is recorded: tests kill a sender there.
func WithAfterSend(fn func(deliveryID string, status int)) Option {
	return func(s *Service) { s.afterSend = fn }
}

// New returns a Service whose deliveries are jobs of o.Queue.
func New(o Config, opts ...Option) (*Service, error) {
	if o.DB == nil || o.Queue == nil {
		return nil, errors.New("notify: DB and Queue are required")
	}
	db, q := o.DB, o.Queue
	if len(o.Schedule) == 0 {
		o.Schedule = DefaultSchedule
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.RotationGrace <= 0 {
		o.RotationGrace = DefaultRotationGrace
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 8
	}
	if o.Poll <= 0 {
		o.Poll = time.Second
	}
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	if o.Resolver == nil {
		o.Resolver = net.DefaultResolver
	}
	if o.Dialer == nil {
		o.Dialer = &net.Dialer{Timeout: o.Timeout, KeepAlive: 30 * time.Second}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	g := &guard{allowPrivate: o.AllowPrivate, resolver: o.Resolver, dialer: o.Dialer}
	s := &Service{
		db: db, q: q, o: o, now: o.Now, log: o.Log, guard: g,
		client:  newClient(g, o.Timeout),
		metrics: newMetrics(o.Registerer, db),
		kick:    make(chan struct{}, 1),
	}
	for _, opt := range opts {
		opt(s)
	}
	return s, nil
}

// Register adds the delivery and pruning handlers to r. Call it before
// r.Run.
func (s *Service) Register(r *jobs.Runner) {
	s.registerPrune(r)
	r.Handle(KindDeliver, s.deliver, jobs.Options{
		Concurrency: s.o.Concurrency,
		// One spare claim: if a worker dies during the last attempt, the
		// next claim marks the delivery failed instead of the job runner
		// failing the job behind the delivery's back.
		MaxAttempts: s.o.MaxAttempts + 1,
		Backoff:     s.delayAfter,
	})
}

// delayAfter is the stepped schedule: the delay after failed attempt n.
func (s *Service) delayAfter(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	return s.o.Schedule[min(n, len(s.o.Schedule))-1]
}
