package upload

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/models"
)

// File is a verified file a user owns.
type File struct {
	ID          string
	Name        string
	Size        int64
	SHA256      string
	ContentType string
	CreatedAt   time.Time
	// DownloadURL is a ferry download link (path and signed query), valid
	// for the configured link lifetime from when the File was read.
	DownloadURL string
}

var errFileNotFound = errkind.New(errkind.NotFound, "file_not_found", "no such file")

// MaxListLimit is the most files one Files call returns.
const MaxListLimit = 1000

func (s *Service) toFile(f *models.File) File {
	path := "/download/" + f.ID
	q := s.links.Sign(path, f.ID, f.UserID, s.cfg.LinkTTL)
	return File{ID: f.ID, Name: f.Name, Size: f.Size, SHA256: f.SHA256, ContentType: f.ContentType,
		CreatedAt: f.CreatedAt, DownloadURL: path + "?" + q.Encode()}
}

// Files lists the caller's files, newest first, limit at a time. cursor
// is "" for the first page and the returned next cursor after that; next
// is "" on the last page.
func (s *Service) Files(ctx context.Context, userID, cursor string, limit int) (files []File, next string, err error) {
	if limit <= 0 || limit > MaxListLimit {
		return nil, "", errkind.Invalidf("invalid_limit", "limit must be 1-%d", MaxListLimit)
	}
	q := s.db.WithContext(ctx).Where("user_id = ?", userID)
	if cursor != "" {
		at, id, err := decodeCursor(cursor)
		if err != nil {
			return nil, "", err
		}
		q = q.Where("created_at < ? OR (created_at = ? AND id < ?)", at, at, id)
	}
	var rows []models.File
	if err := q.Order("created_at DESC, id DESC").Limit(limit + 1).Find(&rows).Error; err != nil {
		return nil, "", fmt.Errorf("upload: list files: %w", err)
	}
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[limit-1]
		next = encodeCursor(last.CreatedAt, last.ID)
	}
	files = make([]File, len(rows))
	for i := range rows {
		files[i] = s.toFile(&rows[i])
	}
	return files, next, nil
}

func encodeCursor(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(models.Time(at).Format(time.RFC3339Nano) + "|" + id))
}

func decodeCursor(c string) (time.Time, string, error) {
	bad := errkind.Invalidf("invalid_cursor", "cursor is not one ferry returned")
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, "", bad
	}
	ts, id, ok := strings.Cut(string(b), "|")
	at, err := time.Parse(time.RFC3339Nano, ts)
	if !ok || err != nil || id == "" {
		return time.Time{}, "", bad
	}
	return models.Time(at), id, nil
}

// File returns one of the caller's files.
func (s *Service) File(ctx context.Context, userID, id string) (File, error) {
	var f models.File
	err := s.db.WithContext(ctx).Where("id = ? AND user_id = ?", id, userID).Take(&f).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return File{}, errFileNotFound
	}
	if err != nil {
		return File{}, fmt.Errorf("upload: file %s: %w", id, err)
	}
	return s.toFile(&f), nil
}

// DeleteFile deletes one of the caller's files and drops its reference to
// the blob. The last reference deletes the blob and, through a purge job
// enqueued in the same transaction, its object.
func (s *Service) DeleteFile(ctx context.Context, userID, id string) error {
	purge := false
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var f models.File
		err := tx.Where("id = ? AND user_id = ?", id, userID).Take(&f).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return errFileNotFound
		}
		if err != nil {
			return err
		}
		res := tx.Where("id = ?", f.ID).Delete(&models.File{})
		if res.Error != nil || res.RowsAffected == 0 {
			if res.Error == nil {
				return errFileNotFound // deleted by a concurrent call
			}
			return res.Error
		}
		now := s.nowUTC()
		if err := tx.Model(&models.Blob{}).Where("id = ?", f.BlobID).
			Updates(map[string]any{"refs": gorm.Expr("refs - 1"), "updated_at": now}).Error; err != nil {
			return err
		}
		var b models.Blob
		if err := tx.Where("id = ?", f.BlobID).Take(&b).Error; err != nil {
			return err
		}
		if b.Refs > 0 {
			return nil
		}
		if err := tx.Where("id = ? AND refs <= 0", b.ID).Delete(&models.Blob{}).Error; err != nil {
			return err
		}
		purge = true
		return s.enqueuePurge(ctx, tx, b.S3Key, "")
	})
	if err != nil {
		if errors.Is(err, errFileNotFound) {
			return err
		}
		return fmt.Errorf("upload: delete file %s: %w", id, err)
	}
	if purge {
		s.queue.Wake(KindPurge)
	}
	s.log.InfoContext(ctx, "file deleted", "file_id", id, "blob_deleted", purge)
	return nil
}

// StoredFile is a file with where its bytes live, for the download proxy.
type StoredFile struct {
	File
	UserID string // the owner
	Key    string // the blob's object key
}

// Stored returns file id with its object key, whoever owns it; the caller
// decides who may read it. It reads the database on every call, so a
// deleted file is gone at once.
func (s *Service) Stored(ctx context.Context, id string) (StoredFile, error) {
	var row struct {
		models.File
		S3Key string `gorm:"column:s3_key"`
	}
	err := s.db.WithContext(ctx).Table("files").Select("files.*, blobs.s3_key").
		Joins("JOIN blobs ON blobs.id = files.blob_id").Where("files.id = ?", id).Take(&row).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return StoredFile{}, errFileNotFound
	}
	if err != nil {
		return StoredFile{}, fmt.Errorf("upload: file %s: %w", id, err)
	}
	f := s.toFile(&row.File)
	f.DownloadURL = ""
	return StoredFile{File: f, UserID: row.UserID, Key: row.S3Key}, nil
}

// Owned checks that every id in ids is a file of userID, for chat
// attachments. An id that is missing or someone else's is NotFound, so a
// caller cannot probe other users' files.
func (s *Service) Owned(ctx context.Context, userID string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	uniq := map[string]bool{}
	for _, id := range ids {
		uniq[id] = true
	}
	var n int64
	err := s.db.WithContext(ctx).Model(&models.File{}).Where("user_id = ? AND id IN ?", userID, ids).Count(&n).Error
	if err != nil {
		return fmt.Errorf("upload: owned: %w", err)
	}
	if int(n) != len(uniq) {
		return errkind.New(errkind.NotFound, "attachment_not_found", "an attachment is not one of your files")
	}
	return nil
}
