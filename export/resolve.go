package export

import (
	"context"
	"errors"

	"github.com/ferry-io/ferry/download"
	"github.com/ferry-io/ferry/errkind"
)

var (
	errExportFailed   = errkind.New(errkind.Gone, "export_failed", "the export failed; it has no artifact")
	errExportNotReady = errkind.New(errkind.Conflict, "export_not_ready", "the export is not finished yet")
)

// Resolve lets the download proxy serve export artifacts (Service is a
// download.Resolver): only to the owner, and only while the export is
// done; a revoked or expired export is 410.
func (s *Service) Resolve(ctx context.Context, id, userID string) (download.Resource, error) {
	a, err := s.Artifact(ctx, id)
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
	case StateDone:
	case StateRevoked:
		return download.Resource{}, download.ErrRevoked
	case StateExpired:
		return download.Resource{}, download.ErrExpired
	case StateFailed:
		return download.Resource{}, errExportFailed
	default:
		return download.Resource{}, errExportNotReady
	}
	return download.Resource{Key: a.Key, Size: a.Bytes, SHA256: a.SHA256, CRC32C: a.CRC32C, Name: a.ExportID + ".jsonl.gz",
		ContentType: "application/gzip", ModTime: a.FinishedAt}, nil
}

var _ download.Resolver = (*Service)(nil)
