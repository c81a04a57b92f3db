package upload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/presign"
	"github.com/ferry-io/ferry/s3store"
)

// Upload states. An upload moves uploading → pending → merging → success or
// failed, or leaves uploading for aborted (the owner deleted it) or expired
// (idle past the TTL).
const (
	StateUploading = "uploading"
	StatePending   = "pending"
	StateMerging   = "merging"
	StateSuccess   = "success"
	StateFailed    = "failed"
	StateAborted   = "aborted"
	StateExpired   = "expired"
)

// Job kinds the service registers.
const (
	KindMerge   = "upload.merge"
	KindCleanup = "upload.cleanup"
	KindPurge   = "upload.purge"
)

// Limits S3 sets on multipart uploads.
const (
	MinPartSize  = 5 << 20
	MaxPartSize  = 5 << 30
	MaxParts     = 10_000
	MaxBatch     = 1_000 // part URLs per presign request
	maxNameBytes = 255
)

// keyPrefix is where upload objects live. Cleanup only ever aborts
// multipart uploads under it, so other features' writers are left alone.
const keyPrefix = "uploads/"

// Storage is what the service needs from object storage.
// *s3store.Store implements it.
type Storage interface {
	Bucket() string
	PresignPost(ctx context.Context, key string, o s3store.PostOptions, ttl time.Duration) (s3store.PostPolicy, error)
	CreateMultipart(ctx context.Context, key, contentType string) (string, error)
	PresignParts(ctx context.Context, key, uploadID string, parts []int32, contentMD5 map[int32]string, ttl time.Duration) ([]s3store.PresignedRequest, error)
	ListParts(ctx context.Context, key, uploadID string) ([]s3store.Part, error)
	ListMultipartUploads(ctx context.Context, prefix string) ([]s3store.MultipartUpload, error)
	CompleteMultipart(ctx context.Context, key, uploadID string, parts []s3store.CompletedPart) (string, error)
	AbortMultipart(ctx context.Context, key, uploadID string) error
	Head(ctx context.Context, key string) (s3store.ObjectInfo, error)
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error)
	Delete(ctx context.Context, key string) error
}

// Config configures a Service. DB, Store, Queue and Links are required.
type Config struct {
	DB    *gorm.DB
	Store Storage
	Queue *jobs.Queue
	// Links signs the download links of files.
	Links *presign.Signer
	Log   *slog.Logger
	// Registerer receives the upload metrics; nil registers none.
	Registerer prometheus.Registerer
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	TTL             time.Duration // idle uploads expire after this (default 24h)
	PresignTTL      time.Duration // lifetime of part URLs (default 15m)
	MaxSize         int64         // largest file (default 5 TiB)
	DefaultPartSize int64         // default part size (default 8 MiB)
	LinkTTL         time.Duration // lifetime of download links (default 5m)
	ChallengeTTL    time.Duration // lifetime of proof challenges (default 5m)

	MergeConcurrency int // merges at once per runner (default 2)
	MergeAttempts    int // attempts before a merge fails for good (default 8)
	MergeBackoff     func(int) time.Duration
	CleanupEvery     time.Duration // cleanup period (default 5m)

	// Hooks lets tests stop the merge at chosen points. Production code
	// leaves it zero.
	Hooks Hooks
}

// Hooks are called at points of the merge, for tests that crash a worker
// there.
type Hooks struct {
	// AfterComplete runs after CompleteMultipartUpload succeeded (or was
	// found already done), before verification starts.
	AfterComplete func(uploadID string)
	// VerifyProgress runs after each chunk the verification reads, with the
	// bytes read so far.
	VerifyProgress func(uploadID string, read int64)
}

// Service runs uploads. It is safe for concurrent use.
type Service struct {
	db      *gorm.DB
	store   Storage
	queue   *jobs.Queue
	links   *presign.Signer
	log     *slog.Logger
	now     func() time.Time
	cfg     Config
	metrics *metrics
}

// New returns a Service with defaults filled in.
func New(cfg Config) (*Service, error) {
	if cfg.DB == nil || cfg.Store == nil || cfg.Queue == nil || cfg.Links == nil {
		return nil, errors.New("upload: DB, Store, Queue and Links are required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	setDefault(&cfg.TTL, 24*time.Hour)
	setDefault(&cfg.PresignTTL, 15*time.Minute)
	setDefault(&cfg.MaxSize, 5<<40)
	setDefault(&cfg.DefaultPartSize, 8<<20)
	setDefault(&cfg.LinkTTL, 5*time.Minute)
	setDefault(&cfg.ChallengeTTL, 5*time.Minute)
	setDefault(&cfg.MergeConcurrency, 2)
	setDefault(&cfg.MergeAttempts, 8)
	setDefault(&cfg.CleanupEvery, 5*time.Minute)
	if cfg.MergeBackoff == nil {
		cfg.MergeBackoff = jobs.Exponential(2*time.Second, 5*time.Minute)
	}
	if cfg.DefaultPartSize < MinPartSize || cfg.DefaultPartSize > MaxPartSize {
		return nil, fmt.Errorf("upload: default part size %d is outside %d-%d", cfg.DefaultPartSize, MinPartSize, MaxPartSize)
	}
	s := &Service{
		db: cfg.DB, store: cfg.Store, queue: cfg.Queue, links: cfg.Links, log: cfg.Log, now: cfg.Now, cfg: cfg,
	}
	s.metrics = newMetrics(cfg.Registerer, s.countByState)
	return s, nil
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Register adds the merge, cleanup and purge handlers to r. Call it before
// r.Run.
func (s *Service) Register(r *jobs.Runner) {
	r.Handle(KindMerge, s.merge, jobs.Options{
		Concurrency: s.cfg.MergeConcurrency, MaxAttempts: s.cfg.MergeAttempts, Backoff: s.cfg.MergeBackoff,
	})
	r.Handle(KindCleanup, func(ctx context.Context, _ *jobs.Job) error {
		_, err := s.Cleanup(ctx)
		return err
	}, jobs.Options{Every: s.cfg.CleanupEvery, MaxAttempts: 1})
	r.Handle(KindAdopt, s.adopt, jobs.Options{Concurrency: 2, MaxAttempts: 20,
		Backoff: jobs.Exponential(5*time.Second, 10*time.Minute)})
	r.Handle(KindPurge, s.purge, jobs.Options{Concurrency: 2, MaxAttempts: 20,
		Backoff: jobs.Exponential(5*time.Second, 10*time.Minute)})
}

// Status is an upload as its owner sees it.
type Status struct {
	UploadID    string
	State       string
	FileName    string
	ContentType string
	Size        int64
	SHA256      string // declared, or computed once verified; may be empty
	PartSize    int64
	PartCount   int
	Parts       []Part
	ExpiresAt   time.Time
	Error       string
	FileID      string
	Instant     bool
}

// Part is one uploaded part.
type Part struct {
	Number int
	Size   int64
	ETag   string
}

// Outcome says which of Init's answers a result is.
type Outcome int

// Init's answers.
const (
	Created       Outcome = iota // a new upload
	Resumed                      // the caller's unfinished upload of the same content
	Instant                      // the caller already owns the content: a file exists now
	ProofRequired                // someone else owns it: answer the challenge
)

// InitResult is Init's answer: an upload, or a challenge.
type InitResult struct {
	Outcome   Outcome
	Upload    Status     // for Created, Resumed and Instant
	Challenge *Challenge // for ProofRequired
}

// Challenge asks for the SHA-256 of each byte range of the content.
type Challenge struct {
	ID        string
	Ranges    []Range
	ExpiresAt time.Time
}

// Range is a byte range of a blob.
type Range struct {
	Offset int64 `json:"offset"`
	Length int64 `json:"length"`
}

// PresignedPart is a URL for one part and the headers to send with it.
type PresignedPart struct {
	URL       string
	Method    string
	Headers   map[string]string
	ExpiresAt time.Time
}

// ClientPart is a part as a client names it at completion.
type ClientPart struct {
	Number int    `json:"part_number"`
	ETag   string `json:"etag"`
}

func (s *Service) nowUTC() time.Time { return models.Time(s.now()) }

// errNotFound is the answer for a missing upload and for someone else's.
var errNotFound = errkind.New(errkind.NotFound, "upload_not_found", "no such upload")

// errExpired tells a client to start over.
var errExpired = errkind.New(errkind.Gone, "upload_expired", "the upload expired; start a new one")

// storageError classifies an S3 failure for the HTTP layer: unreachable
// storage is a 503, anything else stays unclassified (500).
func storageError(op string, err error) error {
	if errors.Is(err, s3store.ErrUnavailable) {
		return &errkind.Error{Kind: errkind.Unavailable, Code: "storage_unavailable", Detail: "object storage is unreachable", Err: err}
	}
	return fmt.Errorf("upload: %s: %w", op, err)
}

// load returns the caller's upload, or errNotFound for a missing one and
// someone else's alike.
func (s *Service) load(ctx context.Context, userID, id string) (*models.Upload, error) {
	var u models.Upload
	err := s.db.WithContext(ctx).Where("id = ? AND user_id = ?", id, userID).Take(&u).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("upload: load %s: %w", id, err)
	}
	return &u, nil
}

// expired reports whether u is past its TTL, whether or not the cleanup job
// has marked it yet, so clients get the same answer before and after.
func (s *Service) expired(u *models.Upload) bool {
	return u.State == StateExpired || (u.State == StateUploading && !s.now().Before(u.ExpiresAt))
}

func toStatus(u *models.Upload) Status {
	st := Status{
		UploadID: u.ID, State: u.State, FileName: u.FileName, ContentType: u.ContentType, Size: u.Size,
		PartSize: u.PartSize, PartCount: u.PartCount, ExpiresAt: u.ExpiresAt, Instant: u.Instant, Parts: []Part{},
	}
	if u.SHA256 != nil {
		st.SHA256 = *u.SHA256
	}
	if u.Error != nil {
		st.Error = *u.Error
	}
	if u.FileID != nil {
		st.FileID = *u.FileID
	}
	return st
}

// expectedPartSize is the size part n (1-based) must have.
func expectedPartSize(u *models.Upload, n int) int64 {
	if n < u.PartCount {
		return u.PartSize
	}
	return u.Size - int64(u.PartCount-1)*u.PartSize
}
