package users

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/models"
)

// ErrDeactivated refuses a valid JWT of a user deactivated in ferry. It
// names the reason: the token proves who is asking, so there is nothing to
// hide from them.
var ErrDeactivated = errkind.New(errkind.Unauthenticated, "user_deactivated", "this account is deactivated in ferry")

// External returns the ferry user for a host app's identity, creating it
// the first time it is seen. The name follows the token's name claim (the
// subject when there is none) and, when an admin claim is configured, so
// does the admin flag. A deactivated user is refused: ferry's switch wins
// over the host app's token.
//
// Replicas that see a new identity at once race on the unique (issuer,
// subject) index: one insert wins, the others read its row.
func (s *Service) External(ctx context.Context, id Identity) (User, error) {
	if id.Issuer == "" || id.Subject == "" {
		return User{}, errors.New("users: an external identity needs an issuer and a subject")
	}
	name := id.Name
	if name == "" {
		name = cleanName(id.Subject)
	}
	row, err := s.byIdentity(ctx, id)
	if errors.Is(err, gorm.ErrRecordNotFound) {
		row, err = s.createExternal(ctx, id, name)
	}
	if err != nil {
		return User{}, err
	}
	if !row.Active {
		return User{}, ErrDeactivated
	}
	changes := map[string]any{}
	if row.DisplayName == nil || *row.DisplayName != name {
		changes["display_name"] = name
		row.DisplayName = &name
	}
	if id.Admin != nil && *id.Admin != row.IsAdmin {
		changes["is_admin"] = *id.Admin
		row.IsAdmin = *id.Admin
	}
	if len(changes) > 0 {
		changes["updated_at"] = models.Time(s.now())
		// Conditional on active, so a deactivation in between is not undone
		// and this request does not slip past it.
		res := s.db.WithContext(ctx).Model(&models.User{}).Where("id = ? AND active = ?", row.ID, true).Updates(changes)
		if res.Error != nil {
			return User{}, fmt.Errorf("update external user: %w", res.Error)
		}
		if res.RowsAffected == 0 {
			return User{}, ErrDeactivated
		}
	}
	return toUser(row), nil
}

func (s *Service) byIdentity(ctx context.Context, id Identity) (models.User, error) {
	var row models.User
	err := s.db.WithContext(ctx).Where("issuer = ? AND subject = ?", id.Issuer, id.Subject).Take(&row).Error
	return row, err
}

func (s *Service) createExternal(ctx context.Context, id Identity, name string) (models.User, error) {
	now := models.Time(s.now())
	uid := models.NewID("usr")
	row := models.User{ID: uid, Name: uid, IsAdmin: id.Admin != nil && *id.Admin, Active: true,
		Issuer: &id.Issuer, Subject: &id.Subject, DisplayName: &name, CreatedAt: now, UpdatedAt: now}
	err := s.db.WithContext(ctx).Create(&row).Error
	if models.IsDuplicate(err) {
		// Another request (here or on another replica) created it first.
		if row, err = s.byIdentity(ctx, id); err != nil {
			return models.User{}, fmt.Errorf("read external user after a duplicate: %w", err)
		}
		return row, nil
	}
	if err != nil {
		return models.User{}, fmt.Errorf("create external user: %w", err)
	}
	return row, nil
}

// BySubject returns the host app's user with the given subject under
// issuer, without creating one.
func (s *Service) BySubject(ctx context.Context, issuer, subject string) (User, error) {
	row, err := s.byIdentity(ctx, Identity{Issuer: issuer, Subject: subject})
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return User{}, errkind.New(errkind.NotFound, "user_not_found", "no user with that subject")
	}
	if err != nil {
		return User{}, err
	}
	return toUser(row), nil
}
