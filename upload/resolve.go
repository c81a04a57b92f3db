package upload

import (
	"context"
	"errors"

	"github.com/ferry-io/ferry/download"
	"github.com/ferry-io/ferry/errkind"
)

// CanSee reports whether userID can currently see a message that attaches
// file fileID. *chat.Service's CanSeeFile is one.
type CanSee func(ctx context.Context, userID, fileID string) (bool, error)

// Resolver returns the download proxy's resolver for uploaded files. The
// owner may read a file, and so may anyone it is granted to (a download
// grant, until it is revoked or expires) and anyone canSee admits (nil:
// nobody else). Every request asks again, so a revocation or a leave
// takes effect on the next request. Someone other than the owner is served
// a file only once ferry has verified it (see StoredFile.Readable).
func (s *Service) Resolver(canSee CanSee) download.Resolver {
	return fileResolver{s: s, canSee: canSee}
}

type fileResolver struct {
	s      *Service
	canSee CanSee
}

func (r fileResolver) Resolve(ctx context.Context, id, userID string) (download.Resource, error) {
	f, err := r.s.Stored(ctx, id)
	if errors.Is(err, errkind.NotFound) {
		return download.Resource{}, download.ErrNotFound
	}
	if err != nil {
		return download.Resource{}, err
	}
	if f.UserID != userID {
		if err := r.admit(ctx, id, userID); err != nil {
			return download.Resource{}, err
		}
		if !f.Readable(userID) {
			return download.Resource{}, errNotVerified
		}
	}
	res := download.Resource{Key: f.Key, Size: f.Size, Name: f.Name, ContentType: f.ContentType,
		ModTime: f.CreatedAt, StoreETag: f.ETag}
	if f.SHA256Verified {
		res.SHA256 = f.SHA256 // before that, the proxy tags the bytes with S3's ETag, not a claim
		res.CRC32C = f.CRC32C
	}
	return res, nil
}

// admit lets a user who does not own the file through on an active grant
// or on what canSee says; otherwise a revoked or expired grant is 410,
// and anything else 403.
func (r fileResolver) admit(ctx context.Context, id, userID string) error {
	grant, err := r.s.Access(ctx, id, userID)
	if err != nil {
		return err
	}
	if grant == GrantActive {
		return nil
	}
	if r.canSee != nil {
		ok, err := r.canSee(ctx, userID, id)
		if err != nil || ok {
			return err
		}
	}
	switch grant {
	case GrantRevoked:
		return download.ErrRevoked
	case GrantExpired:
		return download.ErrExpired
	}
	return download.ErrForbidden
}
