package receiver

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"
)

// Store remembers which webhook ids a backend has processed and which one
// is being processed right now. Handler uses it in three steps:
//
//  1. Claim the id before Process runs. Of several copies of one message
//     arriving at once, on one replica or on several sharing the store,
//     exactly one claim succeeds; the others learn that the id is in
//     progress (or was processed) and Process does not run for them.
//  2. Done after Process succeeded: the id is processed for good.
//  3. Release after Process failed, so the sender's next attempt is
//     processed at once.
//
// A claim carries a lease. A processor that dies between Claim and Done
// leaves its claim behind; once the lease lapses the next copy of the
// message takes the claim over and is processed.
type Store interface {
	// Claim takes id for processing until lease has passed and returns
	// the token that Done and Release need. It returns ErrProcessed when
	// id was processed before and ErrInProgress while another claim on id
	// is live. A claim whose lease lapsed is taken over.
	Claim(ctx context.Context, id string, lease time.Duration) (token string, err error)
	// Done marks the id claimed with token as processed. It returns
	// ErrClaimLost when the claim lapsed and another processor took it.
	Done(ctx context.Context, id, token string) error
	// Release drops the claim made with token, if it is still held.
	Release(ctx context.Context, id, token string) error
}

// Store errors.
var (
	// ErrProcessed: the id was processed before; the message is a
	// duplicate.
	ErrProcessed = errors.New("receiver: message already processed")
	// ErrClaimLost: a claim lapsed before Done and another processor
	// took it over.
	ErrClaimLost = errors.New("receiver: the claim lapsed and was taken over")
	// ErrIDTooLong: the webhook-id is longer than MaxIDBytes, which
	// SQLStore cannot store exactly. ferry's ids are 30 bytes.
	ErrIDTooLong = fmt.Errorf("receiver: webhook-id longer than %d bytes", MaxIDBytes)
	// ErrInexactIDs: the SQLStore table matched one id with another (a
	// case-insensitive or PAD SPACE collation on MySQL/MariaDB), so it
	// would drop distinct messages as duplicates. Create the table with
	// CreateTableMySQL.
	ErrInexactIDs = errors.New("receiver: the table compares webhook ids inexactly; on MySQL/MariaDB create it with CreateTableMySQL (VARBINARY)")
	// ErrRetentionTooShort: a retention below MinRetention would forget
	// an id while a replay of its message still verifies.
	ErrRetentionTooShort = fmt.Errorf("receiver: retention must be at least %s", MinRetention)
)

// MaxIDBytes is the longest webhook-id a Store accepts.
const MaxIDBytes = 255

// DefaultTTL is how long MemoryStore remembers an id unless told
// otherwise. ferry's default retries span about 70 minutes; a day also
// covers most manual redeliveries.
const DefaultTTL = 24 * time.Hour

// MinRetention is the shortest time a Store may remember a processed id.
// A message verifies while its timestamp is within DefaultTolerance of
// the receiver's clock either way, so a replay of it can arrive up to
// twice the tolerance after the first copy was processed. (Raise your
// retention with Verifier.Tolerance.)
const MinRetention = 2 * DefaultTolerance

// newToken returns a random claim token. The package imports only the
// standard library (backends vendor it), so it reads crypto/rand itself;
// Read cannot fail since Go 1.24.
func newToken() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// MemoryStore is a Store in process memory that forgets processed ids
// after a TTL. It suits a single-process backend; replicas need a shared
// store such as SQLStore.
type MemoryStore struct {
	ttl time.Duration
	now func() time.Time

	mu        sync.Mutex
	ids       map[string]memEntry
	lastSweep time.Time
}

// memEntry is a claim (token set, until = the lease's end) or a processed
// id (token empty, until = when it is forgotten).
type memEntry struct {
	token string
	until time.Time
}

// NewMemoryStore returns a MemoryStore remembering processed ids for ttl:
// DefaultTTL when ttl <= 0, and at least MinRetention. now is the clock;
// nil means time.Now.
func NewMemoryStore(ttl time.Duration, now func() time.Time) *MemoryStore {
	switch {
	case ttl <= 0:
		ttl = DefaultTTL
	case ttl < MinRetention:
		ttl = MinRetention
	}
	if now == nil {
		now = time.Now
	}
	return &MemoryStore{ttl: ttl, now: now, ids: map[string]memEntry{}}
}

// TTL reports how long the store remembers a processed id.
func (m *MemoryStore) TTL() time.Duration { return m.ttl }

// Claim implements Store.
func (m *MemoryStore) Claim(_ context.Context, id string, lease time.Duration) (string, error) {
	if len(id) > MaxIDBytes {
		return "", ErrIDTooLong
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if e, ok := m.ids[id]; ok && now.Before(e.until) {
		if e.token == "" {
			return "", ErrProcessed
		}
		return "", ErrInProgress
	}
	token := newToken()
	m.ids[id] = memEntry{token: token, until: now.Add(lease)}
	m.sweep(now)
	return token, nil
}

// Done implements Store.
func (m *MemoryStore) Done(_ context.Context, id, token string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.ids[id]; !ok || e.token == "" || e.token != token {
		return ErrClaimLost
	}
	m.ids[id] = memEntry{until: m.now().Add(m.ttl)}
	return nil
}

// Release implements Store.
func (m *MemoryStore) Release(_ context.Context, id, token string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.ids[id]; ok && e.token != "" && e.token == token {
		delete(m.ids, id)
	}
	return nil
}

// Seen reports whether id was processed and is still remembered.
func (m *MemoryStore) Seen(_ context.Context, id string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.ids[id]
	return ok && e.token == "" && m.now().Before(e.until), nil
}

// Record marks id processed without a claim, for backends that process
// outside Handler.
func (m *MemoryStore) Record(_ context.Context, id string) error {
	if len(id) > MaxIDBytes {
		return ErrIDTooLong
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	m.ids[id] = memEntry{until: now.Add(m.ttl)}
	m.sweep(now)
	return nil
}

// sweep forgets expired ids and lapsed claims now and then, so memory
// stays bounded by what arrived within one TTL.
func (m *MemoryStore) sweep(now time.Time) {
	if now.Sub(m.lastSweep) <= m.ttl/4 {
		return
	}
	for k, e := range m.ids {
		if !now.Before(e.until) {
			delete(m.ids, k)
		}
	}
	m.lastSweep = now
}

// Len reports how many ids the store holds, expired ones included until
// the next sweep.
func (m *MemoryStore) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.ids)
}

// CreateTableSQL creates SQLStore's default table on SQLite and
// PostgreSQL, whose VARCHAR compares exactly. On MySQL and MariaDB use
// CreateTableMySQL. Rename the table if you like and set SQLStore.Table to
// match.
const CreateTableSQL = `CREATE TABLE webhook_receipts (
    webhook_id  VARCHAR(255) NOT NULL PRIMARY KEY,
    received_at BIGINT       NOT NULL,
    claim_token VARCHAR(64)  NULL,
    lease_until BIGINT       NULL
)`

// CreateTableMySQL creates SQLStore's default table on MySQL and MariaDB.
// webhook_id is VARBINARY so that ids compare byte for byte: under the
// usual PAD SPACE or case-insensitive collations "evt_x " and "EVT_X"
// would both equal "evt_x", and one message would be dropped as a
// duplicate of another.
const CreateTableMySQL = `CREATE TABLE webhook_receipts (
    webhook_id  VARBINARY(255) NOT NULL PRIMARY KEY,
    received_at BIGINT         NOT NULL,
    claim_token VARCHAR(64)    NULL,
    lease_until BIGINT         NULL
)`

// CreateIndexSQL speeds up SQLStore.Purge.
const CreateIndexSQL = `CREATE INDEX ix_webhook_receipts_received ON webhook_receipts (received_at)`

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// SQLStore is a Store in a database/sql table shared by every replica of
// a backend (CreateTableSQL, or CreateTableMySQL on MySQL and MariaDB).
// Each row is a claim (claim_token and lease_until set) or a processed id
// (both NULL); received_at and lease_until are Unix seconds, so the same
// statements run on every engine. Claims are single statements whose
// outcome the primary key decides, so replicas need no transaction or
// lock to agree on who processes a message.
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

// receipt is one row of the table.
type receipt struct {
	token sql.NullString
	until sql.NullInt64
}

// lookup reads id's row. It refuses a row whose id is not byte for byte
// the one asked for: the table's collation conflates ids.
func (s *SQLStore) lookup(ctx context.Context, t, id string) (receipt, bool, error) {
	var (
		r   receipt
		got []byte
	)
	err := s.DB.QueryRowContext(ctx, "SELECT webhook_id, claim_token, lease_until FROM "+t+" WHERE webhook_id = "+s.ph(1), id).
		Scan(&got, &r.token, &r.until)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return r, false, nil
	case err != nil:
		return r, false, fmt.Errorf("receiver: %w", err)
	case string(got) != id:
		return r, false, fmt.Errorf("%w: %q matched %q", ErrInexactIDs, id, got)
	}
	return r, true, nil
}

// Claim implements Store. The insert either creates the claim or fails
// on the primary key; engines spell that failure differently, so the row
// itself then says what holds the id.
func (s *SQLStore) Claim(ctx context.Context, id string, lease time.Duration) (string, error) {
	if len(id) > MaxIDBytes {
		return "", ErrIDTooLong
	}
	t, err := s.table()
	if err != nil {
		return "", err
	}
	token, now := newToken(), s.now()
	insert := "INSERT INTO " + t + " (webhook_id, received_at, claim_token, lease_until) VALUES (" +
		s.ph(1) + ", " + s.ph(2) + ", " + s.ph(3) + ", " + s.ph(4) + ")"
	var insertErr error
	for range 3 { // a row released between the two statements means: try again
		if _, insertErr = s.DB.ExecContext(ctx, insert, id, now.Unix(), token, now.Add(lease).Unix()); insertErr == nil {
			return token, nil
		}
		r, found, err := s.lookup(ctx, t, id)
		if err != nil {
			return "", err
		}
		if !found {
			continue
		}
		if !r.token.Valid {
			return "", ErrProcessed
		}
		if now.Unix() < r.until.Int64 {
			return "", ErrInProgress
		}
		// The claim lapsed: its processor died. Take it over, unless
		// another replica just did.
		res, err := s.DB.ExecContext(ctx, "UPDATE "+t+" SET claim_token = "+s.ph(1)+", lease_until = "+s.ph(2)+", received_at = "+s.ph(3)+
			" WHERE webhook_id = "+s.ph(4)+" AND claim_token = "+s.ph(5),
			token, now.Add(lease).Unix(), now.Unix(), id, r.token.String)
		if err != nil {
			return "", fmt.Errorf("receiver: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return "", ErrInProgress
		}
		return token, nil
	}
	return "", fmt.Errorf("receiver: %w", insertErr)
}

// Done implements Store, fenced on the claim's token.
func (s *SQLStore) Done(ctx context.Context, id, token string) error {
	t, err := s.table()
	if err != nil {
		return err
	}
	res, err := s.DB.ExecContext(ctx, "UPDATE "+t+" SET claim_token = NULL, lease_until = NULL, received_at = "+s.ph(1)+
		" WHERE webhook_id = "+s.ph(2)+" AND claim_token = "+s.ph(3), s.now().Unix(), id, token)
	if err != nil {
		return fmt.Errorf("receiver: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("receiver: %w", err)
	}
	if n != 1 {
		return ErrClaimLost
	}
	return nil
}

// Release implements Store.
func (s *SQLStore) Release(ctx context.Context, id, token string) error {
	t, err := s.table()
	if err != nil {
		return err
	}
	if _, err := s.DB.ExecContext(ctx, "DELETE FROM "+t+" WHERE webhook_id = "+s.ph(1)+" AND claim_token = "+s.ph(2), id, token); err != nil {
		return fmt.Errorf("receiver: %w", err)
	}
	return nil
}

// Seen reports whether id was processed.
func (s *SQLStore) Seen(ctx context.Context, id string) (bool, error) {
	t, err := s.table()
	if err != nil {
		return false, err
	}
	r, found, err := s.lookup(ctx, t, id)
	return found && !r.token.Valid, err
}

// Record marks id processed without a claim, for backends that process
// outside Handler. Recording an id twice is not an error.
func (s *SQLStore) Record(ctx context.Context, id string) error {
	if len(id) > MaxIDBytes {
		return ErrIDTooLong
	}
	t, err := s.table()
	if err != nil {
		return err
	}
	now := s.now().Unix()
	_, ierr := s.DB.ExecContext(ctx, "INSERT INTO "+t+" (webhook_id, received_at) VALUES ("+s.ph(1)+", "+s.ph(2)+")", id, now)
	if ierr == nil {
		return nil
	}
	if _, found, err := s.lookup(ctx, t, id); err != nil || !found {
		if err == nil {
			err = fmt.Errorf("receiver: %w", ierr)
		}
		return err
	}
	_, err = s.DB.ExecContext(ctx, "UPDATE "+t+" SET claim_token = NULL, lease_until = NULL, received_at = "+s.ph(1)+
		" WHERE webhook_id = "+s.ph(2), now, id)
	if err != nil {
		return fmt.Errorf("receiver: %w", err)
	}
	return nil
}

// Purge forgets ids processed more than olderThan ago, and claims that
// lapsed that long ago, and reports how many rows it deleted. Run it now
// and then (daily, say) with olderThan well past the sender's retry
// window; below MinRetention it refuses with ErrRetentionTooShort.
func (s *SQLStore) Purge(ctx context.Context, olderThan time.Duration) (int64, error) {
	if olderThan < MinRetention {
		return 0, ErrRetentionTooShort
	}
	t, err := s.table()
	if err != nil {
		return 0, err
	}
	now := s.now()
	res, err := s.DB.ExecContext(ctx, "DELETE FROM "+t+" WHERE received_at < "+s.ph(1)+
		" AND (claim_token IS NULL OR lease_until < "+s.ph(2)+")", now.Add(-olderThan).Unix(), now.Unix())
	if err != nil {
		return 0, fmt.Errorf("receiver: %w", err)
	}
	return res.RowsAffected()
}
