package server

import (
	"context"
	"errors"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/users"
)

var errNoIssuer = errkind.Invalidf("invalid_user", "subject needs FERRY_JWT_ISSUER (the issuer of your users' JWTs); name the user by user_id instead")

// subjectToUser finds the ferry user for the host app's user id, the sub
// of FERRY_JWT_ISSUER's tokens, or creates it as that user's first JWT
// would: a backend may create a ticket or a grant for a user before they
// ever called ferry. An existing user is used as it is (no name is
// changed), and must be active.
func (s *Server) subjectToUser(ctx context.Context, subject string) (users.User, error) {
	if s.d.JWT == nil {
		return users.User{}, errNoIssuer
	}
	if len(subject) > 255 {
		return users.User{}, errkind.Invalidf("invalid_user", "subject is longer than 255 bytes")
	}
	u, err := s.d.Users.BySubject(ctx, s.d.JWT.Issuer(), subject)
	if errors.Is(err, errkind.NotFound) {
		u, err = s.d.Users.External(ctx, users.Identity{Issuer: s.d.JWT.Issuer(), Subject: subject})
	}
	switch {
	case errors.Is(err, users.ErrDeactivated):
		return users.User{}, errInactiveUser
	case err != nil:
		return users.User{}, err
	case !u.Active:
		return users.User{}, errInactiveUser
	}
	return u, nil
}
