package download_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-io/ferry/download"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/presign"
	"github.com/ferry-io/ferry/s3store"
	"github.com/ferry-io/ferry/server"
	"github.com/ferry-io/ferry/users"
)

var _ download.Users = (*users.Service)(nil)
var _ download.Signer = (*presign.Signer)(nil)

const (
	keyK1 = "k1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
	keyK2 = "k2:ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA="
)

// standIn is a STAND-IN for the export and upload packages, which are
// being built on other branches: a map from id to an object the test put in
// the real S3, with an owner and a state. It implements the Resolver
// contract (404 unknown, 403 not the owner, 410 revoked or expired) and
// nothing else; the real resolvers replace it in cmd/ferry.
type standIn struct {
	mu    sync.Mutex
	items map[string]*standInItem
	calls int
}

type standInItem struct {
	owner string
	state string // "done", "revoked", "expired"
	res   download.Resource
}

func (s *standIn) Resolve(_ context.Context, id, userID string) (download.Resource, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	it, ok := s.items[id]
	switch {
	case !ok:
		return download.Resource{}, download.ErrNotFound
	case it.owner != userID:
		return download.Resource{}, download.ErrForbidden
	case it.state == "revoked":
		return download.Resource{}, download.ErrRevoked
	case it.state == "expired":
		return download.Resource{}, download.ErrExpired
	}
	return it.res, nil
}

func (s *standIn) setState(id, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.items[id].state = state
}

// clock is the injected time of the signer and the service.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// logCapture keeps warnings, and the bytes of each access-log line, so
// tests can see them.
type logCapture struct {
	mu     sync.Mutex
	msgs   []string
	access []int64 // the "bytes" of each "http request" line
}

func (l *logCapture) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCapture) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.Level >= slog.LevelWarn {
		l.msgs = append(l.msgs, r.Message)
	}
	if r.Message == "http request" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "bytes" {
				l.access = append(l.access, a.Value.Int64())
			}
			return true
		})
	}
	return nil
}

// accessLines is how many access-log lines there are.
func (l *logCapture) accessLines() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.access)
}

// accessBytes is the "bytes" of access-log line i, waiting up to 5s for
// it: the line is written after the client has its answer.
func (l *logCapture) accessBytes(i int) (int64, bool) {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		l.mu.Lock()
		if i < len(l.access) {
			defer l.mu.Unlock()
			return l.access[i], true
		}
		l.mu.Unlock()
	}
	return 0, false
}
func (l *logCapture) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCapture) WithGroup(string) slog.Handler      { return l }
func (l *logCapture) warnings() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.msgs, "\n")
}

// env is ferry's real HTTP router with the real download service, users
// service, database and S3, serving on a real 127.0.0.1 listener.
type env struct {
	t       *testing.T
	db      *testenv.DB
	store   *s3store.Store
	users   *users.Service
	clock   *clock
	res     *standIn
	reg     *prometheus.Registry
	logs    *logCapture
	svc     *download.Service
	links   *download.Links
	srv     *httptest.Server
	maxAddr int
	// pruneEvery is the download-log pruning period of servers started
	// from now on (0: the default).
	pruneEvery time.Duration
}

func newEnv(t *testing.T, db *testenv.DB) *env {
	t.Helper()
	e := &env{
		t: t, db: db, store: testenv.Store(t), clock: &clock{t: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)},
		res: &standIn{items: map[string]*standInItem{}}, logs: &logCapture{}, maxAddr: 2,
	}
	e.users = testenv.Must(users.New(users.Config{DB: db.DB, Now: e.clock.Now, SessionTTL: time.Hour}))
	e.svc, e.reg, e.srv = e.serve(keyK1)
	return e
}

// serve starts another server over the same state whose signer holds keys.
func (e *env) serve(keys string) (*download.Service, *prometheus.Registry, *httptest.Server) {
	e.t.Helper()
	ks, err := presign.ParseKeys(keys)
	if err != nil {
		e.t.Fatal(err)
	}
	signer, _ := presign.NewSigner(ks, e.clock.Now)
	e.links, _ = download.NewLinks(download.LinksConfig{Signer: signer, PublicURL: "http://placeholder", TTL: 300 * time.Second})
	reg := prometheus.NewRegistry()
	log := slog.New(e.logs)
	svc, err := download.New(download.Config{
		DB: e.db.DB, Storage: e.store, Users: e.users, Signer: signer,
		Resolver:     download.Routes{"exp_": e.res, "fil_": e.res},
		MaxLinkAddrs: e.maxAddr,
		PruneEvery:   e.pruneEvery, Log: log, Registerer: reg, Now: e.clock.Now,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	api, err := server.New(server.Deps{
		Log: log, Users: e.users, Downloads: svc, Gatherer: reg, Registerer: reg,
		MaxBodyBytes: 1 << 20, Origins: []string{"http://placeholder"},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	e.t.Cleanup(srv.Close)
	return svc, reg, srv
}

// user creates an active user and returns its id and token.
func (e *env) user(name string) (string, string) {
	e.t.Helper()
	u, tok, err := e.users.Create(context.Background(), name, false)
	if err != nil {
		e.t.Fatal(err)
	}
	return u.ID, tok
}

// put stores data in S3 and registers it with the stand-in as id, owned by
// owner, and returns its hex SHA-256.
func (e *env) put(id, owner string, data []byte, name string) string {
	e.t.Helper()
	key := "objects/" + id
	if err := e.store.Put(context.Background(), key, bytes.NewReader(data), int64(len(data)), ""); err != nil {
		e.t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	e.res.mu.Lock()
	e.res.items[id] = &standInItem{owner: owner, state: "done", res: download.Resource{
		Key: key, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:]), Name: name,
		ContentType: "application/gzip", ModTime: time.Date(2026, 10, 30, 8, 0, 0, 123_000_000, time.UTC),
	}}
	e.res.mu.Unlock()
	return hex.EncodeToString(sum[:])
}

// link returns a signed URL for id on srv.
func (e *env) link(_ *download.Service, srv *httptest.Server, id, user string) string {
	return srv.URL + strings.TrimPrefix(e.links.Link(id, user).URL, "http://placeholder")
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request with header pairs.
func do(t *testing.T, method, url string, kv ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Add(kv[i], kv[i+1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, body}
}

func randomData(t testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}
