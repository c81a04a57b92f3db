package upload

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/models"
)

// Grant states.
const (
	GrantActive  = "active"
	GrantRevoked = "revoked"
	GrantExpired = "expired"
)

// MaxGrantTTL bounds a grant's lifetime; a grant may also have none.
const MaxGrantTTL = 10 * 366 * 24 * time.Hour

// Grant lets one user download another's file through the proxy.
type Grant struct {
	ID        string
	FileID    string
	UserID    string // who may download
	OwnerID   string // the file's owner
	CreatedBy string
	CreatedAt time.Time
	ExpiresAt *time.Time
	RevokedAt *time.Time
	State     string // GrantActive, GrantRevoked or GrantExpired
	// DownloadURL is a download link signed for UserID while the grant
	// is active (absolute), valid until LinkExpires; "" otherwise.
	DownloadURL string
	LinkExpires time.Time
}

var (
	errGrantNotFound = errkind.New(errkind.NotFound, "grant_not_found", "no such grant")
	errNotVerified   = errkind.New(errkind.Conflict, "file_not_verified", "the file is still being verified; try again in a moment")
)

// GrantRequest asks for a grant of a file to a user.
type GrantRequest struct {
	// Owner is the caller when it is a user: only the file's owner may
	// grant it. "" is a service acting for the installation (a service
	// key with grants:create), which may grant any file.
	Owner  string
	FileID string
	// UserID is the grantee; the caller has checked that the user exists.
	UserID string
	// CreatedBy names the caller, for the record.
	CreatedBy string
	// TTL is the grant's lifetime; 0 is until revoked.
	TTL time.Duration
}

// CreateGrant lets r.UserID download r.FileID through the proxy, checked
// on every request, until the grant expires or is revoked. Someone else's
// file is not found. A file ferry has not verified yet reaches nobody but
// its owner, so it cannot be granted until it is (file_not_verified). The
// answer carries a download link for the grantee.
func (s *Service) CreateGrant(ctx context.Context, r GrantRequest) (Grant, error) {
	f, err := s.grantable(ctx, r.Owner, r.FileID)
	if err != nil {
		return Grant{}, err
	}
	if r.TTL < 0 || r.TTL > MaxGrantTTL {
		return Grant{}, errkind.Invalidf("invalid_expires_in", "expires_in must be 1-%d seconds, or absent", int64(MaxGrantTTL.Seconds()))
	}
	if r.UserID == f.UserID {
		return Grant{}, errkind.Invalidf("invalid_grantee", "the file's owner can download it already")
	}
	if !f.SHA256Verified {
		return Grant{}, errNotVerified
	}
	now := s.nowUTC()
	row := models.DownloadGrant{ID: models.NewID("grt"), FileID: f.ID, UserID: r.UserID, CreatedBy: r.CreatedBy, CreatedAt: now}
	if r.TTL > 0 {
		exp := now.Add(r.TTL)
		row.ExpiresAt = &exp
	}
	if err := s.db.WithContext(ctx).Create(&row).Error; err != nil {
		return Grant{}, fmt.Errorf("upload: create grant: %w", err)
	}
	s.log.InfoContext(ctx, "download granted", "grant_id", row.ID, "file_id", f.ID, "user_id", r.UserID, "created_by", r.CreatedBy)
	return s.toGrant(&row, f.UserID), nil
}

// grantable loads the file a grant is about: owner's, or any for "".
func (s *Service) grantable(ctx context.Context, owner, fileID string) (*models.File, error) {
	q := s.db.WithContext(ctx).Where("id = ?", fileID)
	if owner != "" {
		q = q.Where("user_id = ?", owner)
	}
	var f models.File
	err := q.Take(&f).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, errFileNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("upload: file %s: %w", fileID, err)
	}
	return &f, nil
}

func (s *Service) toGrant(r *models.DownloadGrant, owner string) Grant {
	g := Grant{ID: r.ID, FileID: r.FileID, UserID: r.UserID, OwnerID: owner, CreatedBy: r.CreatedBy,
		CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt, RevokedAt: r.RevokedAt, State: s.grantState(r)}
	if g.State == GrantActive {
		ttl := s.links.TTL()
		if r.ExpiresAt != nil {
			ttl = min(ttl, r.ExpiresAt.Sub(s.now()))
		}
		l := s.links.For(r.FileID, r.UserID, ttl)
		g.DownloadURL, g.LinkExpires = l.URL, l.ExpiresAt
	}
	return g
}

func (s *Service) grantState(r *models.DownloadGrant) string {
	switch {
	case r.RevokedAt != nil:
		return GrantRevoked
	case r.ExpiresAt != nil && !s.now().Before(*r.ExpiresAt):
		return GrantExpired
	}
	return GrantActive
}

// Grants lists the grants of a file, newest first, for its owner (or for
// a service, owner ""). Someone else's file is not found.
func (s *Service) Grants(ctx context.Context, owner, fileID string) ([]Grant, error) {
	f, err := s.grantable(ctx, owner, fileID)
	if err != nil {
		return nil, err
	}
	var rows []models.DownloadGrant
	if err := s.db.WithContext(ctx).Where("file_id = ?", f.ID).Order("created_at DESC, id DESC").Limit(MaxListLimit).
		Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("upload: grants of %s: %w", fileID, err)
	}
	out := make([]Grant, len(rows))
	for i := range rows {
		out[i] = s.toGrant(&rows[i], f.UserID)
		out[i].DownloadURL = "" // links are for the grantee, one grant at a time
	}
	return out, nil
}

// loadGrant returns a grant with its file's owner; viewer, when not "",
// must be the owner (owners only) or, with grantee set, the grantee too.
func (s *Service) loadGrant(ctx context.Context, viewer, id string, grantee bool) (*models.DownloadGrant, string, error) {
	var row struct {
		models.DownloadGrant
		Owner string `gorm:"column:owner"`
	}
	err := s.db.WithContext(ctx).Table("download_grants").Select("download_grants.*, files.user_id AS owner").
		Joins("JOIN files ON files.id = download_grants.file_id").Where("download_grants.id = ?", id).Take(&row).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, "", errGrantNotFound
	}
	if err != nil {
		return nil, "", fmt.Errorf("upload: grant %s: %w", id, err)
	}
	if viewer != "" && viewer != row.Owner && !(grantee && viewer == row.UserID) {
		return nil, "", errGrantNotFound
	}
	return &row.DownloadGrant, row.Owner, nil
}

// Grant returns one grant for its file's owner, its grantee (who gets a
// fresh download link while it is active) or a service (viewer "").
func (s *Service) Grant(ctx context.Context, viewer, id string) (Grant, error) {
	g, owner, err := s.loadGrant(ctx, viewer, id, true)
	if err != nil {
		return Grant{}, err
	}
	return s.toGrant(g, owner), nil
}

// RevokeGrant ends a grant for its file's owner (or a service, owner
// ""); from the next request on, the grantee's downloads answer 410.
// Revoking it again is harmless.
func (s *Service) RevokeGrant(ctx context.Context, owner, id string) (Grant, error) {
	g, fileOwner, err := s.loadGrant(ctx, owner, id, false)
	if err != nil {
		return Grant{}, err
	}
	if g.RevokedAt == nil {
		now := s.nowUTC()
		if err := s.db.WithContext(ctx).Model(&models.DownloadGrant{}).Where("id = ? AND revoked_at IS NULL", g.ID).
			Update("revoked_at", now).Error; err != nil {
			return Grant{}, fmt.Errorf("upload: revoke grant %s: %w", id, err)
		}
		g.RevokedAt = &now
		s.log.InfoContext(ctx, "download grant revoked", "grant_id", g.ID, "file_id", g.FileID, "user_id", g.UserID)
	}
	return s.toGrant(g, fileOwner), nil
}

// Access says whether userID holds a grant of file fileID right now: the
// state of their best grant (GrantActive if any is), or "" when they never
// had one. The download proxy asks it on every request, so a revoked or
// expired grant stops the next one.
func (s *Service) Access(ctx context.Context, fileID, userID string) (string, error) {
	var rows []models.DownloadGrant
	if err := s.db.WithContext(ctx).Where("file_id = ? AND user_id = ?", fileID, userID).Limit(100).Find(&rows).Error; err != nil {
		return "", fmt.Errorf("upload: grants of %s: %w", fileID, err)
	}
	best := ""
	for i := range rows {
		switch st := s.grantState(&rows[i]); {
		case st == GrantActive:
			return GrantActive, nil
		case best == "" || st == GrantRevoked:
			best = st // a revocation says more than an expiry
		}
	}
	return best, nil
}
