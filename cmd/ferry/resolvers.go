package main

import (
	"context"
	"errors"

	"github.com/ferry-io/ferry/download"
	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/upload"
)

// fileResolver lets the download proxy serve uploaded files: the owner may
// read a file, and so may anyone who can currently see a message that
// attaches it (when canSee is set).
type fileResolver struct {
	uploads *upload.Service
	canSee  func(ctx context.Context, userID, fileID string) (bool, error)
}

func (r fileResolver) Resolve(ctx context.Context, id, userID string) (download.Resource, error) {
	f, err := r.uploads.Stored(ctx, id)
	if errors.Is(err, errkind.NotFound) {
		return download.Resource{}, download.ErrNotFound
	}
	if err != nil {
		return download.Resource{}, err
	}
	if f.UserID != userID {
		ok := false
		if r.canSee != nil {
			if ok, err = r.canSee(ctx, userID, id); err != nil {
				return download.Resource{}, err
			}
		}
		if !ok {
			return download.Resource{}, download.ErrForbidden
		}
	}
	return download.Resource{Key: f.Key, Size: f.Size, SHA256: f.SHA256, Name: f.Name, ContentType: f.ContentType, ModTime: f.CreatedAt}, nil
}
