package models

import (
	"context"
	"encoding/base32"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/glebarez/sqlite"
	mysqldrv "github.com/go-sql-driver/mysql"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/ferry-io/ferry/internal/random"
)

// Dialects. They match config.DriverSQLite and config.DriverMySQL.
const (
	SQLite = "sqlite"
	MySQL  = "mysql"
)

// Open connects to the database and checks that it answers. For SQLite, dsn
// is a file path (its directory is created) or a file: URI.
func Open(ctx context.Context, driver, dsn string, log *slog.Logger) (*gorm.DB, error) {
	gcfg := &gorm.Config{
		Logger:                 gormLogger{log: log},
		NowFunc:                func() time.Time { return Time(time.Now()) },
		SkipDefaultTransaction: true,
		TranslateError:         true,
	}
	var dial gorm.Dialector
	switch driver {
	case SQLite:
		d, err := sqliteDSN(dsn)
		if err != nil {
			return nil, err
		}
		dial = sqlite.Open(d)
	case MySQL:
		dial = mysql.Open(dsn)
	default:
		return nil, fmt.Errorf("models: unknown driver %q", driver)
	}
	db, err := gorm.Open(dial, gcfg)
	if err != nil {
		return nil, fmt.Errorf("open %s database: %w", driver, describeDBError(err))
	}
	if err := registerUnavailable(db); err != nil {
		return nil, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	if driver == MySQL {
		sqlDB.SetMaxOpenConns(32)
		sqlDB.SetMaxIdleConns(8)
		sqlDB.SetConnMaxLifetime(5 * time.Minute)
	} else {
		// WAL lets readers run beside the one writer; more connections
		// than this only queue on SQLite's write lock.
		sqlDB.SetMaxOpenConns(sqliteConns)
		// All of them stay open when idle. With database/sql's default
		// of 2 idle, a burst closed the surplus as each query ended, and
		// a new connection pays for opening the file and its pragmas
		// again. Closing one just after its query's context ended also
		// races, in the driver (glebarez/go-sqlite), the goroutine that
		// interrupts that query: -race caught it in a CI run.
		sqlDB.SetMaxIdleConns(sqliteConns)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := sqlDB.PingContext(pctx); err != nil {
		sqlDB.Close()
		return nil, fmt.Errorf("open %s database: %w", driver, describeDBError(err))
	}
	return db, nil
}

// sqliteConns is the size of a SQLite database's connection pool.
const sqliteConns = 8

// sqliteDSN turns a path into a URI with the pragmas ferry relies on: WAL
// for concurrent readers, a busy timeout so writers queue instead of failing,
// and immediate transactions so a read-then-write transaction takes the
// write lock up front (deferred ones can fail with SQLITE_BUSY on upgrade,
// which no timeout helps).
func sqliteDSN(dsn string) (string, error) {
	path := dsn
	query := url.Values{}
	if strings.HasPrefix(dsn, "file:") {
		p, q, _ := strings.Cut(strings.TrimPrefix(dsn, "file:"), "?")
		path = p
		var err error
		if query, err = url.ParseQuery(q); err != nil {
			return "", fmt.Errorf("sqlite dsn: %w", err)
		}
	}
	if path != ":memory:" && path != "" {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return "", fmt.Errorf("sqlite: %w", err)
		}
	}
	if !query.Has("_pragma") {
		for _, p := range []string{"busy_timeout(10000)", "journal_mode(WAL)", "foreign_keys(1)", "synchronous(NORMAL)"} {
			query.Add("_pragma", p)
		}
	}
	if !query.Has("_txlock") {
		query.Set("_txlock", "immediate")
	}
	return "file:" + path + "?" + query.Encode(), nil
}

// describeDBError keeps connection errors on one line and free of secrets.
func describeDBError(err error) error {
	var me *mysqldrv.MySQLError
	if errors.As(err, &me) {
		return fmt.Errorf("mysql error %d: %s", me.Number, me.Message)
	}
	return err
}

// Dialect reports which engine db talks to.
func Dialect(db *gorm.DB) string {
	if db.Dialector.Name() == "mysql" {
		return MySQL
	}
	return SQLite
}

// Time normalises t for storage: UTC, microsecond precision (MySQL's
// DATETIME(6)), so a value read back equals the value written and string
// comparison on SQLite orders correctly.
func Time(t time.Time) time.Time {
	return t.UTC().Truncate(time.Microsecond)
}

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewID returns a random identifier with a type prefix, such as
// "upl_3kq…". 15 random bytes give 120 bits: unguessable, so ids can appear
// in URLs, and the prefix tells an upload from an export at a glance.
func NewID(prefix string) string {
	return prefix + "_" + idEncoding.EncodeToString(random.Bytes(15))
}

// IsDuplicate reports whether err is a unique-constraint violation.
func IsDuplicate(err error) bool {
	return errors.Is(err, gorm.ErrDuplicatedKey)
}

type gormLogger struct{ log *slog.Logger }

func (l gormLogger) LogMode(logger.LogLevel) logger.Interface { return l }
func (l gormLogger) Info(ctx context.Context, msg string, args ...any) {
	l.log.DebugContext(ctx, "gorm", "msg", fmt.Sprintf(msg, args...))
}
func (l gormLogger) Warn(ctx context.Context, msg string, args ...any) {
	l.log.WarnContext(ctx, "gorm", "msg", fmt.Sprintf(msg, args...))
}
func (l gormLogger) Error(ctx context.Context, msg string, args ...any) {
	l.log.ErrorContext(ctx, "gorm", "msg", fmt.Sprintf(msg, args...))
}

// Trace logs slow statements at warn and everything at debug. Not-found
// errors are expected control flow and are not logged as errors.
func (l gormLogger) Trace(ctx context.Context, begin time.Time, fc func() (string, int64), err error) {
	elapsed := time.Since(begin)
	switch {
	case err != nil && !errors.Is(err, gorm.ErrRecordNotFound) && !errors.Is(err, context.Canceled):
		sql, rows := fc()
		l.log.DebugContext(ctx, "sql error", "sql", sql, "rows", rows, "err", err, "elapsed", elapsed)
	case elapsed > time.Second:
		sql, rows := fc()
		l.log.WarnContext(ctx, "slow sql", "sql", sql, "rows", rows, "elapsed", elapsed)
	case l.log.Enabled(ctx, slog.LevelDebug-4):
		sql, rows := fc()
		l.log.Log(ctx, slog.LevelDebug-4, "sql", "sql", sql, "rows", rows, "elapsed", elapsed)
	}
}
