package download

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
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
	SHA256      string    // lowercase hex; the strong ETag (empty: StoreETag serves instead)
	Name        string    // the file name offered in Content-Disposition
	ContentType string    // empty means application/octet-stream
	ModTime     time.Time // Last-Modified
	// StoreETag, when set, is the S3 ETag the object had when its SHA-256
	// was computed. Every GET then asks S3 for exactly that version
	// (If-Match), so bytes changed behind ferry's back are never served
	// under the SHA-256 ETag: the read fails instead, and is logged.
	StoreETag string
	// CRC32C, when set with SHA256, is the base64 CRC32C of the same
	// bytes. It is sent as Repr-Digest (RFC 9530), so a client can check
	// what it received without computing a SHA-256 of its own.
	CRC32C string
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

// Errors of the link checks, all 403 (docs/downloads.md, "What each
// request is checked for").
var (
	errBadLink      = errkind.New(errkind.Forbidden, "invalid_link", "the download link is invalid")
	errLinkExpired  = errkind.New(errkind.Forbidden, "link_expired", "the download link has expired; ask for a new one")
	errUserMismatch = errkind.New(errkind.Forbidden, "link_user_mismatch", "the download link was issued to another user")
	errUserInactive = errkind.New(errkind.Forbidden, "user_inactive", "the account this link was issued to is deactivated")
)

// Storage opens stored objects for the proxy; *s3store.Store implements
// it. Open must not contact the store until the first Read; key is size
// bytes long, and when etag is set every read must fail (with
// s3store.ErrPreconditionFailed) rather than return bytes of an object
// whose ETag is no longer etag. A reader that also implements
// Expect(start, length int64) is told the spans that will be read, so it
// can ask for exactly those; one that implements Err() error reports a
// read failure that http.ServeContent swallowed.
type Storage interface {
	Open(ctx context.Context, key string, size int64, etag string) io.ReadSeekCloser
}

// Users is the part of users.Service the proxy uses.
type Users interface {
	IsActive(ctx context.Context, id string) (bool, error)
}

// Signer signs and verifies links; *presign.Signer implements it. Links
// signs them; the proxy verifies them.
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
	// MaxLinkAddrs: a link used from more distinct client addresses than
	// this is reported as forwarded.
	MaxLinkAddrs int
	// LogRetention is how long download-log rows are kept (default 30
	// days); PruneEvery is how often the pruning job runs (default hourly).
	LogRetention time.Duration
	PruneEvery   time.Duration
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
	if c.LogRetention <= 0 {
		c.LogRetention = DefaultLogRetention
	}
	if c.PruneEvery <= 0 {
		c.PruneEvery = time.Hour
	}
	s := &Service{c: c, m: newMetrics(c.Registerer)}
	s.bufs.New = func() any { b := make([]byte, chunkSize); return &b }
	return s, nil
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
// it must write to the ResponseWriter it is given. Serve counts every call
// in the metrics and writes a download-log row for each call whose link
// ferry signed and is still valid. It returns the bytes of the answer's
// body it sent: some may bypass w (see recorder.ReadFrom), so w's own
// count can fall short.
func (s *Service) Serve(w http.ResponseWriter, r *http.Request, req Request, fail func(http.ResponseWriter, error)) (sent int64) {
	ctx := r.Context()
	rec := &recorder{w: w, bufs: &s.bufs, plain: r.TLS == nil}
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
	s.m.spliced.Add(float64(rec.spliced))
	s.record(ctx, e)
	return rec.bytes
}

func (s *Service) serve(rec *recorder, r *http.Request, req Request, e *entry) error {
	ctx := r.Context()
	q := r.URL.Query()
	claims, err := s.c.Signer.Verify(PathPrefix+req.ID, req.ID, q)
	switch {
	case errors.Is(err, presign.ErrExpired):
		e.refusedLink = "expired"
		return errLinkExpired
	case err != nil:
		e.refusedLink = "invalid"
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
	if res.Size < 0 || res.Key == "" || !isSHA256(res.SHA256) && (res.SHA256 != "" || res.StoreETag == "") {
		return fmt.Errorf("download: resolver returned an unusable resource for %s", req.ID)
	}
	return s.stream(rec, r, res)
}

// stream sends res with http.ServeContent. The object is read lazily: HEAD,
// 304, 412 and 416 answers cost no S3 request, each range costs one ranged
// GET, and nothing asks S3 for the size.
func (s *Service) stream(rec *recorder, r *http.Request, res Resource) error {
	ctx := r.Context()
	obj := s.c.Storage.Open(ctx, res.Key, res.Size, res.StoreETag)
	defer obj.Close()
	code := serveObject(rec, r, res, obj)
	if rec.openErr != nil {
		// No header went out: the client gets a problem, not a 200 that
		// ends after no bytes.
		switch {
		case errors.Is(rec.openErr, s3store.ErrUnavailable):
			return &errkind.Error{Kind: errkind.Unavailable, Code: "storage_unavailable",
				Detail: "the object store is unavailable; retry later", Err: rec.openErr}
		case errors.Is(rec.openErr, s3store.ErrPreconditionFailed):
			s.objectChanged(ctx, res)
		}
		return fmt.Errorf("download: open %s (%s): %w", res.Key, r.URL.Path, rec.openErr)
	}
	switch code {
	case 0:
	case http.StatusRequestedRangeNotSatisfiable:
		return errkind.New(errkind.RangeNotSatisfiable, "range_not_satisfiable",
			"no requested range overlaps the %d bytes of this resource, or the Range header is malformed", res.Size)
	case http.StatusPreconditionFailed:
		return errkind.New(errkind.PreconditionFailed, "precondition_failed", "a precondition (If-Match or If-Unmodified-Since) does not hold")
	default:
		return fmt.Errorf("download: ServeContent answered %d", code)
	}
	if e, ok := obj.(interface{ Err() error }); ok && errors.Is(e.Err(), s3store.ErrPreconditionFailed) {
		s.objectChanged(ctx, res) // in a later part of a multipart answer
	}
	if want := rec.Header().Get("Content-Length"); r.Method == http.MethodGet && want != "" && want != strconv.FormatInt(rec.bytes, 10) {
		// The client went away, or S3 failed mid-stream. The headers are
		// gone, so the client sees a short body; the log says which.
		s.c.Log.WarnContext(ctx, "download cut short", "key", res.Key, "sent", rec.bytes, "content_length", want, "err", context.Cause(ctx))
	}
	return nil
}

// objectChanged records that res's object is not the version whose
// SHA-256 ferry recorded: a bug or a write to the bucket behind ferry's
// back. Not one byte of it was sent.
func (s *Service) objectChanged(ctx context.Context, res Resource) {
	s.m.changed.Inc()
	s.c.Log.ErrorContext(ctx, "stored object changed since it was verified; not served", "key", res.Key, "store_etag", res.StoreETag)
}

// expecter is a reader that can be told which spans will be read
// (*s3store.ObjectReader is one).
type expecter interface {
	Expect(start, length int64)
}

// serveObject sets the representation headers and runs http.ServeContent
// over obj behind the RFC 9110 pre-filter. It returns 0 when the answer was
// sent, or the error status (412, 416, 500) that ServeContent chose and
// that rec held back for the caller to send as a problem document.
func serveObject(rec *recorder, r *http.Request, res Resource, obj io.ReadSeeker) int {
	etag := strongETag(res)
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
	if d := reprDigest(res); d != "" {
		h.Set("Repr-Digest", d)
	}

	modtime := res.ModTime.UTC().Truncate(time.Second)
	cr := r.Clone(r.Context())
	spans := conform(cr, etag, modtime, res.Size)
	if e, ok := obj.(expecter); ok {
		for _, sp := range spans {
			e.Expect(sp.start, sp.length())
		}
	}
	g := &openedFirst{ReadSeeker: obj}
	if r.Method == http.MethodGet {
		// Before a 200 or 206 goes out, the GET of the first byte range is
		// made; one that fails (the object is gone, S3 is down) becomes an
		// error answer instead of headers promising bytes that never come.
		// The same GET then streams the body, so this costs no request.
		first := int64(0)
		if len(spans) > 0 {
			first = spans[0].start
		}
		rec.open = func() error { return g.open(first) }
	}
	rec.intercept = true
	http.ServeContent(rec, cr, "", modtime, g)
	rec.intercept = false
	return rec.swallowed
}

// openedFirst is the object ServeContent reads. open makes its first GET
// ahead of the headers; after a failed open every Read fails with the same
// error, so ServeContent, which copies the body whatever WriteHeader did,
// does not try S3 again.
type openedFirst struct {
	io.ReadSeeker
	err error
}

// open positions the object at off and issues its GET there: an
// *s3store.ObjectReader opens its ranged GET on a Read, even one of no
// bytes. A zero-length object has nothing to open.
func (o *openedFirst) open(off int64) error {
	if _, err := o.Seek(off, io.SeekStart); err != nil {
		o.err = err
		return err
	}
	if _, err := o.ReadSeeker.Read(nil); err != nil && !errors.Is(err, io.EOF) {
		o.err = err
		return err
	}
	return nil
}

func (o *openedFirst) Read(p []byte) (int, error) {
	if o.err != nil {
		return 0, o.err
	}
	return o.ReadSeeker.Read(p)
}

// sender is an object that can send its bytes to a connection's writer
// itself (*s3store.ObjectReader, socket to socket where it can).
type sender interface {
	SendTo(w io.Writer, n int64, buf []byte) (int64, error)
	Spliced() int64
}

// sender returns the object as a sender, when it is one and opened.
func (o *openedFirst) sender() (sender, bool) {
	s, ok := o.ReadSeeker.(sender)
	return s, ok && o.err == nil
}

// strongETag is the content's SHA-256 when ferry has computed it; a file
// not verified yet (served to its owner only) is tagged with its object's
// S3 ETag instead, which is just as strong for the stored version. The two
// differ, so a download resumed across the verification starts over (200)
// rather than splicing.
func strongETag(res Resource) string {
	if res.SHA256 != "" {
		return `"` + res.SHA256 + `"`
	}
	return `"s3-` + strings.Trim(res.StoreETag, `"`) + `"`
}

// reprDigest is the Repr-Digest field (RFC 9530) of a verified resource
// whose CRC32C ferry computed: a dictionary with one byte sequence,
// crc32c=:AAAAAA==:. It describes the whole representation, so it is sent
// with 206 answers too, and a resumed download checks the whole file.
// crc32c is registered as deprecated for security uses; here it guards
// against damage in transit and on the client's disk, as SHA-256 did, and
// the strong ETag still names the content by its SHA-256.
func reprDigest(res Resource) string {
	if res.SHA256 == "" || !isCRC32C(res.CRC32C) {
		return ""
	}
	return "crc32c=:" + res.CRC32C + ":"
}

// isCRC32C reports whether s is the base64 of four bytes.
func isCRC32C(s string) bool {
	b, err := base64.StdEncoding.DecodeString(s)
	return err == nil && len(b) == 4
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
	plain     bool       // the request came over plain TCP, not TLS
	status    int
	bytes     int64
	spliced   int64 // of bytes, those that went from S3's socket to the client's
	intercept bool
	swallowed int
	// open, when set, runs before a 200 or 206 is written while
	// intercepting; if it fails, openErr keeps why and the status is held
	// back like an error's.
	open    func() error
	openErr error
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
	if rw.intercept && rw.open != nil && (code == http.StatusOK || code == http.StatusPartialContent) {
		if err := rw.open(); err != nil {
			rw.openErr, rw.swallowed = err, http.StatusInternalServerError
			return
		}
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
// content (src is then an *io.LimitedReader over the object). The object
// sends a single range straight to the connection's own writer (net/http's,
// under gin's), whose ReadFrom can take S3's socket and splice(2) the
// bytes to the client's; over TLS it could not, and a multipart answer's
// parts come through a pipe. Otherwise a larger buffer than io.Copy's 32
// KiB makes each system call on either connection move more bytes.
func (rw *recorder) ReadFrom(src io.Reader) (int64, error) {
	if rw.bufs == nil {
		return io.Copy(writerOnly{rw}, src)
	}
	buf := rw.bufs.Get().(*[]byte)
	defer rw.bufs.Put(buf)
	if n, sent, err := rw.send(src, *buf); sent {
		return n, err
	}
	return io.CopyBuffer(writerOnly{rw}, src, *buf)
}

// send lets the object send src's bytes to the connection's own writer;
// sent is false when src is not a range of one, or the answer cannot go
// that way, and nothing was written.
func (rw *recorder) send(src io.Reader, buf []byte) (n int64, sent bool, err error) {
	lr, ok := src.(*io.LimitedReader)
	if !ok || !rw.plain || rw.status == 0 || rw.swallowed != 0 {
		return 0, false, nil
	}
	o, ok := lr.R.(*openedFirst)
	if !ok {
		return 0, false, nil
	}
	s, ok := o.sender()
	cw := connWriter(rw.w)
	if !ok || cw == nil {
		return 0, false, nil
	}
	// Whatever rw.w's wrappers hold back (gin holds the status line) goes
	// out before the connection is written to under them.
	if err := http.NewResponseController(rw.w).Flush(); err != nil {
		return 0, true, err
	}
	before := s.Spliced()
	n, err = s.SendTo(cw, lr.N, buf)
	lr.N -= n
	rw.bytes += n
	rw.spliced += s.Spliced() - before
	if errors.Is(err, io.EOF) {
		err = nil // as io.Copy: the source ended
	}
	return n, true, err
}

// connWriter unwraps w to the connection's own ResponseWriter when that
// one can take a reader itself (io.ReaderFrom, as net/http's does), or
// returns nil.
func connWriter(w http.ResponseWriter) http.ResponseWriter {
	for {
		if _, ok := w.(io.ReaderFrom); ok {
			return w
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
}

// writerOnly hides ReadFrom, so a copy into it does not call it back.
type writerOnly struct{ io.Writer }

// chunkSize is the copy buffer of one download, for the answers that are
// copied rather than spliced (an HTTPS store, say). At 1 MiB the proxy's
// CPU per GiB copied (BenchmarkProxyVsDirect, 512 MiB objects) fell from
// 0.37–0.45 s with 256 KiB to 0.30 s, fewer and fuller system calls on
// both sockets, and 32 concurrent copied downloads (BenchmarkConcurrent32)
// peaked at 89 MiB RSS, within the 128 MiB the proxy is held to.
const chunkSize = 1 << 20

// startOver prepares for an error answer: the resource's headers no longer
// apply (Content-Range of a 416 does, and stays).
func (rw *recorder) startOver() {
	rw.swallowed, rw.intercept, rw.bytes, rw.open = 0, false, 0, nil
	h := rw.w.Header()
	for _, k := range []string{"Etag", "Last-Modified", "Content-Disposition", "Accept-Ranges", "Content-Type", "Content-Length"} {
		h.Del(k)
	}
}
