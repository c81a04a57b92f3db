package upload

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/random"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/notify"
	"github.com/ferry-io/ferry/s3store"
)

// Proof-of-possession parameters. Each range is min(64 KiB, size) bytes,
// so a small file's ranges are the whole file; what makes the answer need
// the bytes is the nonce, not the range (see ProofDigest).
const (
	challengeRanges   = 3
	challengeRangeMax = 64 << 10
	nonceBytes        = 32
)

// Init starts an upload for userID, unless one of the special answers
// applies first: the caller already owns this content (Instant), has an
// unfinished upload of it (Resumed), or someone else owns it
// (ProofRequired). The special answers need the client's sha256; a client
// that has not hashed the file yet can still resume by the first part's
// CRC32C (and later declare the hash with DeclareSHA256).
func (s *Service) Init(ctx context.Context, userID string, r InitRequest) (InitResult, error) {
	p, err := s.validate(r)
	if err != nil {
		return InitResult{}, err
	}
	if p.ticket != nil {
		// A ticket makes one upload, this one, so the answers that would
		// make another (an instant file, a proof) or adopt another
		// (resume by content) do not apply; content the user holds
		// already is still stored once, after verification.
		if p.ticket.UploadID != "" {
			return s.ticketUpload(ctx, p.ticket.ID, p)
		}
		res, err := s.create(ctx, userID, p)
		if errors.Is(err, errTicketUsed) {
			return s.ticketUpload(ctx, p.ticket.ID, p)
		}
		return res, err
	}
	if p.sha256 != "" {
		res, ok, err := s.special(ctx, userID, p)
		if err != nil || ok {
			return res, err
		}
		return s.create(ctx, userID, p)
	}
	candidate, err := s.headHeld(ctx, p)
	if err != nil {
		return InitResult{}, err
	}
	res, ok := InitResult{Outcome: Resumed}, false
	if p.firstPartCRC32C != "" {
		res.Upload, ok, err = s.resumeBy(ctx, hintKey(userID, p))
		if err != nil {
			return InitResult{}, err
		}
	}
	if !ok {
		if res, err = s.create(ctx, userID, p); err != nil {
			return res, err
		}
	}
	res.Upload.InstantCandidate = candidate && res.Upload.State == StateUploading
	return res, nil
}

// HeadLength is how much of a file its head CRC32C covers: the first part
// at the default part size, which a client reads first anyway.
const HeadLength = 8 << 20

// headHeld reports whether ferry holds verified content of the planned
// size whose head has the client's CRC32C. It is a hint, not an answer:
// different files can share size and head (the client's SHA-256 and a
// proof decide), so it tells a caller no more about others' content than
// the SHA-256 lookup it leads to.
func (s *Service) headHeld(ctx context.Context, p plan) (bool, error) {
	if p.headCRC32C == "" {
		return false, nil
	}
	var n int64
	err := s.db.WithContext(ctx).Model(&models.Blob{}).
		Where("size = ? AND head_crc32c = ? AND sha256 IS NOT NULL", p.size, p.headCRC32C).Limit(1).Count(&n).Error
	if err != nil {
		return false, fmt.Errorf("upload: find blob by head: %w", err)
	}
	return n > 0, nil
}

// resumeKey identifies a user's unfinished upload of one content.
func resumeKey(userID, sha string, size int64) string {
	return userID + "|" + sha + "|" + strconv.FormatInt(size, 10)
}

// hintKey identifies a user's unfinished upload by what a client knows
// before it has read the whole file: the size, the part size and the first
// part's CRC32C. Two different files can share it (same length and first
// part); resuming the wrong one is harmless, because the client compares
// every part S3 holds with its own CRC32C and sends again those that
// differ, and S3 checks the whole file's CRC32C at completion.
func hintKey(userID string, p plan) string {
	return userID + "|crc32c:" + p.firstPartCRC32C + "|" + strconv.FormatInt(p.size, 10) + "|" + strconv.FormatInt(p.partSize, 10)
}

// special tries the three special answers in order of what saves the
// client most: a file right now, then the parts it already sent, then a
// proof instead of an upload.
func (s *Service) special(ctx context.Context, userID string, p plan) (InitResult, bool, error) {
	blob, err := s.blobFor(ctx, p.sha256, p.size)
	if err != nil {
		return InitResult{}, false, err
	}
	if blob != nil && !s.intact(ctx, blob) {
		blob = nil // never hand out a file of bytes that are not what ferry verified
	}
	if blob != nil {
		owns, err := s.owns(ctx, userID, blob.ID)
		if err != nil {
			return InitResult{}, false, err
		}
		if owns {
			st, ok, err := s.instant(ctx, userID, blob, p.name, p.contentType, p.clientMeta)
			if err != nil || ok {
				return InitResult{Outcome: Instant, Upload: st}, ok, err
			}
			blob = nil // deleted meanwhile: upload it again
		}
	}
	if st, ok, err := s.resumeBy(ctx, resumeKey(userID, p.sha256, p.size)); err != nil || ok {
		return InitResult{Outcome: Resumed, Upload: st}, ok, err
	}
	if blob != nil {
		ch, err := s.challenge(ctx, userID, blob, p.name, p.contentType, p.clientMeta)
		if err != nil {
			return InitResult{}, false, err
		}
		return InitResult{Outcome: ProofRequired, Challenge: ch}, true, nil
	}
	return InitResult{}, false, nil
}

// blobFor returns the verified blob with this content, or nil.
func (s *Service) blobFor(ctx context.Context, sha string, size int64) (*models.Blob, error) {
	var b models.Blob
	err := s.db.WithContext(ctx).Where("sha256 = ? AND size = ?", sha, size).Take(&b).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("upload: find blob: %w", err)
	}
	return &b, nil
}

func (s *Service) owns(ctx context.Context, userID, blobID string) (bool, error) {
	var n int64
	err := s.db.WithContext(ctx).Model(&models.File{}).Where("user_id = ? AND blob_id = ?", userID, blobID).Limit(1).Count(&n).Error
	if err != nil {
		return false, fmt.Errorf("upload: find file: %w", err)
	}
	return n > 0, nil
}

// resumeBy returns the unfinished upload with this resume key: one still
// uploading, with the parts S3 holds, or one whose merge is pending, for
// the client to poll. An upload past its TTL is expired on the spot, so
// that its resume key frees up for a new one.
func (s *Service) resumeBy(ctx context.Context, key string) (Status, bool, error) {
	var u models.Upload
	err := s.db.WithContext(ctx).Where("resume_key = ?", key).Take(&u).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Status{}, false, nil
	}
	if err != nil {
		return Status{}, false, fmt.Errorf("upload: find resumable: %w", err)
	}
	if s.expired(&u) {
		return Status{}, false, s.expire(ctx, &u)
	}
	st, err := s.status(ctx, &u)
	if errors.Is(err, errExpired) {
		return Status{}, false, nil // its multipart upload vanished; start over
	}
	if err != nil {
		return Status{}, false, err
	}
	if u.State != StateUploading {
		return st, true, nil // completed, merge pending: the client polls it
	}
	if err := s.touch(ctx, &u); err != nil {
		return Status{}, false, err
	}
	st.ExpiresAt = u.ExpiresAt
	return st, true, nil
}

// create starts a multipart upload and records it. The row is written
// after S3 answers, so a crash in between leaves an orphan multipart upload
// that cleanup aborts; a failed insert aborts it at once. The quota is
// checked before S3 is asked and again, under the user's lock, in the
// transaction that inserts the row, with the ticket's claim.
func (s *Service) create(ctx context.Context, userID string, p plan) (InitResult, error) {
	if err := s.checkOpenLimit(ctx, userID); err != nil {
		return InitResult{}, err
	}
	limit, err := s.byteQuota(ctx, userID)
	if err != nil {
		return InitResult{}, err
	}
	if err := s.checkQuota(s.db.WithContext(ctx), userID, limit, p.size); err != nil {
		return InitResult{}, err
	}
	id := models.NewID("upl")
	key := keyPrefix + id
	s3id, err := s.store.CreateMultipart(ctx, key, s3store.MultipartOptions{ContentType: p.contentType, Checksum: p.checksum})
	if err != nil {
		return InitResult{}, storageError("create multipart upload", err)
	}
	now := s.nowUTC()
	u := models.Upload{
		ID: id, UserID: userID, FileName: p.name, ContentType: p.contentType, Size: p.size,
		PartSize: p.partSize, PartCount: p.partCount, S3Key: key, S3UploadID: s3id, Kind: KindNative, State: StateUploading,
		ChecksumAlgorithm: p.checksum, CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(s.cfg.TTL),
		ClientMetadata: p.clientMeta.encode(),
	}
	if p.ticket != nil {
		u.TicketID, u.Metadata = &p.ticket.ID, p.ticket.Metadata.encode()
	}
	var rk string
	switch {
	case p.ticket != nil:
		// Bound to its ticket, not to be found by content.
		if p.sha256 != "" {
			u.SHA256 = &p.sha256
		}
	case p.sha256 != "":
		u.SHA256 = &p.sha256
		rk = resumeKey(userID, p.sha256, p.size)
	case p.firstPartCRC32C != "":
		rk = hintKey(userID, p)
	}
	if rk != "" {
		u.ResumeKey = &rk
	}
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := s.lockedQuota(tx, userID, limit, p.size); err != nil {
			return err
		}
		if p.ticket != nil {
			if err := s.claimTicket(tx, p.ticket, id, now); err != nil {
				return err
			}
		}
		return tx.Create(&u).Error
	})
	if err != nil {
		s.abortQuietly(ctx, key, s3id)
		if errkind.KindOf(err) != nil {
			return InitResult{}, err
		}
		if models.IsDuplicate(err) && rk != "" {
			// A concurrent Init of the same content won: resume that one.
			st, ok, rerr := s.resumeBy(ctx, rk)
			if rerr == nil && ok {
				return InitResult{Outcome: Resumed, Upload: st}, nil
			}
			return InitResult{}, errkind.New(errkind.Conflict, "upload_race", "another upload of this content started at the same time; retry")
		}
		return InitResult{}, fmt.Errorf("upload: insert: %w", err)
	}
	s.metrics.transition(StateUploading)
	s.log.InfoContext(ctx, "upload created", "upload_id", id, "user_id", userID, "size", p.size, "parts", p.partCount,
		"part_size", p.partSize, "checksum", p.checksum, "ticket_id", deref(u.TicketID))
	return InitResult{Outcome: Created, Upload: toStatus(&u)}, nil
}

// abortQuietly aborts a multipart upload on a detached context: the
// request may have been cancelled, but the upload must still go. A failure
// is left to the cleanup job.
func (s *Service) abortQuietly(ctx context.Context, key, s3id string) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := s.store.AbortMultipart(actx, key, s3id); err != nil {
		s.log.WarnContext(ctx, "abort multipart upload failed; cleanup will retry", "key", key, "err", err)
	}
}

// deleteQuietly deletes an object on a detached context; a failure is
// logged (nothing refers to the object, so it is only wasted space).
func (s *Service) deleteQuietly(ctx context.Context, key string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := s.store.Delete(dctx, key); err != nil {
		s.log.WarnContext(ctx, "delete object failed", "key", key, "err", err)
	}
}

// instant gives the caller a file of blob at once, carrying meta as its
// client metadata. It reports false when the blob was deleted in the
// meantime.
func (s *Service) instant(ctx context.Context, userID string, blob *models.Blob, name, contentType string, meta Metadata) (Status, bool, error) {
	now := s.nowUTC()
	u := models.Upload{
		ID: models.NewID("upl"), UserID: userID, FileName: name, ContentType: contentType, Size: blob.Size,
		SHA256: blob.SHA256, Kind: KindNative, State: StateSuccess, Instant: true, CreatedAt: now, UpdatedAt: now, ExpiresAt: now, FinishedAt: &now,
		ClientMetadata: meta.encode(),
	}
	ok := false
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Model(&models.Blob{}).Where("id = ? AND refs > 0", blob.ID).
			Updates(map[string]any{"refs": gorm.Expr("refs + 1"), "updated_at": now})
		if res.Error != nil || res.RowsAffected == 0 {
			return res.Error
		}
		f, err := s.createFile(ctx, tx, &u, blob, *blob.SHA256, true, now)
		if err != nil {
			return err
		}
		u.FileID = &f.ID
		if err := tx.Create(&u).Error; err != nil {
			return err
		}
		ok = true
		return s.emitCompleted(ctx, tx, &u, f, now)
	})
	if err != nil {
		return Status{}, false, fmt.Errorf("upload: instant: %w", err)
	}
	if ok {
		s.queue.Wake(notify.WakeDispatch)
		s.metrics.transition(StateSuccess)
		s.metrics.instant.Inc()
		s.log.InfoContext(ctx, "instant upload", "upload_id", u.ID, "user_id", userID, "file_id", *u.FileID, "blob_id", blob.ID)
	}
	st := toStatus(&u)
	st.SHA256Verified = true
	return st, ok, nil
}

// DeclareSHA256 tells ferry the SHA-256 of an upload that is under way, as
// soon as a client knows it (after Init said the content may be held, or
// from a read that also feeds the parts). It answers what
// Init would have: Instant when the caller already owns the content (the
// running upload is aborted; nothing more needs sending), ProofRequired
// when someone else does (a proof gives the file; the client then aborts
// its upload), and otherwise the upload itself (Resumed), which now carries
// the declared hash for the verification to check. Declaring the same
// hash again is harmless; another one is a conflict.
func (s *Service) DeclareSHA256(ctx context.Context, userID, id, sha string) (InitResult, error) {
	sha, err := checkSHA256(sha, "sha256")
	if err != nil {
		return InitResult{}, err
	}
	u, err := s.writable(ctx, userID, id)
	if err != nil {
		return InitResult{}, err
	}
	if unsized(u) {
		return InitResult{}, errSizeUnknown
	}
	if u.SHA256 != nil && *u.SHA256 != sha {
		return InitResult{}, errkind.New(errkind.Conflict, "sha256_mismatch", "the upload already declares another sha256")
	}
	p := plan{name: u.FileName, contentType: u.ContentType, sha256: sha, size: u.Size, clientMeta: decodeMetadata(u.ClientMetadata)}
	var blob *models.Blob
	if u.TicketID == nil { // a ticket's upload is its one upload: no instant file, no proof
		if blob, err = s.blobFor(ctx, sha, u.Size); err != nil {
			return InitResult{}, err
		}
	}
	if blob != nil && s.intact(ctx, blob) {
		owns, err := s.owns(ctx, userID, blob.ID)
		if err != nil {
			return InitResult{}, err
		}
		if !owns {
			ch, err := s.challenge(ctx, userID, blob, p.name, p.contentType, p.clientMeta)
			if err != nil {
				return InitResult{}, err
			}
			return InitResult{Outcome: ProofRequired, Challenge: ch}, nil
		}
		st, ok, err := s.instant(ctx, userID, blob, p.name, p.contentType, p.clientMeta)
		if err != nil {
			return InitResult{}, err
		}
		if ok {
			if _, err := s.Abort(ctx, userID, id); err != nil {
				s.log.WarnContext(ctx, "abort after an instant upload failed; cleanup expires it", "upload_id", id, "err", err)
			}
			return InitResult{Outcome: Instant, Upload: st}, nil
		}
	}
	if u.SHA256 == nil {
		res := s.db.WithContext(ctx).Model(&models.Upload{}).Where("id = ? AND state = ? AND sha256 IS NULL", u.ID, StateUploading).
			Updates(map[string]any{"sha256": sha, "updated_at": s.nowUTC()})
		if res.Error != nil {
			return InitResult{}, fmt.Errorf("upload: declare sha256: %w", res.Error)
		}
		if res.RowsAffected == 0 {
			return s.DeclareSHA256(ctx, userID, id, sha) // it moved meanwhile: answer for its new state
		}
		u.SHA256 = &sha
	}
	st, err := s.status(ctx, u)
	return InitResult{Outcome: Resumed, Upload: st}, err
}

// ProofDigest is the answer to one range of a challenge: the hex SHA-256
// of the challenge's nonce (decoded from hex) followed by the range's
// bytes. Without the nonce, the answer for a range that covers the whole
// file (every range of a file of at most 64 KiB) would be the file's
// SHA-256, which anyone who merely knows the hash could send; with a fresh
// nonce per challenge, no digest can be computed, or reused, without the
// bytes themselves.
func ProofDigest(nonce []byte, data []byte) string {
	h := sha256.New()
	h.Write(nonce)
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

// challenge picks random ranges of the blob and a fresh nonce for the
// caller to hash them with; meta is for the file a right answer makes.
func (s *Service) challenge(ctx context.Context, userID string, blob *models.Blob, name, contentType string, meta Metadata) (*Challenge, error) {
	ranges := make([]Range, challengeRanges)
	for i := range ranges {
		length := min(int64(challengeRangeMax), blob.Size)
		off, err := rand.Int(rand.Reader, big.NewInt(blob.Size-length+1))
		if err != nil {
			return nil, err
		}
		ranges[i] = Range{Offset: off.Int64(), Length: length}
	}
	nonce := random.Bytes(nonceBytes)
	rj, _ := json.Marshal(ranges)
	now := s.nowUTC()
	row := models.UploadChallenge{
		ID: models.NewID("chl"), UserID: userID, BlobID: blob.ID, FileName: name, ContentType: contentType,
		Ranges: string(rj), Nonce: hex.EncodeToString(nonce), CreatedAt: now, ExpiresAt: now.Add(s.cfg.ChallengeTTL),
		ClientMetadata: meta.encode(),
	}
	if err := s.db.WithContext(ctx).Create(&row).Error; err != nil {
		return nil, fmt.Errorf("upload: challenge: %w", err)
	}
	s.log.InfoContext(ctx, "proof of possession required", "challenge_id", row.ID, "user_id", userID, "blob_id", blob.ID)
	return &Challenge{ID: row.ID, Nonce: row.Nonce, Ranges: ranges, ExpiresAt: row.ExpiresAt}, nil
}

var (
	errChallengeNotFound = errkind.New(errkind.NotFound, "challenge_not_found", "no such challenge")
	errProofFailed       = errkind.New(errkind.Forbidden, "proof_failed", "the digests do not match the content; the challenge is used up")
)

// Prove answers a challenge with the ProofDigest of each of its ranges, in
// order. A right answer gives the caller a file at once; a wrong one is a
// 403. Either way the challenge is used up.
func (s *Service) Prove(ctx context.Context, userID, challengeID string, digests []string) (InitResult, error) {
	var ch models.UploadChallenge
	err := s.db.WithContext(ctx).Where("id = ? AND user_id = ?", challengeID, userID).Take(&ch).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return InitResult{}, errChallengeNotFound
	}
	if err != nil {
		return InitResult{}, fmt.Errorf("upload: load challenge: %w", err)
	}
	var ranges []Range
	if err := json.Unmarshal([]byte(ch.Ranges), &ranges); err != nil {
		return InitResult{}, fmt.Errorf("upload: challenge %s ranges: %w", ch.ID, err)
	}
	if len(digests) != len(ranges) {
		return InitResult{}, errkind.Invalidf("invalid_digests", "send %d digests, one per range", len(ranges))
	}
	for i, d := range digests {
		if digests[i], err = checkSHA256(d, "digests"); err != nil {
			return InitResult{}, err
		}
	}
	// Burn the challenge before checking the answer, so each challenge
	// gets exactly one guess however many requests race.
	res := s.db.WithContext(ctx).Where("id = ?", ch.ID).Delete(&models.UploadChallenge{})
	if res.Error != nil {
		return InitResult{}, fmt.Errorf("upload: burn challenge: %w", res.Error)
	}
	if res.RowsAffected == 0 {
		return InitResult{}, errChallengeNotFound
	}
	if !s.now().Before(ch.ExpiresAt) {
		return InitResult{}, errkind.New(errkind.Gone, "challenge_expired", "the challenge expired; start the upload again")
	}
	var blob models.Blob
	err = s.db.WithContext(ctx).Where("id = ?", ch.BlobID).Take(&blob).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return InitResult{}, errkind.New(errkind.Gone, "content_gone", "the content was deleted meanwhile; upload the file")
	}
	if err != nil {
		return InitResult{}, fmt.Errorf("upload: load blob: %w", err)
	}
	nonce, err := hex.DecodeString(ch.Nonce)
	if err != nil || len(nonce) != nonceBytes {
		// A challenge issued before proofs were nonce-bound: it cannot be
		// answered safely, so it is simply used up.
		return InitResult{}, errkind.New(errkind.Gone, "challenge_expired", "the challenge expired; start the upload again")
	}
	for i, r := range ranges {
		want, err := s.rangeDigest(ctx, blob.S3Key, nonce, r)
		if err != nil {
			return InitResult{}, err
		}
		if subtle.ConstantTimeCompare([]byte(want), []byte(digests[i])) != 1 {
			s.metrics.proofs.WithLabelValues("wrong").Inc()
			s.log.WarnContext(ctx, "proof of possession failed", "challenge_id", ch.ID, "user_id", userID)
			return InitResult{}, errProofFailed
		}
	}
	s.metrics.proofs.WithLabelValues("right").Inc()
	if !s.intact(ctx, &blob) {
		return InitResult{}, errkind.New(errkind.Gone, "content_gone", "the content is no longer available; upload the file")
	}
	// The caller holds no file of this content yet: it counts against
	// their quota from now on.
	if err := s.checkQuotaFor(ctx, userID, blob.Size); err != nil {
		return InitResult{}, err
	}
	st, ok, err := s.instant(ctx, userID, &blob, ch.FileName, ch.ContentType, decodeMetadata(ch.ClientMetadata))
	if err != nil {
		return InitResult{}, err
	}
	if !ok {
		return InitResult{}, errkind.New(errkind.Gone, "content_gone", "the content was deleted meanwhile; upload the file")
	}
	return InitResult{Outcome: Instant, Upload: st}, nil
}

// rangeDigest is the ProofDigest of one range of an object, read with a
// ranged GET.
func (s *Service) rangeDigest(ctx context.Context, key string, nonce []byte, r Range) (string, error) {
	body, err := s.store.GetRange(ctx, key, r.Offset, r.Length)
	if err != nil {
		return "", storageError("read challenge range", err)
	}
	defer body.Close()
	h := sha256.New()
	h.Write(nonce)
	n, err := io.Copy(h, body)
	if err != nil {
		return "", storageError("read challenge range", err)
	}
	if n != r.Length {
		return "", fmt.Errorf("upload: range %d+%d of %s returned %d bytes: %w", r.Offset, r.Length, key, n, s3store.ErrInvalidRange)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
