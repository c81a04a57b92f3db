package main

import (
	"context"
	"errors"

	"github.com/ferry-io/ferry/download"
	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/export"
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

// exportResolver lets the download proxy serve export artifacts: only the
// owner, and only while the export is done (revoked or expired is 410).
type exportResolver struct{ exports *export.Service }

func (r exportResolver) Resolve(ctx context.Context, id, userID string) (download.Resource, error) {
	a, err := r.exports.Artifact(ctx, id)
	if errors.Is(err, errkind.NotFound) {
		return download.Resource{}, download.ErrNotFound
	}
	if err != nil {
		return download.Resource{}, err
	}
	if a.UserID != userID {
		return download.Resource{}, download.ErrForbidden
	}
	switch a.State {
	case export.StateDone:
	case export.StateRevoked:
		return download.Resource{}, download.ErrRevoked
	case export.StateExpired:
		return download.Resource{}, download.ErrExpired
	case export.StateFailed:
		return download.Resource{}, errkind.New(errkind.Gone, "export_failed", "the export failed; it has no artifact")
	default:
		return download.Resource{}, errkind.New(errkind.Conflict, "export_not_ready", "the export is not finished yet")
	}
	return download.Resource{Key: a.Key, Size: a.Bytes, SHA256: a.SHA256, Name: a.ExportID + ".jsonl.gz",
		ContentType: "application/gzip", ModTime: a.FinishedAt}, nil
}
