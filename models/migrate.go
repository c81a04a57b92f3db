package models

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"time"

	"gorm.io/gorm"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migration is one numbered schema change.
type Migration struct {
	Version int
	Name    string
	SQL     string // the template source
}

// Migrations lists the embedded migrations in order.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".sql")
		num, rest, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must be NNNN_description.sql", e.Name())
		}
		src, err := migrationFiles.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: rest, SQL: string(src)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("two migrations numbered %d", out[i].Version)
		}
	}
	return out, nil
}

// dialectFuncs are the template functions that spell engine-specific types.
func dialectFuncs(dialect string) template.FuncMap {
	my := dialect == MySQL
	pick := func(mysql, sqlite string) func() string {
		return func() string {
			if my {
				return mysql
			}
			return sqlite
		}
	}
	return template.FuncMap{
		// pk: an auto-increment 64-bit primary key.
		"pk": pick("BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY", "INTEGER PRIMARY KEY AUTOINCREMENT"),
		// ts: a timestamp with microseconds, stored in UTC.
		"ts": pick("DATETIME(6)", "DATETIME"),
		// text: up to 16 MiB of text.
		"text": pick("MEDIUMTEXT", "TEXT"),
		// opts: table options. utf8mb4_bin is case- and accent-sensitive
		// but PAD SPACE: 'abc' = 'abc ' on MySQL. Identity columns use
		// exact instead.
		"opts": pick("ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin", ""),
		// exact N: a column of at most N bytes that compares byte for byte,
		// for ids, keys, hashes and names: VARBINARY on MySQL, where every
		// text collation of utf8mb4 that both MySQL 8 and MariaDB have pads
		// with spaces; TEXT affinity (BINARY collation, exact) on SQLite.
		"exact": func(n int) string {
			if my {
				return fmt.Sprintf("VARBINARY(%d)", n)
			}
			return fmt.Sprintf("VARCHAR(%d)", n)
		},
		// mysql: for the rare change the two engines spell differently
		// ({{if mysql}}…{{else}}…{{end}}), such as making a column
		// nullable, which SQLite can only do by rebuilding the table.
		"mysql": func() bool { return my },
	}
}

// Render expands a migration for one dialect into statements.
func (m Migration) Render(dialect string) ([]string, error) {
	t, err := template.New(m.Name).Funcs(dialectFuncs(dialect)).Parse(m.SQL)
	if err != nil {
		return nil, fmt.Errorf("migration %04d: %w", m.Version, err)
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, nil); err != nil {
		return nil, fmt.Errorf("migration %04d: %w", m.Version, err)
	}
	var stmts []string
	for _, s := range strings.Split(buf.String(), ";\n") {
		var lines []string
		for _, l := range strings.Split(s, "\n") {
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "--") {
				lines = append(lines, l)
			}
		}
		if stmt := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(strings.Join(lines, "\n")), ";")); stmt != "" {
			stmts = append(stmts, stmt)
		}
	}
	return stmts, nil
}

// Migrate applies every migration the database lacks, in order, and
// returns the versions it applied. Concurrent callers (replicas starting at
// once) are serialised: on MySQL by a named lock, on SQLite by its write
// lock.
func Migrate(ctx context.Context, db *gorm.DB) ([]int, error) {
	migs, err := Migrations()
	if err != nil {
		return nil, err
	}
	dialect := Dialect(db)
	var applied []int
	// One connection for the whole run, so the MySQL named lock is held by
	// the session that does the work.
	err = db.WithContext(ctx).Connection(func(conn *gorm.DB) error {
		if dialect == MySQL {
			var got int
			if err := conn.Raw("SELECT GET_LOCK('ferry_migrate', 120)").Scan(&got).Error; err != nil {
				return fmt.Errorf("migrate: lock: %w", err)
			}
			if got != 1 {
				return fmt.Errorf("migrate: another process held the migration lock for 120s")
			}
			defer conn.Exec("SELECT RELEASE_LOCK('ferry_migrate')")
		}
		if err := conn.Exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
			version INTEGER NOT NULL PRIMARY KEY,
			name VARCHAR(191) NOT NULL,
			applied_at ` + dialectFuncs(dialect)["ts"].(func() string)() + ` NOT NULL)`).Error; err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		for _, m := range migs {
			done, err := isApplied(conn, m.Version)
			if err != nil {
				return err
			}
			if done {
				continue
			}
			stmts, err := m.Render(dialect)
			if err != nil {
				return err
			}
			// MySQL commits DDL implicitly, so a transaction only helps
			// SQLite; there it makes each migration all-or-nothing.
			run := func(tx *gorm.DB) error {
				if done, err := isApplied(tx, m.Version); err != nil || done {
					return err
				}
				for i, s := range stmts {
					if err := tx.Exec(s).Error; err != nil {
						return fmt.Errorf("migration %04d_%s statement %d: %w", m.Version, m.Name, i+1, err)
					}
				}
				return tx.Exec("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
					m.Version, m.Name, Time(time.Now())).Error
			}
			if dialect == SQLite {
				err = conn.Transaction(run)
			} else {
				err = run(conn)
			}
			if err != nil {
				return err
			}
			applied = append(applied, m.Version)
		}
		return nil
	})
	return applied, err
}

func isApplied(db *gorm.DB, version int) (bool, error) {
	var n int64
	if err := db.Raw("SELECT COUNT(*) FROM schema_migrations WHERE version = ?", version).Scan(&n).Error; err != nil {
		return false, fmt.Errorf("migrate: %w", err)
	}
	return n > 0, nil
}

// AppliedVersions lists the versions recorded in schema_migrations.
func AppliedVersions(ctx context.Context, db *gorm.DB) ([]int, error) {
	var vs []int
	err := db.WithContext(ctx).Raw("SELECT version FROM schema_migrations ORDER BY version").Scan(&vs).Error
	return vs, err
}
