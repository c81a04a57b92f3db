package upload

import (
	"context"
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

// Status returns the caller's upload. While it is uploading, its parts are
// what S3's ListParts reports (every page), so a client that lost all its
// state learns exactly which parts to send.
func (s *Service) Status(ctx context.Context, userID, id string) (Status, error) {
	u, err := s.load(ctx, userID, id)
	if err != nil {
		return Status{}, err
	}
	return s.status(ctx, u)
}

// Find returns the caller's unfinished upload of the content with this
// SHA-256 and size: one still uploading, or completed and not yet merged.
func (s *Service) Find(ctx context.Context, userID, sha string, size int64) (Status, error) {
	sha, err := checkSHA256(sha, "sha256")
	if err != nil {
		return Status{}, err
	}
	if size <= 0 {
		return Status{}, errkind.Invalidf("invalid_size", "size must be a positive number of bytes")
	}
	var u models.Upload
	// By the resume key of an upload started with the hash, or by the hash
	// a client declared while sending.
	err = s.db.WithContext(ctx).Where("resume_key = ?", resumeKey(userID, sha, size)).
		Or("user_id = ? AND sha256 = ? AND size = ? AND state IN ?", userID, sha, size, liveStateList).
		Order("created_at DESC").Take(&u).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Status{}, errNotFound
	}
	if err != nil {
		return Status{}, fmt.Errorf("upload: find: %w", err)
	}
	if s.expired(&u) {
		// Not resumable any more: the same answer as after cleanup ran.
		if err := s.expire(ctx, &u); err != nil {
			return Status{}, err
		}
		return Status{}, errNotFound
	}
	st, err := s.status(ctx, &u)
	if errors.Is(err, errExpired) {
		return Status{}, errNotFound
	}
	return st, err
}

func (s *Service) status(ctx context.Context, u *models.Upload) (Status, error) {
	if s.expired(u) {
		return Status{}, errExpired
	}
	if posted(u) && u.State == StateUploading {
		found, err := s.adoptPosted(ctx, u)
		if err != nil {
			return Status{}, err
		}
		if found {
			if u, err = s.load(ctx, u.UserID, u.ID); err != nil {
				return Status{}, err
			}
		}
	}
	st := toStatus(u)
	if u.State == StateSuccess && u.FileID != nil {
		// The hash and the flag come from the file, read together: the
		// upload row was read before, and a verification committing in
		// between must not pair "verified" with the claim it replaced.
		var f models.File
		err := s.db.WithContext(ctx).Select("sha256", "sha256_verified").Where("id = ?", *u.FileID).Take(&f).Error
		switch {
		case errors.Is(err, gorm.ErrRecordNotFound):
		case err != nil:
			return Status{}, fmt.Errorf("upload: file of %s: %w", u.ID, err)
		case f.SHA256Verified:
			st.SHA256, st.SHA256Verified = f.SHA256, true
		}
	}
	rows, err := s.partRows(ctx, u.ID)
	if err != nil {
		return Status{}, err
	}
	if posted(u) {
		st.Parts = rows
		return st, nil
	}
	if u.State != StateUploading && u.State != StatePending {
		st.Parts = rows
		return st, nil
	}
	reported := make(map[int]string, len(rows))
	for _, r := range rows {
		reported[r.Number] = r.ETag
	}
	listed, err := s.store.ListPartsPreferring(ctx, u.S3Key, u.S3UploadID, preferring(u, reported))
	if errors.Is(err, s3store.ErrNoSuchUpload) {
		if u.State == StatePending {
			// The merge completed it a moment ago; the reports are what
			// is left to show.
			st.Parts = rows
			return st, nil
		}
		// S3 dropped it (a lifecycle rule, an operator): nothing can
		// resume it, so say so the way cleanup would.
		if err := s.expire(ctx, u); err != nil {
			return Status{}, err
		}
		return Status{}, errExpired
	}
	if err != nil {
		return Status{}, storageError("list parts", err)
	}
	st.Parts = s3Parts(listed, s.partLimit(u))
	return st, nil
}

// s3Parts keeps the parts that belong to the file: numbers beyond
// partCount are strays that never reach it.
func s3Parts(listed []s3store.Part, partCount int) []Part {
	out := make([]Part, 0, len(listed))
	for _, p := range listed {
		if n := int(p.Number); n >= 1 && n <= partCount {
			out = append(out, Part{Number: n, Size: p.Size, ETag: p.ETag, CRC32C: p.CRC32C})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Number < out[j].Number })
	return out
}

func (s *Service) partRows(ctx context.Context, id string) ([]Part, error) {
	var rows []models.UploadPart
	if err := s.db.WithContext(ctx).Where("upload_id = ?", id).Order("part_number").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("upload: parts of %s: %w", id, err)
	}
	out := make([]Part, len(rows))
	for i, r := range rows {
		out[i] = Part{Number: r.PartNumber, Size: r.Size, ETag: r.ETag}
	}
	return out, nil
}

// touch pushes an uploading upload's expiry a TTL from now: activity keeps
// it alive. It fails with a conflict when the upload left uploading.
func (s *Service) touch(ctx context.Context, u *models.Upload) error {
	now := s.nowUTC()
	// A client presigning batch after batch would write the row on every
	// call; an expiry already within a minute (or 1% of the TTL) of the
	// one this would set is as good, and costs no write.
	slack := min(s.cfg.TTL/100, time.Minute)
	if u.State == StateUploading && !u.ExpiresAt.Before(now.Add(s.cfg.TTL-slack)) {
		return nil
	}
	res := s.db.WithContext(ctx).Model(&models.Upload{}).Where("id = ? AND state = ?", u.ID, StateUploading).
		Updates(map[string]any{"expires_at": now.Add(s.cfg.TTL), "updated_at": now})
	if res.Error != nil {
		return fmt.Errorf("upload: touch: %w", res.Error)
	}
	if res.RowsAffected == 0 {
		return errkind.New(errkind.Conflict, "upload_not_uploading", "the upload is no longer uploading")
	}
	u.ExpiresAt = now.Add(s.cfg.TTL)
	return nil
}

// expire marks an uploading upload expired and aborts it in S3. It is a
// no-op for an upload that already left uploading.
func (s *Service) expire(ctx context.Context, u *models.Upload) error {
	now := s.nowUTC()
	res := s.db.WithContext(ctx).Model(&models.Upload{}).Where("id = ? AND state = ?", u.ID, StateUploading).
		Updates(map[string]any{"state": StateExpired, "resume_key": nil, "updated_at": now, "finished_at": now})
	if res.Error != nil {
		return fmt.Errorf("upload: expire: %w", res.Error)
	}
	if res.RowsAffected == 1 {
		s.metrics.transition(StateExpired)
		s.log.InfoContext(ctx, "upload expired", "upload_id", u.ID)
		if !posted(u) {
			s.abortQuietly(ctx, u.S3Key, u.S3UploadID)
		}
	}
	return nil
}

// errSizeUnknown refuses native calls that need the layout of an upload
// started through the S3-compatible routes, whose size is only known once
// it is completed there.
var errSizeUnknown = errkind.New(errkind.Conflict, "upload_size_unknown",
	"the upload was started without a size; send and complete its parts through the S3-compatible routes")

func notUploading(state string) error {
	return errkind.New(errkind.Conflict, "upload_not_uploading", "the upload is %s; parts can only be sent while it is uploading", state).With("state", state)
}

// loadCurrent loads the caller's upload and answers errExpired for one
// past its TTL.
func (s *Service) loadCurrent(ctx context.Context, userID, id string) (*models.Upload, error) {
	u, err := s.load(ctx, userID, id)
	if err != nil {
		return nil, err
	}
	if s.expired(u) {
		return nil, errExpired
	}
	return u, nil
}

// writable loads the caller's upload and checks it still takes parts.
func (s *Service) writable(ctx context.Context, userID, id string) (*models.Upload, error) {
	u, err := s.loadCurrent(ctx, userID, id)
	if err != nil {
		return nil, err
	}
	if u.State != StateUploading {
		return nil, notUploading(u.State)
	}
	return u, nil
}

// Presign signs PUT URLs for up to MaxBatch parts. Each URL pins its
// part's size (so a URL stores its part and nothing more), its base64 MD5
// when given, and its CRC32C, which an upload with checksum CRC32C needs
// for every part: S3 then refuses a body that does not match. Signing
// again, for instance after a URL expired, is always fine. Nothing here
// calls S3: presigning is local signing.
func (s *Service) Presign(ctx context.Context, userID, id string, r PresignRequest) (map[int]PresignedPart, error) {
	u, err := s.loadCurrent(ctx, userID, id)
	if err != nil {
		return nil, err
	}
	if unsized(u) && u.State == StateUploading {
		return nil, errSizeUnknown
	}
	return s.presign(ctx, u, r)
}

func (s *Service) presign(ctx context.Context, u *models.Upload, r PresignRequest) (map[int]PresignedPart, error) {
	if u.State != StateUploading {
		return nil, notUploading(u.State)
	}
	if posted(u) {
		return nil, errSizeUnknown
	}
	if err := checkPartNumbers(r.Parts, s.partLimit(u), r.ContentMD5); err != nil {
		return nil, err
	}
	if err := checkPartChecksums(u, r); err != nil {
		return nil, err
	}
	if err := s.touch(ctx, u); err != nil {
		return nil, err
	}
	parts := r.Parts
	specs := make([]s3store.PartSpec, len(parts))
	for i, n := range parts {
		specs[i] = s3store.PartSpec{Number: int32(n), ContentMD5: r.ContentMD5[n], CRC32C: r.CRC32C[n]}
		if !unsized(u) {
			// A sized upload knows every part's length: signing it keeps a
			// part URL from storing more than its part.
			specs[i].Size = expectedPartSize(u, n)
		}
	}
	reqs, err := s.store.PresignParts(ctx, u.S3Key, u.S3UploadID, specs, s.cfg.PresignTTL)
	if err != nil {
		return nil, storageError("presign parts", err)
	}
	out := make(map[int]PresignedPart, len(parts))
	for i, req := range reqs {
		out[parts[i]] = PresignedPart{URL: req.URL, Method: req.Method, Headers: req.Headers, ExpiresAt: models.Time(req.ExpiresAt)}
	}
	s.metrics.presigned.Add(float64(len(parts)))
	return out, nil
}

// ReportPart records that part n was uploaded with etag and size. It is an
// upsert under the (upload_id, part_number) unique index: reporting a part
// again, even concurrently, leaves one row holding the latest report.
func (s *Service) ReportPart(ctx context.Context, userID, id string, n int, etag string, size int64) (Part, error) {
	u, err := s.writable(ctx, userID, id)
	if err != nil {
		return Part{}, err
	}
	if unsized(u) {
		return Part{}, errSizeUnknown
	}
	if n < 1 || n > u.PartCount {
		return Part{}, errkind.Invalidf("invalid_part_number", "part number %d is outside 1-%d", n, u.PartCount)
	}
	if err := checkETag(etag); err != nil {
		return Part{}, err
	}
	if want := expectedPartSize(u, n); size != want {
		return Part{}, errkind.Invalidf("invalid_part_size", "part %d must be %d bytes, not %d", n, want, size)
	}
	if err := s.touch(ctx, u); err != nil {
		return Part{}, err
	}
	now := s.nowUTC()
	upsert := "ON CONFLICT (upload_id, part_number) DO UPDATE SET etag = excluded.etag, size = excluded.size, updated_at = excluded.updated_at"
	if models.Dialect(s.db) == models.MySQL {
		upsert = "ON DUPLICATE KEY UPDATE etag = VALUES(etag), size = VALUES(size), updated_at = VALUES(updated_at)"
	}
	err = s.db.WithContext(ctx).Exec(`INSERT INTO upload_parts (upload_id, part_number, etag, size, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?) `+upsert, u.ID, n, etag, size, now, now).Error
	if err != nil {
		return Part{}, fmt.Errorf("upload: report part: %w", err)
	}
	return Part{Number: n, Size: size, ETag: etag}, nil
}

// Complete checks with S3 that every part is there with the right size,
// then moves the upload to pending and enqueues its merge, and returns at
// once: the merge runs in the background. Missing or wrongly sized parts
// are a 409 listing missing_parts and bad_parts. r.Parts, when given, are
// the ETags the client saw; the merge fails if S3's differ. r.CRC32C, the
// whole file's checksum, is required for an upload with checksum CRC32C:
// S3 checks it when the merge completes the upload. Calling Complete
// again answers the upload's current state.
func (s *Service) Complete(ctx context.Context, userID, id string, r CompleteRequest) (Status, error) {
	u, err := s.loadCurrent(ctx, userID, id)
	if err != nil {
		return Status{}, err
	}
	if done, err := completed(u); done || err != nil {
		return toStatus(u), err
	}
	if unsized(u) {
		return Status{}, errSizeUnknown
	}
	etags, err := checkClientParts(r.Parts, u.PartCount)
	if err != nil {
		return Status{}, err
	}
	sha, err := checkCompleteDigests(u, r)
	if err != nil {
		return Status{}, err
	}
	listed, err := s.store.ListPartsPreferring(ctx, u.S3Key, u.S3UploadID, preferring(u, etags))
	if errors.Is(err, s3store.ErrNoSuchUpload) {
		if err := s.expire(ctx, u); err != nil {
			return Status{}, err
		}
		return Status{}, errExpired
	}
	if err != nil {
		return Status{}, storageError("list parts", err)
	}
	if err := checkLayout(u, listed); err != nil {
		return Status{}, err
	}

	now := s.nowUTC()
	upd := map[string]any{"state": StatePending, "updated_at": now}
	if len(etags) > 0 {
		b, _ := json.Marshal(etags)
		upd["client_etags"] = string(b)
	}
	if sha != "" {
		upd["sha256"] = sha
	}
	if r.CRC32C != "" {
		upd["full_checksum"] = r.CRC32C
	}
	moved := false
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Model(&models.Upload{}).Where("id = ? AND state = ?", u.ID, StateUploading).Updates(upd)
		if res.Error != nil || res.RowsAffected == 0 {
			return res.Error // someone else moved it: answer its state below
		}
		moved = true
		inserted, err := s.queue.Enqueue(ctx, tx, jobs.Spec{Kind: KindMerge, Key: u.ID})
		if err == nil && !inserted {
			// The upload was merged once already and the store lost it
			// (restarted): its merge runs again.
			_, err = s.queue.Again(ctx, tx, KindMerge, u.ID)
		}
		return err
	})
	if err != nil {
		return Status{}, fmt.Errorf("upload: complete: %w", err)
	}
	if !moved {
		return s.Complete(ctx, userID, id, r)
	}
	s.queue.Wake(KindMerge)
	s.metrics.transition(StatePending)
	s.log.InfoContext(ctx, "upload complete accepted", "upload_id", u.ID, "parts", u.PartCount)
	u.State = StatePending
	return toStatus(u), nil
}

// checkPartChecksums checks the CRC32Cs of a presign batch: every part of
// an upload with checksum CRC32C needs one, and an upload without may not
// be given any (S3 would refuse the part).
func checkPartChecksums(u *models.Upload, r PresignRequest) error {
	want := map[int]bool{}
	for _, n := range r.Parts {
		want[n] = true
	}
	for n, v := range r.CRC32C {
		if !want[n] {
			return errkind.Invalidf("invalid_checksum_crc32c", "checksum_crc32c names part %d, which part_numbers does not list", n)
		}
		if err := checkCRC32C(v, "checksum_crc32c"); err != nil {
			return err
		}
	}
	switch {
	case u.ChecksumAlgorithm == s3store.ChecksumCRC32C:
		for _, n := range r.Parts {
			if r.CRC32C[n] == "" {
				return errkind.Invalidf("missing_checksum", "the upload checks a CRC32C per part: give checksum_crc32c for part %d", n)
			}
		}
	case len(r.CRC32C) > 0:
		return errkind.Invalidf("invalid_checksum_crc32c", "the upload was started without checksum_algorithm CRC32C; pin parts with content_md5")
	}
	return nil
}

// checkCompleteDigests validates what a client declares at complete: the
// whole file's CRC32C (required for an upload with checksum CRC32C) and
// its SHA-256, which a client hashing while it sends only knows now. A
// SHA-256 declared earlier may not change.
func checkCompleteDigests(u *models.Upload, r CompleteRequest) (sha string, err error) {
	switch {
	case u.ChecksumAlgorithm == s3store.ChecksumCRC32C && r.CRC32C == "":
		return "", errkind.Invalidf("missing_checksum", "the upload checks the whole file's CRC32C: give checksum_crc32c")
	case u.ChecksumAlgorithm != s3store.ChecksumCRC32C && r.CRC32C != "":
		return "", errkind.Invalidf("invalid_checksum_crc32c", "the upload was started without checksum_algorithm CRC32C")
	case r.CRC32C != "":
		if err := checkCRC32C(r.CRC32C, "checksum_crc32c"); err != nil {
			return "", err
		}
	}
	if r.SHA256 == "" {
		return "", nil
	}
	if sha, err = checkSHA256(r.SHA256, "sha256"); err != nil {
		return "", err
	}
	if u.SHA256 != nil && *u.SHA256 != sha {
		return "", errkind.New(errkind.Conflict, "sha256_mismatch", "the upload already declares another sha256")
	}
	return sha, nil
}

// completed reports whether u is past complete already (a repeated call
// answers its state), or refuses it when it was aborted.
func completed(u *models.Upload) (bool, error) {
	switch u.State {
	case StateUploading:
		return false, nil
	case StateAborted:
		return false, errkind.New(errkind.Conflict, "upload_aborted", "the upload was aborted")
	}
	return true, nil
}

// checkClientParts validates the ETags a client sent with complete and
// returns them by part number, normalised.
func checkClientParts(parts []ClientPart, partCount int) (map[int]string, error) {
	out := make(map[int]string, len(parts))
	for _, p := range parts {
		if p.Number < 1 || p.Number > partCount {
			return nil, errkind.Invalidf("invalid_parts", "part number %d is outside 1-%d", p.Number, partCount)
		}
		if _, dup := out[p.Number]; dup {
			return nil, errkind.Invalidf("invalid_parts", "part %d is listed twice", p.Number)
		}
		if err := checkETag(p.ETag); err != nil {
			return nil, errkind.Invalidf("invalid_parts", "part %d: etag must be 1-128 printable characters", p.Number)
		}
		out[p.Number] = normalizeETag(p.ETag)
	}
	return out, nil
}

// checkLayout checks that S3 holds parts 1..PartCount, every one but the
// last exactly PartSize and the last the remainder. Parts beyond PartCount
// are ignored: they never reach the file.
func checkLayout(u *models.Upload, listed []s3store.Part) error {
	have := make(map[int]int64, len(listed))
	for _, p := range listed {
		have[int(p.Number)] = p.Size
	}
	missing, bad := []int{}, []int{}
	for n := 1; n <= u.PartCount; n++ {
		size, ok := have[n]
		switch {
		case !ok:
			missing = append(missing, n)
		case size != expectedPartSize(u, n):
			bad = append(bad, n)
		}
	}
	if len(missing) == 0 && len(bad) == 0 {
		return nil
	}
	return errkind.New(errkind.Conflict, "parts_incomplete", "%d parts missing and %d of the wrong size; upload them and complete again", len(missing), len(bad)).
		With("missing_parts", missing).With("bad_parts", bad)
}

// Abort deletes an unfinished upload: the row becomes aborted, then the
// multipart upload is aborted in S3 (cleanup retries if that fails).
// Aborting an aborted upload is fine; a merging or finished one is a
// conflict.
func (s *Service) Abort(ctx context.Context, userID, id string) (Status, error) {
	u, err := s.loadCurrent(ctx, userID, id)
	if err != nil {
		return Status{}, err
	}
	switch u.State {
	case StateAborted:
		return toStatus(u), nil
	case StateUploading:
	default:
		return Status{}, errkind.New(errkind.Conflict, "upload_finished", "the upload is %s and can no longer be aborted", u.State).With("state", u.State)
	}
	now := s.nowUTC()
	res := s.db.WithContext(ctx).Model(&models.Upload{}).Where("id = ? AND state = ?", u.ID, StateUploading).
		Updates(map[string]any{"state": StateAborted, "resume_key": nil, "updated_at": now, "finished_at": now})
	if res.Error != nil {
		return Status{}, fmt.Errorf("upload: abort: %w", res.Error)
	}
	if res.RowsAffected == 0 {
		return s.Abort(ctx, userID, id) // it moved meanwhile: answer for its new state
	}
	s.metrics.transition(StateAborted)
	if posted(u) {
		s.deleteQuietly(ctx, u.S3Key) // a POST may have landed
	} else {
		s.abortQuietly(ctx, u.S3Key, u.S3UploadID)
	}
	s.log.InfoContext(ctx, "upload aborted", "upload_id", u.ID)
	u.State = StateAborted
	return toStatus(u), nil
}
