package export

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"regexp"
	"strings"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/ferry-io/ferry/chat"
	"github.com/ferry-io/ferry/download"
	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/page"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/quota"
	"github.com/ferry-io/ferry/s3store"
)

// Export states.
const (
	StateQueued  = "queued"
	StateRunning = "running"
	StateDone    = "done"
	StateFailed  = "failed"
	StateRevoked = "revoked"
	StateExpired = "expired"
)

// Job kinds this package handles.
const (
	JobKind   = "export"
	SweepKind = "export.sweep"
)

// MaxKeyLen is the longest accepted Idempotency-Key, in characters.
const MaxKeyLen = 255

// Errors the service returns.
var (
	ErrNotFound     = errkind.New(errkind.NotFound, "export_not_found", "no such export")
	ErrKeyTooLong   = errkind.Invalidf("idempotency_key_too_long", "the Idempotency-Key may have at most %d characters", MaxKeyLen)
	ErrKeyReused    = errkind.New(errkind.Unprocessable, "idempotency_key_reused", "this Idempotency-Key was used with a different request body")
	ErrInvalidScope = errkind.Invalidf("invalid_scope", `scope must be "all" or "conv:<conversation id>"`)
)

// Storage is the object store an export writes to. *s3store.Store
// implements it.
type Storage interface {
	// PutSHA256 stores body, whose SHA-256 (hex) the caller computed, and
	// only if the store receives exactly those bytes (see
	// s3store.Store.PutSHA256).
	PutSHA256(ctx context.Context, key string, body []byte, sha256Hex, contentType string) error
	// GetVersion streams key's object and tells its size.
	GetVersion(ctx context.Context, key string) (io.ReadCloser, s3store.ObjectInfo, error)
	// WriteObject makes key hold what fill writes, or nothing if fill
	// or the write fails (see s3store.Store.WriteObject).
	WriteObject(ctx context.Context, key, contentType string, partSize int, fill func(io.Writer) error) (int64, error)
	DeletePrefix(ctx context.Context, prefix string) (int, error)
	ListMultipartUploads(ctx context.Context, prefix string) ([]s3store.MultipartUpload, error)
	AbortMultipart(ctx context.Context, key, uploadID string) error
}

// Hooks let tests stop or disturb a run at exact points. All are optional;
// each gets the export's id.
type Hooks struct {
	// AfterShard runs after shard n is stored or verified. An error ends
	// the run there as a retryable failure.
	AfterShard func(id string, n int) error
	// ShardWritten runs right after shard n's object was put (a write, as
	// opposed to a verified skip).
	ShardWritten func(id string, n int)
	// Assembled runs after shard n has been streamed into the artifact.
	// An error ends the run there.
	Assembled func(id string, n int) error
	// MutateShard, when set, replaces a freshly generated shard's bytes
	// before they are hashed: a forced non-deterministic generator.
	MutateShard func(id string, n int, b []byte) []byte
	// Held runs when shard n's size bytes join the stages that end with
	// its assembly (Assembled).
	Held func(id string, n, size int)
	// Rendered runs when shard n has been generated, size bytes, before
	// they are hashed.
	Rendered func(id string, n, size int)
}

// Config configures a Service. Zero values take the defaults noted.
type Config struct {
	DB    *gorm.DB        // required
	Store Storage         // required
	Queue *jobs.Queue     // required
	Links *download.Links // required: builds artifacts' download links

	ShardSize    int           // messages per shard; 1000
	Retention    time.Duration // how long a finished artifact is kept; 168h
	DeleteShards bool          // delete shard objects once the artifact is assembled
	Concurrency  int           // exports one runner works on at once; 2
	MaxAttempts  int           // runs before an export fails; 10
	Backoff      func(attempt int) time.Duration
	PartSize     int           // multipart part size of the artifact; 8 MiB
	SweepEvery   time.Duration // retention sweep interval; 1m
	Now          func() time.Time
	Log          *slog.Logger
	Registerer   prometheus.Registerer // nil registers no metrics

	// ExportsPerDay gives a user's limit on exports created in any 24
	// hours (0: unlimited); nil is no limit. *quota.Service has it.
	ExportsPerDay func(ctx context.Context, userID string) (int, error)
}

// Service creates, runs and serves exports. It is safe for concurrent use.
type Service struct {
	db      *gorm.DB
	store   Storage
	queue   *jobs.Queue
	links   *download.Links
	opts    Config
	hooks   Hooks
	log     *slog.Logger
	metrics *metrics

	stageBytes int64 // see pipeline.go
}

// An Option changes a Service for a test.
type Option func(*Service)

// WithHooks makes a Service call h at its points: tests stop or disturb a
// run there. Production code passes no options.
func WithHooks(h Hooks) Option { return func(s *Service) { s.hooks = h } }

// New returns a Service.
func New(o Config, opts ...Option) (*Service, error) {
	if o.DB == nil || o.Store == nil || o.Queue == nil || o.Links == nil {
		return nil, errors.New("export: DB, Store, Queue and Links are required")
	}
	if o.ShardSize <= 0 {
		// Each shard is one PUT, and at 200 messages the S3 server's cost
		// per PUT was the largest part of a run's CPU. 1,000 messages
		// (about 250 KB of JSON in BenchmarkExportScale) is still a small
		// unit to redo after a crash. The plan is stored, so an export keeps the size it was
		// planned with, and the artifact's bytes do not depend on it.
		o.ShardSize = 1000
	}
	if o.Retention <= 0 {
		o.Retention = 168 * time.Hour
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 2
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 10
	}
	if o.Backoff == nil {
		o.Backoff = jobs.Exponential(2*time.Second, 5*time.Minute)
	}
	if o.PartSize <= 0 {
		o.PartSize = 8 << 20
	}
	if o.SweepEvery <= 0 {
		o.SweepEvery = time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	s := &Service{db: o.DB, store: o.Store, queue: o.Queue, links: o.Links, opts: o, log: o.Log, metrics: newMetrics(o.Registerer), stageBytes: stageBytes}
	for _, opt := range opts {
		opt(s)
	}
	return s, nil
}

// Register adds the export worker and the retention sweep to r.
func (s *Service) Register(r *jobs.Runner) {
	r.Handle(JobKind, s.Run, jobs.Options{Concurrency: s.opts.Concurrency, MaxAttempts: s.opts.MaxAttempts, Backoff: s.opts.Backoff})
	r.Handle(SweepKind, s.Sweep, jobs.Options{Every: s.opts.SweepEvery, MaxAttempts: 1})
	r.Handle(EraseKind, s.erase, jobs.Options{MaxAttempts: 50})
}

// Request is what an export is asked for.
type Request struct {
	Scope string // "all" or "conv:<conversation id>"
}

var convIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,40}$`)

// parseScope validates a scope and returns the conversation it names, or
// "" for all.
func parseScope(scope string) (conv string, err error) {
	if scope == "all" {
		return "", nil
	}
	id, ok := strings.CutPrefix(scope, "conv:")
	if !ok || !convIDPattern.MatchString(id) {
		return "", ErrInvalidScope
	}
	return id, nil
}

// fingerprint is the SHA-256 of the canonical body: the request
// re-marshalled, so whitespace and key order do not make a body "other".
func fingerprint(r Request) string {
	// The JSON spelling is part of every stored fingerprint: keep it, or a
	// replay after an upgrade would read as another body.
	b, _ := json.Marshal(struct {
		Scope string `json:"scope"`
	}{r.Scope})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// View is an export as its owner sees it.
type View struct {
	ID          string
	State       string
	Scope       string
	CreatedAt   time.Time
	FinishedAt  *time.Time
	ExpiresAt   *time.Time // when a done export's artifact will be deleted
	Messages    *int64
	SHA256      string
	Bytes       int64
	DownloadURL string // set when done
	LinkExpires time.Time
	Error       string // why it failed
}

// Create makes the export (userID, key) for req, or finds the one that
// exists. It reports replayed=true when the export existed already.
func (s *Service) Create(ctx context.Context, userID, key string, req Request) (View, bool, error) {
	if len(key) > MaxKeyLen {
		return View{}, false, ErrKeyTooLong
	}
	conv, err := parseScope(req.Scope)
	if err != nil {
		return View{}, false, err
	}
	fp := fingerprint(req)
	// The quota is read before the transaction: inside it, on SQLite, a
	// second connection would wait for the pool that the transactions
	// queued on the write lock hold.
	limit := 0
	if s.opts.ExportsPerDay != nil {
		if limit, err = s.opts.ExportsPerDay(ctx, userID); err != nil {
			return View{}, false, fmt.Errorf("export: quota: %w", err)
		}
	}
	// A concurrent request with the same key may insert first; then this
	// one's insert hits the unique key and the retry finds that row.
	for attempt := 1; ; attempt++ {
		v, replayed, err := s.create(ctx, userID, key, fp, req.Scope, conv, limit)
		if err != nil && attempt < 5 && (models.IsDuplicate(err) || isDeadlock(err)) {
			continue
		}
		return v, replayed, err
	}
}

func (s *Service) create(ctx context.Context, userID, key, fp, scope, conv string, limit int) (View, bool, error) {
	var e models.Export
	replayed := false
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		err := tx.Where("user_id = ? AND idempotency_key = ?", userID, key).Take(&e).Error
		if err == nil {
			if e.Fingerprint != fp {
				return ErrKeyReused
			}
			replayed = true
			return nil
		}
		if !errors.Is(err, gorm.ErrRecordNotFound) {
			return err
		}
		if err := s.checkQuota(tx, userID, limit); err != nil {
			return err
		}
		snap, err := chat.Snapshot(ctx, tx)
		if err != nil {
			return err
		}
		var ivs []chat.ConversationIntervals
		if snap > 0 { // at 0 nothing was ever written, and AsOf 0 would mean "now"
			if ivs, err = chat.Intervals(ctx, tx, userID, conv, snap); err != nil {
				return err
			}
		}
		if conv != "" && len(ivs) == 0 {
			return chat.ErrConversationNotFound
		}
		now := models.Time(s.opts.Now())
		e = models.Export{
			ID: models.NewID("exp"), UserID: userID, IdempotencyKey: key, Fingerprint: fp, Scope: scope,
			SnapshotGseq: snap, State: StateQueued, CreatedAt: now, UpdatedAt: now,
		}
		if err := tx.Create(&e).Error; err != nil {
			return err
		}
		var perms []models.ExportPermission
		for _, c := range ivs {
			for _, iv := range c.Intervals {
				p := models.ExportPermission{ExportID: e.ID, ConversationID: c.Conversation, JoinGseq: iv.Join}
				if iv.Leave > 0 {
					p.LeaveGseq = &iv.Leave
				}
				perms = append(perms, p)
			}
		}
		if len(perms) > 0 {
			if err := tx.CreateInBatches(perms, 500).Error; err != nil {
				return err
			}
		}
		_, err = s.queue.Enqueue(ctx, tx, jobs.Spec{Kind: JobKind, Key: e.ID, MaxAttempts: s.opts.MaxAttempts})
		return err
	})
	if err != nil {
		if errkind.KindOf(err) != nil || models.IsDuplicate(err) || isDeadlock(err) {
			return View{}, false, err
		}
		return View{}, false, fmt.Errorf("export: create: %w", err)
	}
	if !replayed {
		s.queue.Wake(JobKind)
		s.log.InfoContext(ctx, "export created", "export_id", e.ID, "user_id", userID, "scope", scope, "snapshot_gseq", e.SnapshotGseq)
	}
	return s.view(e), replayed, nil
}

// quotaWindow is the period FERRY_QUOTA_EXPORTS_PER_DAY counts over: any
// 24 hours, not a calendar day, so no midnight lets a burst through.
const quotaWindow = 24 * time.Hour

// RecentCount returns how many exports userID created in the last 24
// hours (what the export quota counts).
func (s *Service) RecentCount(ctx context.Context, userID string) (int, error) {
	var n int64
	err := s.db.WithContext(ctx).Model(&models.Export{}).
		Where("user_id = ? AND created_at > ?", userID, s.now().Add(-quotaWindow)).Count(&n).Error
	return int(n), err
}

// checkQuota refuses a new export past limit exports per day (0: none),
// with 429 quota_exceeded and when the oldest export in the window leaves
// it (retry_after). It runs in the creating transaction, after the user's
// row is locked, so concurrent creates of one user cannot both take the
// last one; a replay never reaches it.
func (s *Service) checkQuota(tx *gorm.DB, userID string, limit int) error {
	if limit <= 0 {
		return nil
	}
	var ids []string
	if err := tx.Model(&models.User{}).Clauses(clause.Locking{Strength: "UPDATE"}).Where("id = ?", userID).Pluck("id", &ids).Error; err != nil {
		return err
	}
	since := s.now().Add(-quotaWindow)
	var times []time.Time
	if err := tx.Model(&models.Export{}).Where("user_id = ? AND created_at > ?", userID, since).
		Order("created_at").Pluck("created_at", &times).Error; err != nil {
		return err
	}
	if len(times) < limit {
		return nil
	}
	// A slot frees when enough of the oldest have left the window.
	free := times[len(times)-limit].Add(quotaWindow)
	wait := max(1, int(math.Ceil(free.Sub(s.now()).Seconds())))
	return errkind.New(errkind.TooManyRequests, quota.Code, "you created %d exports in the last 24 hours, the most your quota allows; retry in %d s",
		len(times), wait).With("limit", limit).With("usage", len(times)).With("retry_after", wait)
}

// isDeadlock reports a MySQL deadlock or lock wait timeout: the
// transaction was rolled back and may simply be run again.
func isDeadlock(err error) bool {
	var me *mysqldrv.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}

// Get returns the caller's export. Someone else's is ErrNotFound.
func (s *Service) Get(ctx context.Context, userID, id string) (View, error) {
	e, err := s.load(ctx, s.db, id)
	if err != nil {
		return View{}, err
	}
	if e.UserID != userID {
		return View{}, ErrNotFound
	}
	return s.view(e), nil
}

// List returns the caller's exports, newest first, a page at a time
// (package page): cursor is "" for the first page and a returned next
// after that; next is "" on the last page. The order is (created_at, id)
// on the index ix_exports_user_created, so every page is one index range.
func (s *Service) List(ctx context.Context, userID, cursor string, limit int) (list []View, next string, err error) {
	if limit, err = page.Limit(limit); err != nil {
		return nil, "", err
	}
	q, err := page.NewestFirst(s.db.WithContext(ctx).Where("user_id = ?", userID), exportList, cursor, limit)
	if err != nil {
		return nil, "", err
	}
	var rows []models.Export
	if err := q.Find(&rows).Error; err != nil {
		return nil, "", fmt.Errorf("export: list: %w", err)
	}
	rows, next = page.Cut(exportList, rows, limit, func(e models.Export) (time.Time, string) { return e.CreatedAt, e.ID })
	list = make([]View, len(rows))
	for i, e := range rows {
		list[i] = s.view(e)
	}
	return list, next, nil
}

// exportList names the export list in its cursors.
const exportList = "exports"

func (s *Service) load(ctx context.Context, db *gorm.DB, id string) (models.Export, error) {
	var e models.Export
	err := db.WithContext(ctx).Where("id = ?", id).Take(&e).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return e, ErrNotFound
	}
	if err != nil {
		return e, fmt.Errorf("export: load %s: %w", id, err)
	}
	return e, nil
}

// state is e's state now. A done export whose retention has run out is
// expired from that moment, not from when the sweep gets to it: the sweep
// runs once a minute and only deletes the objects and records the state.
func (s *Service) state(e models.Export) string {
	if e.State == StateDone && e.ExpiresAt != nil && !s.opts.Now().Before(*e.ExpiresAt) {
		return StateExpired
	}
	return e.State
}

func (s *Service) view(e models.Export) View {
	v := View{ID: e.ID, State: s.state(e), Scope: e.Scope, CreatedAt: e.CreatedAt, FinishedAt: e.FinishedAt, Messages: e.MessageCount}
	if e.Error != nil {
		v.Error = *e.Error
	}
	if v.State == StateDone && e.SHA256 != nil && e.Bytes != nil {
		v.SHA256, v.Bytes, v.ExpiresAt = *e.SHA256, *e.Bytes, e.ExpiresAt
		l := s.links.Link(e.ID, e.UserID)
		v.DownloadURL, v.LinkExpires = l.URL, l.ExpiresAt
	}
	return v
}

// Revoke makes an export revoked and deletes its objects; downloads then
// get 410. owner restricts it to that user's exports ("" for admins).
// Revoking a revoked or expired export changes nothing.
func (s *Service) Revoke(ctx context.Context, owner, id string) (View, error) {
	e, err := s.load(ctx, s.db, id)
	if err != nil {
		return View{}, err
	}
	if owner != "" && e.UserID != owner {
		return View{}, ErrNotFound
	}
	if st := s.state(e); st != StateRevoked && st != StateExpired {
		now := models.Time(s.opts.Now())
		res := s.db.WithContext(ctx).Model(&models.Export{}).
			Where("id = ? AND state NOT IN ?", id, []string{StateRevoked, StateExpired}).
			Updates(map[string]any{"state": StateRevoked, "updated_at": now})
		if res.Error != nil {
			return View{}, fmt.Errorf("export: revoke %s: %w", id, res.Error)
		}
		if res.RowsAffected == 1 {
			s.metrics.finished.WithLabelValues(StateRevoked).Inc()
			s.log.InfoContext(ctx, "export revoked", "export_id", id, "by_owner", owner != "")
		}
		// Best effort: the sweep deletes whatever this misses.
		s.purge(ctx, id)
	}
	if e, err = s.load(ctx, s.db, id); err != nil {
		return View{}, err
	}
	return s.view(e), nil
}

// Artifact is what the download proxy needs to serve an export.
type Artifact struct {
	ExportID string
	UserID   string
	State    string
	Key      string // object key; empty unless done
	SHA256   string
	// CRC32C is the artifact's base64 CRC32C; empty for exports done
	// before ferry recorded it.
	CRC32C string
	Bytes  int64
	// FinishedAt is when the artifact was completed (its Last-Modified).
	FinishedAt time.Time
}

// Artifact returns export id's artifact and state, for the download proxy,
// which must answer 410 unless State is StateDone.
func (s *Service) Artifact(ctx context.Context, id string) (Artifact, error) {
	e, err := s.load(ctx, s.db, id)
	if err != nil {
		return Artifact{}, err
	}
	a := Artifact{ExportID: e.ID, UserID: e.UserID, State: s.state(e)}
	if a.State == StateDone && e.ArtifactKey != nil && e.SHA256 != nil && e.Bytes != nil {
		a.Key, a.SHA256, a.Bytes = *e.ArtifactKey, *e.SHA256, *e.Bytes
		if e.CRC32C != nil {
			a.CRC32C = *e.CRC32C
		}
	}
	if e.FinishedAt != nil {
		a.FinishedAt = *e.FinishedAt
	}
	return a, nil
}

// Object keys.
func prefix(id string) string          { return "exports/" + id + "/" }
func shardPrefix(id string) string     { return prefix(id) + "shards/" }
func shardKey(id string, n int) string { return fmt.Sprintf("%s%d", shardPrefix(id), n) }
func artifactKey(id string) string     { return prefix(id) + "export.jsonl.gz" }

// now is the clock, normalised for storage.
func (s *Service) now() time.Time { return models.Time(s.opts.Now()) }
