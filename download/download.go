package download

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/logctx"
	"github.com/ferry-io/ferry/presign"
	"github.com/ferry-io/ferry/s3store"
)

// PathPrefix is where download links point: PathPrefix + resource id.
const PathPrefix = "/download/"

// Resource is what a Resolver found: one immutable object in the bucket and
// the metadata the response needs. Size and SHA256 come from ferry's
// database, never from S3.
type Resource struct {
	Key         string    // the S3 object key
	Size        int64     // bytes
	SHA256      string    // lowercase hex; the strong ETag
	Name        string    // the file name offered in Content-Disposition
	ContentType string    // empty means application/octet-stream
	ModTime     time.Time // Last-Modified
}

// Resolver finds a downloadable resource for a user. It is called on every
// request, including every resumed range request, so its answer reflects
// the resource's state and the user's rights at that moment.
//
// It returns an error of kind errkind.NotFound when id names nothing (404),
// errkind.Forbidden when the resource exists but userID may not read it now
// (403: another user's export, or a file attached only to messages the user
// cannot currently see), and errkind.Gone when it was revoked or expired
// (410). Other errors are server faults (500).
type Resolver interface {
	Resolve(ctx context.Context, id, userID string) (Resource, error)
}

// ResolverFunc adapts a function to a Resolver.
type ResolverFunc func(ctx context.Context, id, userID string) (Resource, error)

// Resolve implements Resolver.
func (f ResolverFunc) Resolve(ctx context.Context, id, userID string) (Resource, error) {
	return f(ctx, id, userID)
}

// Routes is a Resolver that dispatches on the id's prefix up to and
// including the first "_": Routes{"exp_": exports, "fil_": files}. An id
// with no matching prefix is not found.
type Routes map[string]Resolver

// Resolve implements Resolver.
func (rt Routes) Resolve(ctx context.Context, id, userID string) (Resource, error) {
	if i := strings.IndexByte(id, '_'); i > 0 {
		if r, ok := rt[id[:i+1]]; ok {
			return r.Resolve(ctx, id, userID)
		}
	}
	return Resource{}, ErrNotFound
}

// Errors a Resolver may return; any error of the same kind works as well.
var (
	ErrNotFound  = errkind.New(errkind.NotFound, "download_not_found", "no such download")
	ErrForbidden = errkind.New(errkind.Forbidden, "download_forbidden", "this account may not download this resource")
	ErrRevoked   = errkind.New(errkind.Gone, "download_revoked", "this download was revoked")
	ErrExpired   = errkind.New(errkind.Gone, "download_expired", "this download has expired")
)

// Errors of the link checks, all 403 (design.md X5).
var (
	errBadLink      = errkind.New(errkind.Forbidden, "invalid_link", "the download link is invalid")
	errLinkExpired  = errkind.New(errkind.Forbidden, "link_expired", "the download link has expired; ask for a new one")
	errUserMismatch = errkind.New(errkind.Forbidden, "link_user_mismatch", "the download link was issued to another user")
	errUserInactive = errkind.New(errkind.Forbidden, "user_inactive", "the account this link was issued to is deactivated")
)

// Storage is the part of s3store the proxy uses. Open must not contact S3
// until the first Read.
type Storage interface {
	Open(ctx context.Context, key string, size int64) *s3store.ObjectReader
}

// Users is the part of users.Service the proxy uses.
type Users interface {
	IsActive(ctx context.Context, id string) (bool, error)
}

// Signer signs and verifies links; *presign.Signer implements it.
type Signer interface {
	Sign(path, resource, user string, ttl time.Duration) url.Values
	Verify(path, resource string, q url.Values) (presign.Claims, error)
}

// Config is what New needs.
type Config struct {
	DB       *gorm.DB
	Storage  Storage
	Users    Users
	Signer   Signer
	Resolver Resolver
	// PublicURL is how clients reach ferry (scheme://host[:port]), for Link.
	PublicURL string
	// LinkTTL is the lifetime of links made by Link.
	LinkTTL time.Duration
	// MaxLinkAddrs: a link used from more distinct client addresses than
	// this is reported as forwarded.
	MaxLinkAddrs int
	Log          *slog.Logger
	Registerer   prometheus.Registerer // nil: metrics are not registered
	Now          func() time.Time
}

// Service is the download proxy. It is safe for concurrent use.
type Service struct {
	c    Config
	m    *metrics
	bufs sync.Pool // *[]byte of chunkSize, for streaming
}

// New returns a Service.
func New(c Config) (*Service, error) {
	if c.DB == nil || c.Storage == nil || c.Users == nil || c.Signer == nil || c.Resolver == nil || c.Log == nil || c.Now == nil {
		return nil, errors.New("download: incomplete config")
	}
	if c.MaxLinkAddrs < 1 {
		return nil, errors.New("download: MaxLinkAddrs must be at least 1")
	}
	s := &Service{c: c, m: newMetrics(c.Registerer)}
	s.bufs.New = func() any { b := make([]byte, chunkSize); return &b }
	return s, nil
}

// Link returns a signed download URL for resource id, issued to userID,
// and when it expires. Issuers (GET /exports/{id}, GET /files) call it once
// they have checked the user's rights; the proxy checks them again on
// every request.
func (s *Service) Link(id, userID string) (string, time.Time) {
	expires := s.c.Now().Add(s.c.LinkTTL).Truncate(time.Second)
	q := s.c.Signer.Sign(PathPrefix+id, id, userID, s.c.LinkTTL)
	return strings.TrimRight(s.c.PublicURL, "/") + PathPrefix + url.PathEscape(id) + "?" + q.Encode(), expires
}

// Request is what the HTTP layer knows about a download request besides
// the *http.Request itself.
type Request struct {
	ID string // the resource id from the path
	// Caller is the user id of a valid session or token sent with the
	// request, or "". The link is the credential; a caller, when present,
	// must be the link's user.
	Caller string
	// RemoteAddr is the client address (behind trusted proxies, the
	// forwarded one).
	RemoteAddr string
}

// Serve answers one GET or HEAD of a download link. It checks, in order:
// the signature, the expiry, that a signed-in caller is the link's user,
// that the user is active, that the resource exists and the user may read
// it now, and that it is not revoked or expired. Then it streams the object
// from S3 with http.ServeContent behind the RFC 9110 pre-filter (see
// ranges.go). fail writes the response for an error (a problem document);
// it must write to the ResponseWriter it is given. Serve records one
// download-log row per call.
func (s *Service) Serve(w http.ResponseWriter, r *http.Request, req Request, fail func(http.ResponseWriter, error)) {
	ctx := r.Context()
	rec := &recorder{w: w, bufs: &s.bufs}
	e := entry{
		resourceID: clip(req.ID, 64), method: r.Method, rangeHeader: clip(strings.Join(r.Header.Values("Range"), ", "), 255),
		remoteAddr: clip(req.RemoteAddr, 64), userAgent: clip(r.UserAgent(), 255), requestID: logctx.RequestID(ctx),
	}
	err := s.serve(rec, r, req, &e)
	if err != nil {
		var ke *errkind.Error
		if errors.As(err, &ke) {
			e.code = ke.Code
		} else if k := errkind.KindOf(err); k != nil {
			e.code = k.Error()
		} else {
			e.code = "internal"
			s.c.Log.ErrorContext(ctx, "download failed", "resource_id", e.resourceID, "err", err)
		}
		rec.startOver()
		fail(rec, err)
	}
	e.status = rec.status
	if e.status == http.StatusOK || e.status == http.StatusPartialContent {
		e.bytes = rec.bytes
	}
	s.record(ctx, e)
}

func (s *Service) serve(rec *recorder, r *http.Request, req Request, e *entry) error {
	ctx := r.Context()
	q := r.URL.Query()
	claims, err := s.c.Signer.Verify(PathPrefix+req.ID, req.ID, q)
	switch {
	case errors.Is(err, presign.ErrExpired):
		return errLinkExpired
	case err != nil:
		return errBadLink
	}
	e.userID = claims.User
	sum := sha256.Sum256([]byte(q.Get("sig")))
	e.linkHash = hex.EncodeToString(sum[:])
	if req.Caller != "" && req.Caller != claims.User {
		return errUserMismatch
	}
	active, err := s.c.Users.IsActive(ctx, claims.User)
	if err != nil {
		return fmt.Errorf("download: user: %w", err)
	}
	if !active {
		return errUserInactive
	}
	res, err := s.c.Resolver.Resolve(ctx, req.ID, claims.User)
	if err != nil {
		return err
	}
	if res.Size < 0 || !isSHA256(res.SHA256) || res.Key == "" {
		return fmt.Errorf("download: resolver returned an unusable resource for %s", req.ID)
	}
	return s.stream(rec, r, res)
}

// stream sends res with http.ServeContent. The object is read lazily: HEAD,
// 304, 412 and 416 answers cost no S3 request, each range costs one ranged
// GET, and nothing asks S3 for the size.
func (s *Service) stream(rec *recorder, r *http.Request, res Resource) error {
	ctx := r.Context()
	obj := s.c.Storage.Open(ctx, res.Key, res.Size)
	defer obj.Close()
	switch code := serveObject(rec, r, res, obj); code {
	case 0:
	case http.StatusRequestedRangeNotSatisfiable:
		return errkind.New(errkind.RangeNotSatisfiable, "range_not_satisfiable",
			"no requested range overlaps the %d bytes of this resource, or the Range header is malformed", res.Size)
	case http.StatusPreconditionFailed:
		return errkind.New(errkind.PreconditionFailed, "precondition_failed", "a precondition (If-Match or If-Unmodified-Since) does not hold")
	default:
		return fmt.Errorf("download: ServeContent answered %d", code)
	}
	if want := rec.Header().Get("Content-Length"); r.Method == http.MethodGet && want != "" && want != strconv.FormatInt(rec.bytes, 10) {
		// The client went away, or S3 failed mid-stream. The headers are
		// gone, so the client sees a short body; the log says which.
		s.c.Log.WarnContext(ctx, "download cut short", "key", res.Key, "sent", rec.bytes, "content_length", want, "err", context.Cause(ctx))
	}
	return nil
}

// object is the content ServeContent reads: *s3store.ObjectReader, or
// anything else that can be told which spans will be read.
type object interface {
	io.ReadSeeker
	Expect(start, length int64)
}

// serveObject sets the representation headers and runs http.ServeContent
// over obj behind the RFC 9110 pre-filter. It returns 0 when the answer was
// sent, or the error status (412, 416, 500) that ServeContent chose and
// that rec held back for the caller to send as a problem document.
func serveObject(rec *recorder, r *http.Request, res Resource, obj object) int {
	etag := `"` + res.SHA256 + `"`
	h := rec.Header()
	h.Set("ETag", etag)
	h.Set("Cache-Control", "private, no-store")
	h.Set("Accept-Ranges", "bytes")
	h.Set("Content-Disposition", contentDisposition(res.Name))
	ct := res.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	// Set, so ServeContent never reads the content to sniff a type.
	h.Set("Content-Type", ct)

	modtime := res.ModTime.UTC().Truncate(time.Second)
	cr := r.Clone(r.Context())
	for _, sp := range conform(cr, etag, modtime, res.Size) {
		obj.Expect(sp.start, sp.length())
	}
	rec.intercept = true
	http.ServeContent(rec, cr, "", modtime, obj)
	rec.intercept = false
	return rec.swallowed
}

func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// clip cuts s to at most n bytes without splitting a UTF-8 sequence.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xc0 == 0x80 {
		n--
	}
	return s[:n]
}

// recorder sits between ServeContent and the real ResponseWriter. It
// counts what is sent, and while intercept is set it holds back error
// answers (412, 416) so that they can be sent as problem documents instead
// of net/http's plain text.
type recorder struct {
	w         http.ResponseWriter
	bufs      *sync.Pool // chunk buffers for ReadFrom
	status    int
	bytes     int64
	intercept bool
	swallowed int
}

func (rw *recorder) Header() http.Header { return rw.w.Header() }

func (rw *recorder) WriteHeader(code int) {
	if rw.status != 0 || rw.swallowed != 0 {
		return
	}
	if rw.intercept && code >= 400 {
		rw.swallowed = code
		return
	}
	rw.status = code
	rw.w.WriteHeader(code)
}

func (rw *recorder) Write(p []byte) (int, error) {
	if rw.status == 0 && rw.swallowed == 0 {
		rw.WriteHeader(http.StatusOK)
	}
	if rw.swallowed != 0 {
		return len(p), nil
	}
	n, err := rw.w.Write(p)
	rw.bytes += int64(n)
	return n, err
}

// ReadFrom is what io.CopyN inside ServeContent calls to stream the
// content: with a larger buffer than io.Copy's 32 KiB, each system call on
// the S3 and the client connection moves more bytes.
func (rw *recorder) ReadFrom(src io.Reader) (int64, error) {
	if rw.bufs == nil {
		return io.Copy(writerOnly{rw}, src)
	}
	buf := rw.bufs.Get().(*[]byte)
	defer rw.bufs.Put(buf)
	return io.CopyBuffer(writerOnly{rw}, src, *buf)
}

// writerOnly hides ReadFrom, so a copy into it does not call it back.
type writerOnly struct{ io.Writer }

// chunkSize is the copy buffer of one download.
const chunkSize = 256 << 10

// startOver prepares for an error answer: the resource's headers no longer
// apply (Content-Range of a 416 does, and stays).
func (rw *recorder) startOver() {
	rw.swallowed, rw.intercept, rw.bytes = 0, false, 0
	h := rw.w.Header()
	for _, k := range []string{"Etag", "Last-Modified", "Content-Disposition", "Accept-Ranges", "Content-Type", "Content-Length"} {
		h.Del(k)
	}
}
