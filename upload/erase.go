package upload

import (
	"context"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
)

// EraseReport counts what EraseUser removed.
type EraseReport struct {
	Files   int // files deleted
	Uploads int // upload rows deleted, finished or not
	// Live is how many of them were still open in S3; each has a purge
	// job that aborts its multipart upload and deletes its object.
	Live int
	// Objects is how many blobs lost their last reference; each has a
	// purge job that deletes its object.
	Objects int
}

// EraseUser removes everything of userID's that this package keeps,
// inside tx: its files (each dropping its blob reference, as DeleteFile
// does; a blob no file of any user holds any more is deleted and its
// object purged), download grants on those files, grants given to the
// user and grants the user made, its uploads and their parts, Companion
// mappings, proof-of-possession challenges, and upload tickets for it or
// made by it. S3 is never called here: every object to delete or
// multipart upload to abort becomes an upload.purge job in tx, so the
// deletion in S3 happens if and only if the erasure commits, is retried
// until S3 answers, and is harmless to repeat. It needs no Service: `ferry
// user delete` runs it without a store. The caller wakes KindPurge after
// its commit.
func EraseUser(ctx context.Context, tx *gorm.DB, q *jobs.Queue, now time.Time, userID string) (EraseReport, error) {
	var rep EraseReport
	tx = tx.WithContext(ctx)
	wrap := func(what string, err error) (EraseReport, error) {
		return EraseReport{}, fmt.Errorf("upload: erase user %s: %s: %w", userID, what, err)
	}
	var files []models.File
	if err := tx.Where("user_id = ?", userID).Find(&files).Error; err != nil {
		return wrap("files", err)
	}
	now = models.Time(now)
	for _, f := range files {
		if err := tx.Where("id = ?", f.ID).Delete(&models.File{}).Error; err != nil {
			return wrap("file", err)
		}
		if err := tx.Where("file_id = ?", f.ID).Delete(&models.DownloadGrant{}).Error; err != nil {
			return wrap("grants", err)
		}
		if err := tx.Model(&models.Blob{}).Where("id = ?", f.BlobID).
			Updates(map[string]any{"refs": gorm.Expr("refs - 1"), "updated_at": now}).Error; err != nil {
			return wrap("blob", err)
		}
		var b models.Blob
		if err := tx.Where("id = ?", f.BlobID).Take(&b).Error; err != nil {
			return wrap("blob", err)
		}
		if b.Refs > 0 {
			continue
		}
		if err := tx.Where("id = ? AND refs <= 0", b.ID).Delete(&models.Blob{}).Error; err != nil {
			return wrap("blob", err)
		}
		if err := enqueuePurge(ctx, tx, q, b.S3Key, ""); err != nil {
			return wrap("purge", err)
		}
		rep.Objects++
	}
	rep.Files = len(files)
	if err := tx.Where("user_id = ? OR created_by = ?", userID, userID).Delete(&models.DownloadGrant{}).Error; err != nil {
		return wrap("grants", err)
	}

	var ups []models.Upload
	if err := tx.Where("user_id = ?", userID).Find(&ups).Error; err != nil {
		return wrap("uploads", err)
	}
	for _, u := range ups {
		// A finished upload's object is its file's blob (handled above)
		// or already gone; an open one still has bytes in S3: a
		// multipart upload to abort, or a posted object to delete. The
		// purge job leaves an object alone while a blob uses its key.
		if liveStates[u.State] {
			if err := enqueuePurge(ctx, tx, q, u.S3Key, u.S3UploadID); err != nil {
				return wrap("purge", err)
			}
			rep.Live++
		}
		if err := tx.Where("upload_id = ?", u.ID).Delete(&models.UploadPart{}).Error; err != nil {
			return wrap("parts", err)
		}
	}
	rep.Uploads = len(ups)
	for _, d := range []struct {
		what  string
		model any
		where string
	}{
		{"uploads", &models.Upload{}, "user_id = ?"},
		{"companion", &models.CompanionUpload{}, "user_id = ?"},
		{"challenges", &models.UploadChallenge{}, "user_id = ?"},
		{"tickets", &models.UploadTicket{}, "user_id = ? OR created_by = ?"},
	} {
		args := []any{userID}
		if strings.Count(d.where, "?") == 2 {
			args = append(args, userID)
		}
		if err := tx.Where(d.where, args...).Delete(d.model).Error; err != nil {
			return wrap(d.what, err)
		}
	}
	return rep, nil
}
