package upload

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/page"
	"github.com/ferry-io/ferry/models"
)

// File is a file a user owns. It exists once S3 has accepted the whole
// upload; until ferry has hashed the stored bytes, SHA256 is the
// uploader's claim (possibly empty) and SHA256Verified is false.
type File struct {
	ID             string
	Name           string
	Size           int64
	SHA256         string
	SHA256Verified bool
	ContentType    string
	CreatedAt      time.Time
	// DownloadURL is a download link for the owner (absolute, signed),
	// valid until LinkExpires.
	DownloadURL string
	LinkExpires time.Time
	// Metadata is the trusted metadata of the ticket that made the file
	// (empty without one), ClientMetadata what its uploader sent, and
	// TicketID that ticket ("" for none).
	Metadata       Metadata
	ClientMetadata Metadata
	TicketID       string
}

var errFileNotFound = errkind.New(errkind.NotFound, "file_not_found", "no such file")

// MaxListLimit is the most files one Files call returns.
const MaxListLimit = page.MaxLimit

func (s *Service) toFile(f *models.File) File {
	l := s.links.Link(f.ID, f.UserID)
	return File{ID: f.ID, Name: f.Name, Size: f.Size, SHA256: f.SHA256, SHA256Verified: f.SHA256Verified,
		ContentType: f.ContentType, CreatedAt: f.CreatedAt, DownloadURL: l.URL, LinkExpires: l.ExpiresAt,
		Metadata: decodeMetadata(f.Metadata), ClientMetadata: decodeMetadata(f.ClientMetadata), TicketID: deref(f.TicketID)}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Files lists the caller's files, newest first, a page at a time (package
// page): cursor is "" for the first page and a returned next after that;
// next is "" on the last page; limit 0 means page.DefaultLimit. The order
// is (created_at, id) on the index ix_files_user, so every page is one
// index range.
func (s *Service) Files(ctx context.Context, userID, cursor string, limit int) (files []File, next string, err error) {
	if limit, err = page.Limit(limit); err != nil {
		return nil, "", err
	}
	q, err := page.NewestFirst(s.db.WithContext(ctx).Where("user_id = ?", userID), fileList, cursor, limit)
	if err != nil {
		return nil, "", err
	}
	var rows []models.File
	if err := q.Find(&rows).Error; err != nil {
		return nil, "", fmt.Errorf("upload: list files: %w", err)
	}
	rows, next = page.Cut(fileList, rows, limit, func(f models.File) (time.Time, string) { return f.CreatedAt, f.ID })
	files = make([]File, len(rows))
	for i := range rows {
		files[i] = s.toFile(&rows[i])
	}
	return files, next, nil
}

// fileList names the file list in its cursors.
const fileList = "files"

// File returns one of the caller's files.
func (s *Service) File(ctx context.Context, userID, id string) (File, error) {
	return s.file(ctx, s.db.WithContext(ctx).Where("id = ? AND user_id = ?", id, userID))
}

// AnyFile returns file id whoever owns it, for a service acting for the
// installation (a service key with files:read); its download link is its
// owner's.
func (s *Service) AnyFile(ctx context.Context, id string) (File, error) {
	return s.file(ctx, s.db.WithContext(ctx).Where("id = ?", id))
}

func (s *Service) file(ctx context.Context, q *gorm.DB) (File, error) {
	var f models.File
	err := q.Take(&f).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return File{}, errFileNotFound
	}
	if err != nil {
		return File{}, fmt.Errorf("upload: file: %w", err)
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
		// Grants of the file go with it: the proxy answers 404 for it now.
		if err := tx.Where("file_id = ?", f.ID).Delete(&models.DownloadGrant{}).Error; err != nil {
			return err
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
	// ETag is the object's S3 ETag when ferry merged or verified it; a
	// download sends it as If-Match, so changed bytes are never served.
	// Empty for blobs verified before ETags were kept.
	ETag string
	// CRC32C is the base64 CRC32C of the object, computed with its
	// SHA-256 by the verify job; empty until then, and for blobs verified
	// before it was kept.
	CRC32C string
}

// Readable reports whether userID may be served the file's bytes on the
// strength of something other than owning it (a chat attachment, a
// grant): only once ferry has verified its SHA-256. Until then the file
// reaches no one but its owner.
func (f StoredFile) Readable(userID string) bool { return f.UserID == userID || f.SHA256Verified }

// Stored returns file id with its object key, whoever owns it; the caller
// decides who may read it. It reads the database on every call, so a
// deleted file is gone at once.
func (s *Service) Stored(ctx context.Context, id string) (StoredFile, error) {
	var row struct {
		models.File
		S3Key  string  `gorm:"column:s3_key"`
		S3ETag string  `gorm:"column:s3_etag"`
		CRC32C *string `gorm:"column:crc32c"`
	}
	err := s.db.WithContext(ctx).Table("files").Select("files.*, blobs.s3_key, blobs.s3_etag, blobs.crc32c").
		Joins("JOIN blobs ON blobs.id = files.blob_id").Where("files.id = ?", id).Take(&row).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return StoredFile{}, errFileNotFound
	}
	if err != nil {
		return StoredFile{}, fmt.Errorf("upload: file %s: %w", id, err)
	}
	f := s.toFile(&row.File)
	f.DownloadURL = ""
	sf := StoredFile{File: f, UserID: row.UserID, Key: row.S3Key, ETag: row.S3ETag}
	if row.CRC32C != nil {
		sf.CRC32C = *row.CRC32C
	}
	return sf, nil
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
