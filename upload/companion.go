package upload

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/s3store"
)

// This file is the upload service as S3-speaking clients see it: Uppy's
// @uppy/aws-s3 plugin talks to a Companion server in S3's own vocabulary
// (object keys, S3 UploadIds, part ETags) and does not know a file's size
// until it completes. Such an upload is an ordinary upload row whose size
// is 0 ("unsized") while it is uploading; Complete learns the layout from
// the parts the client names and S3 lists, runs S3's
// CompleteMultipartUpload in the request (as Companion does), records the
// size, and hands the upload to the normal merge job, which verifies the
// object and writes the file and the upload.completed event.
//
// Clients name an upload by its S3 UploadId; companion_uploads maps it to
// the upload and its owner. The object key a client sends back is never
// used: every S3 call takes the key from the upload row.

// Multipart is an upload as S3 names it.
type Multipart struct {
	UploadID   string // ferry's upload id
	Key        string // the object key
	S3UploadID string
	Bucket     string
	State      string
}

// OpenRequest starts an upload whose size is not known yet.
type OpenRequest struct {
	FileName    string
	ContentType string // empty means application/octet-stream
	// Metadata is what the uploader says about the file (Uppy's meta).
	Metadata Metadata
	// Ticket, when the caller authenticated with one, makes this the
	// ticket's one upload, within its limits (its size is checked once it
	// is known).
	Ticket *Ticket
}

func s3UploadHash(s3UploadID string) string {
	h := sha256.Sum256([]byte(s3UploadID))
	return hex.EncodeToString(h[:])
}

// unsized reports whether u's size is not known yet: a Companion upload
// before its complete, or a POST upload before its adoption. Native
// uploads declare theirs (and an empty file is refused).
func unsized(u *models.Upload) bool { return u.Kind != KindNative && u.Size == 0 }

// partLimit is the highest part number that belongs to u's file: the
// store's part limit while its size is unknown.
func (s *Service) partLimit(u *models.Upload) int {
	if unsized(u) {
		return s.cfg.MaxParts
	}
	return u.PartCount
}

func (s *Service) multipartOf(u *models.Upload) Multipart {
	return Multipart{UploadID: u.ID, Key: u.S3Key, S3UploadID: u.S3UploadID, Bucket: s.store.Bucket(), State: u.State}
}

func validateOpen(r OpenRequest) (name, contentType string, err error) {
	if err := checkFileName(r.FileName); err != nil {
		return "", "", err
	}
	if err := r.Metadata.check("metadata"); err != nil {
		return "", "", err
	}
	ct, err := checkContentType(r.ContentType)
	if err != nil {
		return "", "", err
	}
	if t := r.Ticket; t != nil {
		if t.UploadID != "" {
			return "", "", errTicketUsed.With("upload_id", t.UploadID)
		}
		if err := t.checkType(ct); err != nil {
			return "", "", err
		}
	}
	return r.FileName, ct, nil
}

// openRow is the row of an upload of kind (KindCompanion or KindPost)
// whose size is learnt later, with what the request and its ticket say
// about it.
func openRow(r OpenRequest, kind, id, userID, name, ct, key, s3id string, now, expires time.Time) models.Upload {
	u := models.Upload{
		ID: id, UserID: userID, FileName: name, ContentType: ct, S3Key: key, S3UploadID: s3id, Kind: kind,
		State: StateUploading, CreatedAt: now, UpdatedAt: now, ExpiresAt: expires, ClientMetadata: r.Metadata.encode(),
	}
	if r.Ticket != nil {
		u.TicketID, u.Metadata = &r.Ticket.ID, r.Ticket.Metadata.encode()
	}
	return u
}

// insertOpen writes an upload row of openRow, claiming its ticket, with
// what else must be written with it.
func (s *Service) insertOpen(ctx context.Context, r OpenRequest, u *models.Upload, also func(tx *gorm.DB) error) error {
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if r.Ticket != nil {
			if err := s.claimTicket(tx, r.Ticket, u.ID, u.CreatedAt); err != nil {
				return err
			}
		}
		if err := tx.Create(u).Error; err != nil {
			return err
		}
		return also(tx)
	})
}

// InitMultipart starts an upload for userID whose size the client does not
// declare, and returns its S3 names. The upload and its UploadId mapping
// are written in one transaction after S3 answers; a failed insert aborts
// the multipart upload.
func (s *Service) InitMultipart(ctx context.Context, userID string, r OpenRequest) (Multipart, error) {
	name, ct, err := validateOpen(r)
	if err != nil {
		return Multipart{}, err
	}
	if err := s.checkOpenLimit(ctx, userID); err != nil {
		return Multipart{}, err
	}
	if err := s.checkQuotaLeft(ctx, userID); err != nil {
		return Multipart{}, err
	}
	id := models.NewID("upl")
	key := keyPrefix + id
	s3id, err := s.store.CreateMultipart(ctx, key, s3store.MultipartOptions{ContentType: ct})
	if err != nil {
		return Multipart{}, storageError("create multipart upload", err)
	}
	now := s.nowUTC()
	u := openRow(r, KindCompanion, id, userID, name, ct, key, s3id, now, now.Add(s.cfg.TTL))
	err = s.insertOpen(ctx, r, &u, func(tx *gorm.DB) error {
		return tx.Create(&models.CompanionUpload{S3UploadHash: s3UploadHash(s3id), UploadID: id, UserID: userID, CreatedAt: now}).Error
	})
	if err != nil {
		s.abortQuietly(ctx, key, s3id)
		if errkind.KindOf(err) != nil {
			return Multipart{}, err
		}
		return Multipart{}, fmt.Errorf("upload: insert: %w", err)
	}
	s.metrics.transition(StateUploading)
	s.log.InfoContext(ctx, "upload created", "upload_id", id, "user_id", userID, "size", "unknown", "api", "s3", "ticket_id", deref(u.TicketID))
	return s.multipartOf(&u), nil
}

// loadMultipart returns the caller's upload with this S3 UploadId, or
// errNotFound for an unknown one and someone else's alike.
func (s *Service) loadMultipart(ctx context.Context, userID, s3UploadID string) (*models.Upload, error) {
	if s3UploadID == "" {
		return nil, errNotFound
	}
	var m models.CompanionUpload
	err := s.db.WithContext(ctx).Where("s3_upload_hash = ? AND user_id = ?", s3UploadHash(s3UploadID), userID).Take(&m).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("upload: find upload id: %w", err)
	}
	u, err := s.load(ctx, userID, m.UploadID)
	if err != nil {
		return nil, err
	}
	if u.S3UploadID != s3UploadID { // a hash collision would be news; refuse it anyway
		return nil, errNotFound
	}
	if s.expired(u) {
		return nil, errExpired
	}
	return u, nil
}

// MultipartStatus returns the caller's upload with this S3 UploadId.
func (s *Service) MultipartStatus(ctx context.Context, userID, s3UploadID string) (Multipart, error) {
	u, err := s.loadMultipart(ctx, userID, s3UploadID)
	if err != nil {
		return Multipart{}, err
	}
	return s.multipartOf(u), nil
}

// S3Part is a part as S3 lists it.
type S3Part struct {
	Number       int
	ETag         string
	Size         int64
	LastModified time.Time
}

// MultipartParts lists the parts S3 holds for the caller's upload (every
// page), in part order.
func (s *Service) MultipartParts(ctx context.Context, userID, s3UploadID string) ([]S3Part, error) {
	u, err := s.loadMultipart(ctx, userID, s3UploadID)
	if err != nil {
		return nil, err
	}
	if u.State != StateUploading {
		return nil, notUploading(u.State)
	}
	listed, err := s.store.ListParts(ctx, u.S3Key, u.S3UploadID)
	if errors.Is(err, s3store.ErrNoSuchUpload) {
		if err := s.expire(ctx, u); err != nil {
			return nil, err
		}
		return nil, errExpired
	}
	if err != nil {
		return nil, storageError("list parts", err)
	}
	out := make([]S3Part, 0, len(listed))
	for _, p := range listed {
		if n := int(p.Number); n >= 1 && n <= s.partLimit(u) {
			out = append(out, S3Part{Number: n, ETag: p.ETag, Size: p.Size, LastModified: p.LastModified})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Number < out[j].Number })
	return out, nil
}

// PresignMultipart signs part PUTs for the caller's upload with this S3
// UploadId, like Presign. Nothing but the part number is signed, so the
// client may send any Content-Type.
func (s *Service) PresignMultipart(ctx context.Context, userID, s3UploadID string, parts []int) (map[int]PresignedPart, error) {
	u, err := s.loadMultipart(ctx, userID, s3UploadID)
	if err != nil {
		return nil, err
	}
	return s.presign(ctx, u, PresignRequest{Parts: parts})
}

// AbortMultipart aborts the caller's upload with this S3 UploadId, like
// Abort.
func (s *Service) AbortMultipart(ctx context.Context, userID, s3UploadID string) (Multipart, error) {
	u, err := s.loadMultipart(ctx, userID, s3UploadID)
	if err != nil {
		return Multipart{}, err
	}
	st, err := s.Abort(ctx, userID, u.ID)
	if err != nil {
		return Multipart{}, err
	}
	u.State = st.State
	return s.multipartOf(u), nil
}

// CompleteMultipart completes the caller's upload with this S3 UploadId
// from the parts the client names: S3's CompleteMultipartUpload runs in
// the request with those parts and ETags (quoted or not), the upload takes
// the size of the object, and the merge job then verifies it and creates
// the file, as for any upload. Calling it again answers the upload's
// current state.
func (s *Service) CompleteMultipart(ctx context.Context, userID, s3UploadID string, parts []ClientPart) (Multipart, error) {
	u, err := s.loadMultipart(ctx, userID, s3UploadID)
	if err != nil {
		return Multipart{}, err
	}
	if done, err := completed(u); done || err != nil {
		return s.multipartOf(u), err
	}
	if len(parts) == 0 {
		return Multipart{}, errkind.Invalidf("invalid_parts", "parts must list at least one part")
	}
	etags, err := checkClientParts(parts, s.partLimit(u))
	if err != nil {
		return Multipart{}, err
	}
	nums := make([]int, 0, len(etags))
	for n := range etags {
		nums = append(nums, n)
	}
	sort.Ints(nums)

	var size, partSize int64
	listed, err := s.store.ListPartsPreferring(ctx, u.S3Key, u.S3UploadID, preferring(u, etags))
	switch {
	case errors.Is(err, s3store.ErrNoSuchUpload):
		// A previous call completed it in S3 and failed before recording
		// it; the object, if there, says how big it is.
		info, herr := s.store.Head(ctx, u.S3Key)
		if errors.Is(herr, s3store.ErrNotFound) {
			if err := s.expire(ctx, u); err != nil {
				return Multipart{}, err
			}
			return Multipart{}, errExpired
		}
		if herr != nil {
			return Multipart{}, storageError("head object", herr)
		}
		size, partSize = info.Size, info.Size
	case err != nil:
		return Multipart{}, storageError("list parts", err)
	default:
		if size, partSize, err = s.layoutOf(u, listed, nums, etags); err != nil {
			return Multipart{}, err
		}
		// The size is known only now: the ticket's limit and the quota
		// are checked before S3 makes the object. A refusal changes
		// nothing; the client may abort, or make room and complete again.
		if err := s.checkLearntSize(ctx, u, size); err != nil {
			return Multipart{}, err
		}
		cps := make([]s3store.CompletedPart, len(nums))
		for i, n := range nums {
			cps[i] = s3store.CompletedPart{Number: int32(n), ETag: `"` + etags[n] + `"`}
		}
		_, err = s.store.CompleteMultipart(ctx, u.S3Key, u.S3UploadID, cps, "")
		switch {
		case errors.Is(err, s3store.ErrInvalidParts):
			return Multipart{}, errkind.Invalidf("invalid_parts", "S3 refused the parts: check part numbers, ETags and sizes")
		case err != nil && !errors.Is(err, s3store.ErrNoSuchUpload): // NoSuchUpload: a racing call completed it
			return Multipart{}, storageError("complete multipart upload", err)
		}
	}
	return s.recordCompleted(ctx, u, size, partSize, len(nums), etags)
}

// checkLearntSize checks the size an unsized upload turned out to have
// against its ticket's limit and its owner's quota.
func (s *Service) checkLearntSize(ctx context.Context, u *models.Upload, size int64) error {
	t, err := s.ticketOf(ctx, u)
	if err != nil {
		return err
	}
	if t != nil {
		if err := t.checkSize(size); err != nil {
			return err
		}
	}
	return s.checkQuotaFor(ctx, u.UserID, size)
}

// layoutOf checks the named parts against S3's listing and returns the
// size of the file they make and its largest part. Every named part must
// be there with the named ETag, and every part but the last must be at
// least MinPartSize, as S3 requires.
func (s *Service) layoutOf(u *models.Upload, listed []s3store.Part, nums []int, etags map[int]string) (size, partSize int64, err error) {
	have := make(map[int]s3store.Part, len(listed))
	for _, p := range listed {
		have[int(p.Number)] = p
	}
	for i, n := range nums {
		p, ok := have[n]
		if !ok {
			return 0, 0, errkind.Invalidf("invalid_parts", "part %d was not uploaded", n).With("missing_parts", []int{n})
		}
		if normalizeETag(p.ETag) != etags[n] {
			return 0, 0, errkind.Invalidf("invalid_parts", "part %d: the ETag does not match the part S3 holds", n)
		}
		if i < len(nums)-1 && p.Size < MinPartSize {
			return 0, 0, errkind.Invalidf("invalid_parts", "part %d is %d bytes; every part but the last must be at least %d", n, p.Size, MinPartSize)
		}
		size += p.Size
		partSize = max(partSize, p.Size)
	}
	if size > s.cfg.MaxSize {
		return 0, 0, errkind.Invalidf("size_too_large", "the parts make %d bytes, over the maximum of %d", size, s.cfg.MaxSize)
	}
	if size == 0 {
		return 0, 0, errkind.Invalidf("invalid_size", "the parts hold no bytes")
	}
	return size, partSize, nil
}

// recordCompleted moves an unsized upload whose multipart upload S3 has
// completed to pending, with its size and layout, and enqueues its merge.
func (s *Service) recordCompleted(ctx context.Context, u *models.Upload, size, partSize int64, partCount int, etags map[int]string) (Multipart, error) {
	now := s.nowUTC()
	upd := map[string]any{
		"state": StatePending, "size": size, "part_size": partSize, "part_count": partCount, "updated_at": now,
	}
	if len(etags) > 0 {
		b, _ := json.Marshal(etags)
		upd["client_etags"] = string(b)
	}
	moved := false
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Model(&models.Upload{}).Where("id = ? AND state = ?", u.ID, StateUploading).Updates(upd)
		if res.Error != nil || res.RowsAffected == 0 {
			return res.Error
		}
		moved = true
		_, err := s.queue.Enqueue(ctx, tx, jobs.Spec{Kind: KindMerge, Key: u.ID})
		return err
	})
	if err != nil {
		return Multipart{}, fmt.Errorf("upload: complete: %w", err)
	}
	if !moved { // a racing call recorded it
		cur, err := s.load(ctx, u.UserID, u.ID)
		if err != nil {
			return Multipart{}, err
		}
		return s.multipartOf(cur), nil
	}
	s.queue.Wake(KindMerge)
	s.metrics.transition(StatePending)
	s.log.InfoContext(ctx, "upload complete accepted", "upload_id", u.ID, "parts", partCount, "size", size, "api", "s3")
	u.State = StatePending
	return s.multipartOf(u), nil
}
