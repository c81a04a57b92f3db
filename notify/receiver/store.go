package receiver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"
)

// Store remembers the webhook ids a backend has processed. Handler asks
// Seen only after a message's signature verified, and calls Record only
// after the message was processed successfully.
type Store interface {
	// Seen reports whether id was recorded.
	Seen(ctx context.Context, id string) (bool, error)
	// Record remembers id. Recording an id twice is not an error.
	Record(ctx context.Context, id string) error
}

// DefaultTTL is how long MemoryStore remembers an id unless told
// otherwise. ferry's default retries span about 70 minutes; a day also
// covers most manual redeliveries.
const DefaultTTL = 24 * time.Hour

// MemoryStore is a Store in process memory that forgets ids after a TTL.
// It suits a single-process backend; replicas need a shared store such as
// SQLStore.
type MemoryStore struct {
	ttl time.Duration
	now func() time.Time

	mu        sync.Mutex
	seen      map[string]time.Time // id → when it expires
	lastSweep time.Time
}

// NewMemoryStore returns a MemoryStore remembering ids for ttl (DefaultTTL
// when ttl <= 0). now is the clock; nil means time.Now.
func NewMemoryStore(ttl time.Duration, now func() time.Time) *MemoryStore {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if now == nil {
		now = time.Now
	}
	return &MemoryStore{ttl: ttl, now: now, seen: map[string]time.Time{}}
}

// Seen implements Store.
func (m *MemoryStore) Seen(_ context.Context, id string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	exp, ok := m.seen[id]
	return ok && m.now().Before(exp), nil
}

// Record implements Store. Expired ids are swept now and then, so memory
// stays bounded by what arrived within one TTL.
func (m *MemoryStore) Record(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	m.seen[id] = now.Add(m.ttl)
	if now.Sub(m.lastSweep) > m.ttl/4 {
		for k, exp := range m.seen {
			if !now.Before(exp) {
				delete(m.seen, k)
			}
		}
		m.lastSweep = now
	}
	return nil
}

// Len reports how many ids the store holds, expired ones included until
// the next sweep.
func (m *MemoryStore) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.seen)
}

// CreateTableSQL creates SQLStore's default table. It is portable SQL
// (MySQL, MariaDB, PostgreSQL, SQLite); rename the table if you like and
// set SQLStore.Table to match.
const CreateTableSQL = `CREATE TABLE webhook_receipts (
    webhook_id  VARCHAR(255) NOT NULL PRIMARY KEY,
    received_at BIGINT       NOT NULL
)`

// CreateIndexSQL speeds up SQLStore.Purge.
const CreateIndexSQL = `CREATE INDEX ix_webhook_receipts_received ON webhook_receipts (received_at)`

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// SQLStore is a Store in a database/sql table shared by every replica of
// a backend. The table is CreateTableSQL; received_at holds Unix seconds so
// the same statements run on every engine.
type SQLStore struct {
	DB *sql.DB
	// Table is the table name; empty means "webhook_receipts".
	Table string
	// Dollar uses $1-style placeholders (PostgreSQL) instead of ?.
	Dollar bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (s *SQLStore) table() (string, error) {
	t := s.Table
	if t == "" {
		t = "webhook_receipts"
	}
	if !identifier.MatchString(t) {
		return "", fmt.Errorf("receiver: bad table name %q", t)
	}
	return t, nil
}

func (s *SQLStore) ph(n int) string {
	if s.Dollar {
		return fmt.Sprintf("$%d", n)
	}
	return "?"
}

func (s *SQLStore) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Seen implements Store.
func (s *SQLStore) Seen(ctx context.Context, id string) (bool, error) {
	t, err := s.table()
	if err != nil {
		return false, err
	}
	var one int
	err = s.DB.QueryRowContext(ctx, "SELECT 1 FROM "+t+" WHERE webhook_id = "+s.ph(1), id).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("receiver: %w", err)
	}
	return true, nil
}

// Record implements Store. A concurrent Record of the same id fails the
// insert on the primary key; that counts as recorded.
func (s *SQLStore) Record(ctx context.Context, id string) error {
	t, err := s.table()
	if err != nil {
		return err
	}
	_, err = s.DB.ExecContext(ctx, "INSERT INTO "+t+" (webhook_id, received_at) VALUES ("+s.ph(1)+", "+s.ph(2)+")",
		id, s.now().Unix())
	if err == nil {
		return nil
	}
	// Engines spell "duplicate key" differently; asking is portable.
	if seen, serr := s.Seen(ctx, id); serr == nil && seen {
		return nil
	}
	return fmt.Errorf("receiver: %w", err)
}

// Purge forgets ids recorded more than olderThan ago and reports how many.
// Run it now and then (daily, say) with olderThan well past the sender's
// retry window.
func (s *SQLStore) Purge(ctx context.Context, olderThan time.Duration) (int64, error) {
	t, err := s.table()
	if err != nil {
		return 0, err
	}
	res, err := s.DB.ExecContext(ctx, "DELETE FROM "+t+" WHERE received_at < "+s.ph(1), s.now().Add(-olderThan).Unix())
	if err != nil {
		return 0, fmt.Errorf("receiver: %w", err)
	}
	return res.RowsAffected()
}
