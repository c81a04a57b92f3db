package users

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/random"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
)

// TokenPrefix starts every API token, so secret scanners and people can
// recognise one.
const TokenPrefix = "fry_"

// ErrUnauthenticated is returned for unknown, malformed or expired
// credentials and for deactivated users alike, so a caller cannot probe
// which accounts exist.
var ErrUnauthenticated = &errkind.Error{Kind: errkind.Unauthenticated, Code: "unauthenticated", Detail: "missing, invalid or revoked credentials"}

// User is an account as the rest of ferry sees it. Issuer and Subject are
// set for a host app's user (see External) and empty for ferry's own.
type User struct {
	ID        string
	Name      string
	Admin     bool
	Active    bool
	Issuer    string
	Subject   string
	CreatedAt time.Time
}

// Service manages users. It is safe for concurrent use.
type Service struct {
	db         *gorm.DB
	now        func() time.Time
	sessionTTL time.Duration
}

// KindPruneSessions is the periodic job that deletes expired sessions.
const KindPruneSessions = "users.prune_sessions"

// Register adds the session pruning job to r, hourly. Call it before
// r.Run.
func (s *Service) Register(r *jobs.Runner) {
	r.Handle(KindPruneSessions, func(ctx context.Context, _ *jobs.Job) error {
		n, err := s.PruneSessions(ctx)
		r.CountPruned("sessions", n)
		return err
	}, jobs.Options{Every: time.Hour, MaxAttempts: 1})
}

// PruneSessions deletes sessions that have expired (a signed-out session's
// row is deleted at once) and returns how many.
func (s *Service) PruneSessions(ctx context.Context) (int64, error) {
	n, err := models.DeleteInBatches[string](ctx, s.db, &models.Session{}, "hash", "expires_at < ?", models.Time(s.now()))
	if err != nil {
		return n, fmt.Errorf("users: prune sessions: %w", err)
	}
	return n, nil
}

// DefaultSessionTTL is how long a browser session lasts unless
// Config.SessionTTL says otherwise.
const DefaultSessionTTL = 7 * 24 * time.Hour

// Config configures a Service.
type Config struct {
	DB *gorm.DB // required
	// SessionTTL is how long a session lasts; 0 means DefaultSessionTTL.
	SessionTTL time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// New returns a Service.
func New(c Config) (*Service, error) {
	if c.DB == nil {
		return nil, errors.New("users: Config.DB is required")
	}
	if c.SessionTTL <= 0 {
		c.SessionTTL = DefaultSessionTTL
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return &Service{db: c.DB, now: c.Now, sessionTTL: c.SessionTTL}, nil
}

var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

// Create adds a user and returns it with its first API token, which is
// shown only this once.
func (s *Service) Create(ctx context.Context, name string, admin bool) (User, string, error) {
	if !namePattern.MatchString(name) {
		return User{}, "", errkind.Invalidf("invalid_name", "name must be 1-64 characters of letters, digits, '.', '_', '@' or '-', starting with a letter or digit")
	}
	now := models.Time(s.now())
	row := models.User{ID: models.NewID("usr"), Name: name, IsAdmin: admin, Active: true, CreatedAt: now, UpdatedAt: now}
	token, tokRow := newToken(row.ID, now)
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&row).Error; err != nil {
			return err
		}
		return tx.Create(&tokRow).Error
	})
	if models.IsDuplicate(err) {
		return User{}, "", errkind.New(errkind.Conflict, "name_taken", "a user named %q exists", name)
	}
	if err != nil {
		return User{}, "", fmt.Errorf("create user: %w", err)
	}
	return toUser(row), token, nil
}

// Bootstrap creates an admin named "admin" when the database has no users
// at all, and returns its token. When users exist it returns "" and no
// error. Replicas racing here are safe: the name is unique.
func (s *Service) Bootstrap(ctx context.Context) (string, error) {
	var n int64
	if err := s.db.WithContext(ctx).Model(&models.User{}).Count(&n).Error; err != nil {
		return "", err
	}
	if n > 0 {
		return "", nil
	}
	_, token, err := s.Create(ctx, "admin", true)
	if errors.Is(err, errkind.Conflict) {
		return "", nil
	}
	return token, err
}

// Get returns a user by id.
func (s *Service) Get(ctx context.Context, id string) (User, error) {
	var row models.User
	err := s.db.WithContext(ctx).Where("id = ?", id).Take(&row).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return User{}, errkind.New(errkind.NotFound, "user_not_found", "no such user")
	}
	if err != nil {
		return User{}, err
	}
	return toUser(row), nil
}

// List returns every user, oldest first.
func (s *Service) List(ctx context.Context) ([]User, error) {
	var rows []models.User
	if err := s.db.WithContext(ctx).Order("created_at, id").Find(&rows).Error; err != nil {
		return nil, err
	}
	out := make([]User, len(rows))
	for i, r := range rows {
		out[i] = toUser(r)
	}
	return out, nil
}

// SetActive activates or deactivates a user. Deactivation also deletes the
// user's sessions; tokens stay (reactivation restores them) but are refused
// while the user is inactive.
func (s *Service) SetActive(ctx context.Context, id string, active bool) (User, error) {
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Model(&models.User{}).Where("id = ?", id).
			Updates(map[string]any{"active": active, "updated_at": models.Time(s.now())})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return errkind.New(errkind.NotFound, "user_not_found", "no such user")
		}
		if !active {
			return tx.Where("user_id = ?", id).Delete(&models.Session{}).Error
		}
		return nil
	})
	if err != nil {
		return User{}, err
	}
	return s.Get(ctx, id)
}

// Authenticate resolves an API token to its active user.
func (s *Service) Authenticate(ctx context.Context, token string) (User, error) {
	if !strings.HasPrefix(token, TokenPrefix) || len(token) > 128 {
		return User{}, ErrUnauthenticated
	}
	var row models.User
	err := s.db.WithContext(ctx).Model(&models.User{}).
		Joins("JOIN tokens ON tokens.user_id = users.id").
		Where("tokens.hash = ? AND users.active = ?", hash(token), true).
		Take(&row).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return User{}, ErrUnauthenticated
	}
	if err != nil {
		return User{}, fmt.Errorf("authenticate: %w", err)
	}
	return toUser(row), nil
}

// CreateSession trades an API token for a browser session secret.
func (s *Service) CreateSession(ctx context.Context, token string) (User, string, time.Time, error) {
	u, err := s.Authenticate(ctx, token)
	if err != nil {
		return User{}, "", time.Time{}, err
	}
	secret := randomSecret()
	now := models.Time(s.now())
	row := models.Session{Hash: hash(secret), UserID: u.ID, CreatedAt: now, ExpiresAt: now.Add(s.sessionTTL)}
	if err := s.db.WithContext(ctx).Create(&row).Error; err != nil {
		return User{}, "", time.Time{}, fmt.Errorf("create session: %w", err)
	}
	return u, secret, row.ExpiresAt, nil
}

// SessionUser resolves a session secret to its active user.
func (s *Service) SessionUser(ctx context.Context, secret string) (User, error) {
	if secret == "" || len(secret) > 128 {
		return User{}, ErrUnauthenticated
	}
	var row models.User
	err := s.db.WithContext(ctx).Model(&models.User{}).
		Joins("JOIN sessions ON sessions.user_id = users.id").
		Where("sessions.hash = ? AND sessions.expires_at > ? AND users.active = ?", hash(secret), models.Time(s.now()), true).
		Take(&row).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return User{}, ErrUnauthenticated
	}
	if err != nil {
		return User{}, fmt.Errorf("session: %w", err)
	}
	return toUser(row), nil
}

// DeleteSession ends a session. Unknown secrets are not an error.
func (s *Service) DeleteSession(ctx context.Context, secret string) error {
	return s.db.WithContext(ctx).Where("hash = ?", hash(secret)).Delete(&models.Session{}).Error
}

// IsActive reports whether user id exists and is active. Download links use
// it on every request.
func (s *Service) IsActive(ctx context.Context, id string) (bool, error) {
	var n int64
	err := s.db.WithContext(ctx).Model(&models.User{}).Where("id = ? AND active = ?", id, true).Count(&n).Error
	return n == 1, err
}

func newToken(userID string, now time.Time) (string, models.Token) {
	token := TokenPrefix + randomSecret()
	return token, models.Token{ID: models.NewID("tok"), UserID: userID, Hash: hash(token), CreatedAt: now}
}

func randomSecret() string { return random.URLSafe(32) }

func hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

func toUser(r models.User) User {
	u := User{ID: r.ID, Name: r.Name, Admin: r.IsAdmin, Active: r.Active, CreatedAt: r.CreatedAt}
	if r.DisplayName != nil && *r.DisplayName != "" {
		u.Name = *r.DisplayName
	}
	if r.Issuer != nil && r.Subject != nil {
		u.Issuer, u.Subject = *r.Issuer, *r.Subject
	}
	return u
}

// Erase deletes user id inside tx: the account row, its API tokens and
// its browser sessions, so every credential of the user fails from the
// commit on (authentication reads the row on every request). It returns
// the user as it was; a user that does not exist is a not-found error.
// It is one step of package erasure's whole-user deletion; the user's
// data in other domains goes in the same transaction.
func (s *Service) Erase(ctx context.Context, tx *gorm.DB, id string) (User, error) {
	var row models.User
	err := tx.WithContext(ctx).Where("id = ?", id).Take(&row).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return User{}, errkind.New(errkind.NotFound, "user_not_found", "no such user")
	}
	if err != nil {
		return User{}, err
	}
	for _, m := range []any{&models.Token{}, &models.Session{}} {
		if err := tx.WithContext(ctx).Where("user_id = ?", id).Delete(m).Error; err != nil {
			return User{}, fmt.Errorf("users: erase %s: %w", id, err)
		}
	}
	res := tx.WithContext(ctx).Where("id = ?", id).Delete(&models.User{})
	if res.Error != nil {
		return User{}, fmt.Errorf("users: erase %s: %w", id, res.Error)
	}
	if res.RowsAffected == 0 {
		return User{}, errkind.New(errkind.NotFound, "user_not_found", "no such user") // erased by a concurrent call
	}
	return toUser(row), nil
}

// RotateToken replaces every API token of user id with one new token,
// returned once: the old tokens fail from the commit on, the user's
// browser sessions are kept (they were made with a token the user held,
// and end on their own or on sign-out; deactivate the user to end them).
func (s *Service) RotateToken(ctx context.Context, id string) (string, error) {
	now := models.Time(s.now())
	token, row := newToken(id, now)
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var n int64
		if err := tx.Model(&models.User{}).Where("id = ?", id).Count(&n).Error; err != nil {
			return err
		}
		if n == 0 {
			return errkind.New(errkind.NotFound, "user_not_found", "no such user")
		}
		if err := tx.Where("user_id = ?", id).Delete(&models.Token{}).Error; err != nil {
			return err
		}
		return tx.Create(&row).Error
	})
	if err != nil {
		if errkind.KindOf(err) != nil {
			return "", err
		}
		return "", fmt.Errorf("users: rotate token of %s: %w", id, err)
	}
	return token, nil
}
