package quota

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/models"
)

// Code is the problem code of every refusal for a quota.
const Code = "quota_exceeded"

// MaxExportsPerDay is the largest export quota that can be set.
const MaxExportsPerDay = 1_000_000

// Limits are one user's quotas; 0 is unlimited.
type Limits struct {
	Bytes         int64 // bytes the user's files may store
	ExportsPerDay int   // exports the user may create in any 24 hours
}

// Overrides are the limits an administrator set for one user; nil takes
// the configured default.
type Overrides struct {
	Bytes         *int64
	ExportsPerDay *int
}

// Change edits a user's overrides. A field that is not Set is left as it
// is; one that is Set with a nil Value goes back to the default.
type Change struct {
	Bytes         Field[int64]
	ExportsPerDay Field[int]
}

// Field is one edit of a Change.
type Field[T int | int64] struct {
	Set   bool
	Value *T
}

// Service answers and changes users' quotas. It is safe for concurrent
// use.
type Service struct {
	db       *gorm.DB
	defaults Limits
	now      func() time.Time
}

// Config configures a Service.
type Config struct {
	DB *gorm.DB // required
	// Defaults are every user's limits unless the admin API overrides them.
	Defaults Limits
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// New returns a Service.
func New(c Config) (*Service, error) {
	if c.DB == nil {
		return nil, errors.New("quota: Config.DB is required")
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return &Service{db: c.DB, defaults: c.Defaults, now: c.Now}, nil
}

// For returns userID's limits: the defaults with the user's overrides.
func (s *Service) For(ctx context.Context, userID string) (Limits, error) {
	o, err := s.Overrides(ctx, userID)
	if err != nil {
		return Limits{}, err
	}
	return s.apply(o), nil
}

func (s *Service) apply(o Overrides) Limits {
	l := s.defaults
	if o.Bytes != nil {
		l.Bytes = *o.Bytes
	}
	if o.ExportsPerDay != nil {
		l.ExportsPerDay = *o.ExportsPerDay
	}
	return l
}

// Bytes returns userID's limit on stored bytes (0: unlimited).
func (s *Service) Bytes(ctx context.Context, userID string) (int64, error) {
	l, err := s.For(ctx, userID)
	return l.Bytes, err
}

// ExportsPerDay returns userID's limit on exports created in any 24 hours
// (0: unlimited).
func (s *Service) ExportsPerDay(ctx context.Context, userID string) (int, error) {
	l, err := s.For(ctx, userID)
	return l.ExportsPerDay, err
}

// Overrides returns what an administrator set for userID.
func (s *Service) Overrides(ctx context.Context, userID string) (Overrides, error) {
	var row models.UserQuota
	err := s.db.WithContext(ctx).Where("user_id = ?", userID).Take(&row).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Overrides{}, nil
	}
	if err != nil {
		return Overrides{}, fmt.Errorf("quota: load %s: %w", userID, err)
	}
	return Overrides{Bytes: row.Bytes, ExportsPerDay: row.ExportsPerDay}, nil
}

// Set applies c to userID's overrides and returns the user's limits and
// overrides afterwards. Negative limits are refused. The caller checks
// that the user exists.
func (s *Service) Set(ctx context.Context, userID string, c Change) (Limits, Overrides, error) {
	if c.Bytes.Set && c.Bytes.Value != nil && *c.Bytes.Value < 0 {
		return Limits{}, Overrides{}, errkind.Invalidf("invalid_quota_bytes", "quota_bytes must be 0 (unlimited) or a positive number of bytes, or null for the default")
	}
	if v := c.ExportsPerDay.Value; c.ExportsPerDay.Set && v != nil && (*v < 0 || *v > MaxExportsPerDay) {
		return Limits{}, Overrides{}, errkind.Invalidf("invalid_quota_exports_per_day",
			"quota_exports_per_day must be 0 (unlimited) to %d, or null for the default", MaxExportsPerDay)
	}
	var o Overrides
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var row models.UserQuota
		err := tx.Clauses(clause.Locking{Strength: "UPDATE"}).Where("user_id = ?", userID).Take(&row).Error
		exists := err == nil
		if err != nil && !errors.Is(err, gorm.ErrRecordNotFound) {
			return err
		}
		row.UserID = userID
		if c.Bytes.Set {
			row.Bytes = c.Bytes.Value
		}
		if c.ExportsPerDay.Set {
			row.ExportsPerDay = c.ExportsPerDay.Value
		}
		row.UpdatedAt = models.Time(s.now())
		o = Overrides{Bytes: row.Bytes, ExportsPerDay: row.ExportsPerDay}
		switch {
		case row.Bytes == nil && row.ExportsPerDay == nil:
			return tx.Where("user_id = ?", userID).Delete(&models.UserQuota{}).Error
		case exists:
			return tx.Model(&models.UserQuota{}).Where("user_id = ?", userID).
				Updates(map[string]any{"bytes": row.Bytes, "exports_per_day": row.ExportsPerDay, "updated_at": row.UpdatedAt}).Error
		default:
			return tx.Create(&row).Error
		}
	})
	if models.IsDuplicate(err) {
		return s.Set(ctx, userID, c) // a racing Set created the row: apply on top of it
	}
	if err != nil {
		return Limits{}, Overrides{}, fmt.Errorf("quota: set %s: %w", userID, err)
	}
	return s.apply(o), o, nil
}

// EraseUser deletes userID's quota overrides inside tx, as one step of
// package erasure's whole-user deletion.
func EraseUser(ctx context.Context, tx *gorm.DB, userID string) error {
	if err := tx.WithContext(ctx).Where("user_id = ?", userID).Delete(&models.UserQuota{}).Error; err != nil {
		return fmt.Errorf("quota: erase user %s: %w", userID, err)
	}
	return nil
}
