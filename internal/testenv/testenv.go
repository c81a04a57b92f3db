package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/s3store"
	"github.com/ferry-io/ferry/s3store/embedded"
)

// DB is a migrated test database.
type DB struct {
	Dialect string
	DSN     string // what models.Open takes, for child processes
	*gorm.DB
}

// Logger returns a logger that writes to the test log at debug level when
// FERRY_TEST_LOG=1, and discards otherwise.
func Logger(t testing.TB) *slog.Logger {
	if os.Getenv("FERRY_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// ForEachDB runs fn as a subtest on a fresh SQLite database and on a fresh
// MySQL database.
func ForEachDB(t *testing.T, fn func(t *testing.T, db *DB)) {
	t.Helper()
	for _, dialect := range []string{models.SQLite, models.MySQL} {
		t.Run(dialect, func(t *testing.T) {
			fn(t, NewDB(t, dialect))
		})
	}
}

// NewDB returns a fresh, migrated database of the given dialect.
func NewDB(t testing.TB, dialect string) *DB {
	t.Helper()
	var dsn string
	switch dialect {
	case models.SQLite:
		dsn = filepath.Join(absTempDir(t), "ferry.db")
	case models.MySQL:
		dsn = MySQLDatabase(t)
	}
	db, err := models.Open(context.Background(), dialect, dsn, Logger(t))
	if err != nil {
		t.Fatalf("open %s: %v", dialect, err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	})
	if _, err := models.Migrate(context.Background(), db); err != nil {
		t.Fatalf("migrate %s: %v", dialect, err)
	}
	return &DB{Dialect: dialect, DSN: dsn, DB: db}
}

// MySQLServerDSN returns the configured server DSN (no database chosen), or
// skips the test (fails it when MySQL is required).
func MySQLServerDSN(t testing.TB) *mysql.Config {
	t.Helper()
	raw := os.Getenv("FERRY_TEST_MYSQL_DSN")
	if raw == "" {
		raw = "root@tcp(127.0.0.1:3306)/test"
	}
	cfg, err := mysql.ParseDSN(raw)
	if err != nil {
		t.Fatalf("FERRY_TEST_MYSQL_DSN: %v", err)
	}
	if c, err := net.DialTimeout("tcp", cfg.Addr, time.Second); err != nil {
		if os.Getenv("FERRY_TEST_REQUIRE_MYSQL") == "1" {
			t.Fatalf("MySQL required (FERRY_TEST_REQUIRE_MYSQL=1) but %s is unreachable: %v", cfg.Addr, err)
		}
		t.Skipf("MySQL at %s unreachable; set FERRY_TEST_MYSQL_DSN to run MySQL tests", cfg.Addr)
	} else {
		c.Close()
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	return cfg
}

// MySQLDatabase creates a fresh database, drops it when the test ends, and
// returns a DSN for it.
func MySQLDatabase(t testing.TB) string {
	t.Helper()
	cfg := MySQLServerDSN(t)
	admin, err := models.Open(context.Background(), models.MySQL, cfg.FormatDSN(), slog.New(slog.DiscardHandler))
	if err != nil {
		if os.Getenv("FERRY_TEST_REQUIRE_MYSQL") == "1" {
			t.Fatalf("MySQL required but unusable: %v", err)
		}
		t.Skipf("MySQL unusable: %v", err)
	}
	name := "ferry_t_" + RandomHex(6)
	if err := admin.Exec("CREATE DATABASE " + name + " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin").Error; err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		admin.Exec("DROP DATABASE IF EXISTS " + name)
		if sqlDB, err := admin.DB(); err == nil {
			sqlDB.Close()
		}
	})
	cfg.DBName = name
	return cfg.FormatDSN()
}

// S3Server describes the S3 endpoint tests use.
type S3Server struct {
	Endpoint  string
	AccessKey string
	SecretKey string
}

var (
	s3Once   sync.Once
	s3Shared S3Server
	s3Err    error
)

// S3 returns the test process's S3 server, starting the embedded one on
// first use.
func S3(t testing.TB) S3Server {
	t.Helper()
	if ep := os.Getenv("FERRY_TEST_S3_ENDPOINT"); ep != "" {
		return S3Server{Endpoint: ep, AccessKey: os.Getenv("FERRY_TEST_S3_ACCESS_KEY"), SecretKey: os.Getenv("FERRY_TEST_S3_SECRET_KEY")}
	}
	s3Once.Do(func() {
		dir, err := os.MkdirTemp("", "ferry-test-s3-")
		if err != nil {
			s3Err = err
			return
		}
		addr := FreeAddr(t)
		// The server lives as long as the test process; its directory is
		// removed by the OS temp cleaner, not by us, since other tests may
		// still be using it when any single test ends.
		srv, err := embedded.Start(context.Background(), dir, addr)
		if err != nil {
			s3Err = err
			return
		}
		s3Shared = S3Server{Endpoint: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}
	})
	if s3Err != nil {
		t.Fatalf("embedded s3: %v", s3Err)
	}
	return s3Shared
}

// Store returns an s3store over a fresh bucket on the test S3 server.
func Store(t testing.TB) *s3store.Store {
	t.Helper()
	return StoreFor(t, S3(t), "t-"+RandomHex(6))
}

// StoreFor returns an s3store over bucket on srv, creating the bucket.
func StoreFor(t testing.TB, srv S3Server, bucket string) *s3store.Store {
	t.Helper()
	ctx := context.Background()
	st, err := s3store.New(ctx, s3store.Config{
		Endpoint: srv.Endpoint, PublicEndpoint: srv.Endpoint, Region: "us-east-1", Bucket: bucket,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PathStyle: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Bootstrap(ctx, s3store.BootstrapOptions{Create: true, Region: "us-east-1"}); err != nil {
		t.Fatalf("bootstrap bucket %s: %v", bucket, err)
	}
	return st
}

// FreeAddr returns a 127.0.0.1 address with a port that was free a moment
// ago, for a process the test starts to listen on. The port comes from
// below the kernel's ephemeral range (ip_local_port_range): a port ":0"
// hands out is in that range, and an outgoing connection of a test
// running beside this one could take it before the process binds it (a
// ferry then failed to start with "address already in use"). Outgoing
// connections never take a port below the range.
func FreeAddr(t testing.TB) string {
	t.Helper()
	const floor = 10000
	if lo := ephemeralLow(); lo > floor+1000 {
		for range 100 {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", floor+mrand.IntN(lo-floor)))
			if err == nil {
				addr := l.Addr().String()
				l.Close()
				return addr
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// ephemeralLow is the first port of the kernel's ephemeral range, or 0
// where it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil {
		return 0
	}
	return lo
}

// RandomHex returns 2n random hex characters.
func RandomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// absTempDir is t.TempDir made absolute up front: t.TempDir is already
// absolute, but this documents the requirement next to its only use.
func absTempDir(t testing.TB) string {
	d := t.TempDir()
	if !filepath.IsAbs(d) {
		panic(fmt.Sprintf("temp dir %q is not absolute", d))
	}
	return d
}

// PostForm sends a browser-style multipart/form-data POST to url (an S3
// POST-policy upload, s3store.EncodeForm): the fields first, then file in
// a field named "file". It returns the status and the body.
func PostForm(t testing.TB, url string, fields map[string]string, file []byte) (int, string) {
	t.Helper()
	body, ct := s3store.EncodeForm(fields, file)
	resp, err := http.Post(url, ct, body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Must returns v, panicking on err: for constructors whose only error is
// a missing dependency, which a test that passes them cannot meet.
func Must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
