package upload

import (
	"context"
	"fmt"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/quota"
)

// Quotas tells the service each user's limit on stored bytes (0:
// unlimited). *quota.Service implements it.
type Quotas interface {
	Bytes(ctx context.Context, userID string) (int64, error)
}

var _ Quotas = (*quota.Service)(nil)

// Usage is what a user holds and has under way.
type Usage struct {
	// Bytes is what the user's files store: each blob the user holds a
	// file of counts once, however many of their files share it (two
	// users holding the same content each count it).
	Bytes int64
	// Reserved is the declared size of the user's unfinished uploads
	// (uploading, pending or merging), which will be stored once they
	// finish; an upload whose size is not known yet reserves nothing.
	Reserved int64
	// Files counts the user's files; OpenUploads their uploads still
	// uploading (the ones Config.MaxOpen bounds).
	Files       int64
	OpenUploads int64
}

// Usage returns what userID stores and has under way.
func (s *Service) Usage(ctx context.Context, userID string) (Usage, error) {
	return s.usage(s.db.WithContext(ctx), userID)
}

func (s *Service) usage(db *gorm.DB, userID string) (Usage, error) {
	var u Usage
	err := db.Raw(`SELECT COALESCE(SUM(size), 0) FROM blobs WHERE id IN (SELECT blob_id FROM files WHERE user_id = ?)`, userID).
		Scan(&u.Bytes).Error
	if err != nil {
		return Usage{}, fmt.Errorf("upload: usage of %s: %w", userID, err)
	}
	if err := db.Model(&models.File{}).Where("user_id = ?", userID).Count(&u.Files).Error; err != nil {
		return Usage{}, fmt.Errorf("upload: usage of %s: %w", userID, err)
	}
	var live struct {
		Reserved int64
		Open     int64
	}
	err = db.Raw(`SELECT COALESCE(SUM(size), 0) AS reserved, COALESCE(SUM(CASE WHEN state = ? THEN 1 ELSE 0 END), 0) AS open
		FROM uploads WHERE user_id = ? AND state IN ?`, StateUploading, userID, liveStateList).Scan(&live).Error
	if err != nil {
		return Usage{}, fmt.Errorf("upload: usage of %s: %w", userID, err)
	}
	u.Reserved, u.OpenUploads = live.Reserved, live.Open
	return u, nil
}

// byteQuota returns userID's limit on stored bytes, 0 for none. Read it
// before a transaction begins, never inside one: on SQLite the
// transactions queued on the write lock hold the pool's connections, and
// a second connection for the quota would wait for them forever.
func (s *Service) byteQuota(ctx context.Context, userID string) (int64, error) {
	if s.cfg.Quotas == nil {
		return 0, nil
	}
	return s.cfg.Quotas.Bytes(ctx, userID)
}

// checkQuota refuses adding bytes for userID when what the user stores,
// what their unfinished uploads reserve and adding would exceed limit (0:
// none): a 413 with the limit and the usage. db is the transaction to
// count in, or the service's database.
func (s *Service) checkQuota(db *gorm.DB, userID string, limit, adding int64) error {
	if limit <= 0 || adding <= 0 {
		return nil
	}
	u, err := s.usage(db, userID)
	if err != nil {
		return err
	}
	if u.Bytes+u.Reserved+adding <= limit {
		return nil
	}
	return errkind.New(errkind.TooLarge, quota.Code,
		"the file's %d bytes exceed your quota: %d of %d bytes are stored and %d reserved by unfinished uploads",
		adding, u.Bytes, limit, u.Reserved).
		With("limit", limit).With("usage", u.Bytes).With("reserved", u.Reserved).With("requested", adding)
}

// checkQuotaFor is checkQuota with userID's limit, outside a transaction.
func (s *Service) checkQuotaFor(ctx context.Context, userID string, adding int64) error {
	limit, err := s.byteQuota(ctx, userID)
	if err != nil {
		return err
	}
	return s.checkQuota(s.db.WithContext(ctx), userID, limit, adding)
}

// checkQuotaLeft refuses an upload of a size not known yet when userID's
// quota has no byte left, so that nothing is sent in vain; the size is
// checked again once it is known.
func (s *Service) checkQuotaLeft(ctx context.Context, userID string) error {
	limit, err := s.byteQuota(ctx, userID)
	if err != nil || limit <= 0 {
		return err
	}
	u, err := s.usage(s.db.WithContext(ctx), userID)
	if err != nil {
		return err
	}
	if u.Bytes+u.Reserved < limit {
		return nil
	}
	return errkind.New(errkind.TooLarge, quota.Code, "your quota is used up: %d of %d bytes are stored and %d reserved by unfinished uploads",
		u.Bytes, limit, u.Reserved).With("limit", limit).With("usage", u.Bytes).With("reserved", u.Reserved)
}

// lockedQuota is checkQuota inside tx, after locking the user's row, so
// that two uploads of one user started at the same moment cannot both
// take the last of the quota. (SQLite needs no lock: its transactions
// take the write lock when they begin.)
func (s *Service) lockedQuota(tx *gorm.DB, userID string, limit, adding int64) error {
	if limit <= 0 || adding <= 0 {
		return nil
	}
	var ids []string
	if err := tx.Model(&models.User{}).Clauses(clause.Locking{Strength: "UPDATE"}).Where("id = ?", userID).
		Pluck("id", &ids).Error; err != nil {
		return fmt.Errorf("upload: lock user %s: %w", userID, err)
	}
	return s.checkQuota(tx, userID, limit, adding)
}

// MaxOpen is the most uploads one user may have uploading at once
// (FERRY_MAX_OPEN_UPLOADS).
func (s *Service) MaxOpen() int { return s.cfg.MaxOpen }

// MaxSize is the largest file ferry accepts (FERRY_MAX_UPLOAD_SIZE), which
// clients check before they read a file.
func (s *Service) MaxSize() int64 { return s.cfg.MaxSize }
