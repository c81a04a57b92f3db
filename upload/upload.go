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

	"github.com/ferry-io/ferry/download"
	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
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
	KindVerify  = "upload.verify"
	KindCleanup = "upload.cleanup"
	KindPurge   = "upload.purge"
)

// Limits on multipart uploads. MinPartSize and MaxPartNumber are S3's
// protocol (every part but the last at least 5 MiB; part numbers 1 to
// 10,000); how many parts a store takes and how large they may be differ
// between stores, so they are Config.MaxParts and Config.MaxPartSize, with
// AWS S3's current limits as defaults: 10,000 parts of up to 5 GiB, which
// hold 48.8 TiB.
const (
	MinPartSize        = 5 << 20
	MaxPartNumber      = 10_000
	DefaultMaxParts    = 10_000
	DefaultMaxPartSize = 5 << 30
	MaxBatch           = 1_000 // part URLs per presign request
	maxNameBytes       = 255
)

// Where objects live. Multipart uploads (native and Companion) are written
// and completed at keyPrefix+id; the completed object is the blob, since
// CompleteMultipartUpload ends every part URL of the upload. A POST-policy
// upload is written at postPrefix+id, a key its policy can overwrite until
// the policy expires, so the merge copies it to blobPrefix+id, a key no
// credential ferry hands out can write, and verifies the copy. Cleanup
// only ever aborts multipart uploads under keyPrefix and deletes objects
// under postPrefix, so other features' writers are left alone.
const (
	keyPrefix  = "uploads/"
	postPrefix = "posts/"
	blobPrefix = "blobs/"
)

// Storage is what the service needs from object storage, by capability
// as tusd splits its stores: the multipart uploads clients send parts to,
// the presigned requests browsers send whole files with, and the objects
// themselves. *s3store.Store implements all of it; a store that cannot
// sign browser forms or copy objects server-side still implements the
// methods and refuses, and Config's fallbacks say what ferry does instead.
type Storage interface {
	MultipartStore
	BrowserSigner
	Objects
}

// MultipartStore is a store's multipart uploads: created by ferry, parts sent
// by clients straight to the store through presigned requests, listed,
// completed into one object or aborted.
type MultipartStore interface {
	CreateMultipart(ctx context.Context, key string, o s3store.MultipartOptions) (string, error)
	PresignParts(ctx context.Context, key, uploadID string, parts []s3store.PartSpec, ttl time.Duration) ([]s3store.PresignedRequest, error)
	ListParts(ctx context.Context, key, uploadID string) ([]s3store.Part, error)
	ListPartsPreferring(ctx context.Context, key, uploadID string, prefer map[int32]s3store.PartPreference) ([]s3store.Part, error)
	ListMultipartUploads(ctx context.Context, prefix string) ([]s3store.MultipartUpload, error)
	CompleteMultipart(ctx context.Context, key, uploadID string, parts []s3store.CompletedPart, fullCRC32C string) (string, error)
	AbortMultipart(ctx context.Context, key, uploadID string) error
}

// BrowserSigner signs the single requests a browser sends a whole file
// with: a form POST (PostPolicy) or, where the store has none, a PUT.
type BrowserSigner interface {
	PresignPost(ctx context.Context, key string, o s3store.PostOptions, ttl time.Duration) (s3store.PostPolicy, error)
	PresignPut(ctx context.Context, key string, o s3store.PutOptions, ttl time.Duration) (s3store.PresignedRequest, error)
}

// Objects is a store's objects: read, written, copied, listed, deleted.
type Objects interface {
	Bucket() string
	Head(ctx context.Context, key string) (s3store.ObjectInfo, error)
	GetVersion(ctx context.Context, key string) (io.ReadCloser, s3store.ObjectInfo, error)
	GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error)
	WriteObject(ctx context.Context, key, contentType string, partSize int, fill func(io.Writer) error) (int64, error)
	Copy(ctx context.Context, src, dst string) (string, error)
	ListObjects(ctx context.Context, prefix string, limit int) ([]s3store.Object, error)
	Delete(ctx context.Context, key string) error
	DeleteKeys(ctx context.Context, keys []string) (int, error)
}

// Config configures a Service. DB, Store, Queue and Links are required.
type Config struct {
	DB    *gorm.DB
	Store Storage
	Queue *jobs.Queue
	// Links makes the download links of files and grants.
	Links *download.Links
	Log   *slog.Logger
	// Registerer receives the upload metrics; nil registers none.
	Registerer prometheus.Registerer
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	TTL        time.Duration // idle uploads expire after this (default 24h)
	PresignTTL time.Duration // lifetime of part URLs (default 15m)
	// MaxParts and MaxPartSize are the store's limits on a multipart
	// upload (default DefaultMaxParts and DefaultMaxPartSize); part sizes
	// are raised to keep within MaxParts.
	MaxParts        int
	MaxPartSize     int64
	MaxSize         int64         // largest file (default MaxParts × MaxPartSize: 48.8 TiB)
	DefaultPartSize int64         // default part size (default 8 MiB)
	ChallengeTTL    time.Duration // lifetime of proof challenges (default 5m)
	MaxOpen         int           // unfinished uploads per user (default 100)
	// Quotas gives each user's limit on stored bytes; nil is no limit.
	Quotas Quotas
	// Checksums says the store verifies CRC32C checksums on parts and at
	// completion (s3store.Store.Probe); only then do uploads that ask for
	// checksum_algorithm CRC32C get it, and the others fall back to
	// Content-MD5.
	Checksums bool
	// PutInsteadOfPost and CopyThroughFerry are the fallbacks for a store
	// found (s3store.Store.Probe) to lack POST policies or CopyObject: a
	// single-request upload (Companion's /s3/params) is then a presigned
	// PUT instead of a form POST, and its object is copied to its blob key
	// by streaming it through ferry. The zero value assumes the store has
	// both.
	PutInsteadOfPost bool
	CopyThroughFerry bool

	MergeConcurrency int // merges, and background verifications, at once per runner (default 2)
	MergeAttempts    int // attempts before a merge fails for good (default 8)
	MergeBackoff     func(int) time.Duration
	CleanupEvery     time.Duration // cleanup period (default 5m)
	// Retention is how long uploads that ended without a file (aborted,
	// expired, failed) are kept before cleanup deletes them (default 30
	// days).
	Retention time.Duration
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

// The kinds of upload, by how they came in. Each is recorded with the
// upload (its Kind column), so the rules that differ read it rather than
// guess from a zero size or an empty multipart upload id.
const (
	// KindNative is POST /uploads: the size is declared, ferry plans the
	// parts and signs each.
	KindNative = "native"
	// KindCompanion is Uppy's multipart routes: the client plans the parts
	// and the size is learnt at complete.
	KindCompanion = "companion"
	// KindPost is one form POST (or a presigned PUT where the store has no
	// POST policies) to the object's key; ferry adopts what landed.
	KindPost = "post"
)

// Service runs uploads. It is safe for concurrent use.
type Service struct {
	db      *gorm.DB
	store   Storage
	queue   *jobs.Queue
	links   *download.Links
	log     *slog.Logger
	now     func() time.Time
	cfg     Config
	metrics *metrics
	changes *notifier
	hooks   Hooks
	chunks  chan []byte // idle verify buffers, at most one per verify worker (see chunk)
}

// An Option changes a Service for a test.
type Option func(*Service)

// WithHooks makes the merge call h at its points: tests crash a worker
// there. Production code passes no options.
func WithHooks(h Hooks) Option { return func(s *Service) { s.hooks = h } }

// New returns a Service with defaults filled in.
func New(cfg Config, opts ...Option) (*Service, error) {
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
	setDefault(&cfg.MaxParts, DefaultMaxParts)
	setDefault(&cfg.MaxPartSize, DefaultMaxPartSize)
	setDefault(&cfg.MaxSize, int64(cfg.MaxParts)*cfg.MaxPartSize)
	setDefault(&cfg.DefaultPartSize, 8<<20)
	setDefault(&cfg.ChallengeTTL, 5*time.Minute)
	setDefault(&cfg.MaxOpen, 100)
	setDefault(&cfg.MergeConcurrency, 2)
	setDefault(&cfg.MergeAttempts, 8)
	setDefault(&cfg.CleanupEvery, 5*time.Minute)
	setDefault(&cfg.Retention, 30*24*time.Hour)
	if cfg.MergeBackoff == nil {
		cfg.MergeBackoff = jobs.Exponential(2*time.Second, 5*time.Minute)
	}
	if cfg.MaxParts < 1 || cfg.MaxParts > MaxPartNumber {
		return nil, fmt.Errorf("upload: max parts %d is outside 1-%d", cfg.MaxParts, MaxPartNumber)
	}
	if cfg.MaxPartSize < MinPartSize || cfg.MaxPartSize > DefaultMaxPartSize {
		return nil, fmt.Errorf("upload: max part size %d is outside %d-%d", cfg.MaxPartSize, MinPartSize, DefaultMaxPartSize)
	}
	if cfg.DefaultPartSize < MinPartSize || cfg.DefaultPartSize > cfg.MaxPartSize {
		return nil, fmt.Errorf("upload: default part size %d is outside %d-%d", cfg.DefaultPartSize, MinPartSize, cfg.MaxPartSize)
	}
	if limit := int64(cfg.MaxParts) * cfg.MaxPartSize; cfg.MaxSize > limit {
		return nil, fmt.Errorf("upload: max size %d is more than %d parts of %d bytes hold (%d)", cfg.MaxSize, cfg.MaxParts, cfg.MaxPartSize, limit)
	}
	s := &Service{
		db: cfg.DB, store: cfg.Store, queue: cfg.Queue, links: cfg.Links, log: cfg.Log, now: cfg.Now, cfg: cfg,
		chunks: make(chan []byte, max(cfg.MergeConcurrency, 1)),
	}
	s.changes = newNotifier(s.settledUploads, cfg.Log)
	s.metrics = newMetrics(cfg.Registerer, s.countByState)
	for _, opt := range opts {
		opt(s)
	}
	return s, nil
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Register adds the merge, verify, cleanup, adopt and purge handlers to r.
// Call it before r.Run.
func (s *Service) Register(r *jobs.Runner) {
	r.Handle(KindMerge, s.merge, jobs.Options{
		Concurrency: s.cfg.MergeConcurrency, MaxAttempts: s.cfg.MergeAttempts, Backoff: s.cfg.MergeBackoff,
	})
	r.Handle(KindVerify, s.verify, jobs.Options{
		Concurrency: s.cfg.MergeConcurrency, MaxAttempts: 20, Backoff: jobs.Exponential(2*time.Second, 10*time.Minute),
	})
	r.Handle(KindCleanup, func(ctx context.Context, _ *jobs.Job) error {
		rep, err := s.Cleanup(ctx)
		r.CountPruned("uploads", int64(rep.Pruned))
		r.CountPruned("upload_challenges", int64(rep.Challenges))
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
	// SHA256Verified says SHA256 is what ferry computed from the stored
	// bytes, not the client's claim.
	SHA256Verified bool
	// Checksum is the checksum algorithm the upload's parts carry
	// ("CRC32C"), or empty.
	Checksum  string
	PartSize  int64
	PartCount int
	Parts     []Part
	ExpiresAt time.Time
	Error     string
	FileID    string
	Instant   bool
	// InstantCandidate, in Init's answer to a client that sent a head
	// CRC32C but no SHA-256, says ferry holds verified content of this
	// size and head: declaring the file's SHA-256 (DeclareSHA256) may end
	// the upload with an instant file. False means hashing cannot pay off.
	InstantCandidate bool
}

// Part is one uploaded part.
type Part struct {
	Number int
	Size   int64
	ETag   string
	CRC32C string // base64, for uploads with checksum CRC32C
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

// Challenge asks for the ProofDigest of each byte range of the content,
// bound to Nonce (hex, 32 bytes).
type Challenge struct {
	ID        string
	Nonce     string
	Ranges    []Range
	ExpiresAt time.Time
}

// Range is a byte range of a blob.
type Range struct {
	Offset int64
	Length int64
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
	Number int
	ETag   string
}

// PresignRequest names the parts to sign and what each URL pins.
type PresignRequest struct {
	Parts      []int
	ContentMD5 map[int]string // base64 MD5 per part, optional
	CRC32C     map[int]string // base64 CRC32C per part; required for uploads with checksum CRC32C
}

// CompleteRequest is what a client says when it has sent every part.
type CompleteRequest struct {
	Parts []ClientPart // the ETags the client saw, optional
	// SHA256 declares the file's hex SHA-256 when Init did not; optional.
	SHA256 string
	// CRC32C is the whole file's CRC32C (base64), required for uploads
	// with checksum CRC32C: S3 checks it at CompleteMultipartUpload.
	CRC32C string
}

func (s *Service) nowUTC() time.Time { return models.Time(s.now()) }

// errNotFound is the answer for a missing upload and for someone else's.
var errNotFound = errkind.New(errkind.NotFound, "upload_not_found", "no such upload")

// errExpired tells a client to start over.
var errExpired = errkind.New(errkind.Gone, "upload_expired", "the upload expired; start a new one")

// checkOpenLimit refuses a new upload when userID already has MaxOpen
// uploads still uploading: each holds a multipart upload (or a POST policy)
// in the bucket until it completes, is aborted or expires. Concurrent
// inits of one user can overshoot by their number; the per-user create
// rate limit bounds that.
func (s *Service) checkOpenLimit(ctx context.Context, userID string) error {
	var n int64
	err := s.db.WithContext(ctx).Model(&models.Upload{}).Where("user_id = ? AND state = ?", userID, StateUploading).
		Limit(s.cfg.MaxOpen + 1).Count(&n).Error
	if err != nil {
		return fmt.Errorf("upload: count open uploads: %w", err)
	}
	if n >= int64(s.cfg.MaxOpen) {
		return errkind.New(errkind.TooManyRequests, "too_many_open_uploads",
			"you have %d unfinished uploads, the most allowed; complete or abort one first", n).With("limit", s.cfg.MaxOpen)
	}
	return nil
}

// storageError classifies an S3 failure for the HTTP layer: unreachable
// storage is a 503, anything else stays unclassified (500).
func storageError(op string, err error) error {
	// Outages (s3store.ErrUnavailable, ErrStorageFull) already carry their
	// kind, code and client-safe detail.
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
		Checksum: u.ChecksumAlgorithm,
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
