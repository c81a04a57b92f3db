package upload

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/notify"
	"github.com/ferry-io/ferry/s3store"
)

// Verification reads the object in chunks of verifyChunk into one buffer
// and hashes each chunk before it reads the next, so memory stays at one
// chunk whatever the file's size.
//
// The read and the hash take turns on purpose. Overlapping them (one
// goroutine receiving into spare buffers while another hashed) made a
// receiver that was always waiting, which takes the bytes in many small
// reads: in the bench (1 GiB, 2 cores) the job spent 1.31–1.51 CPU s per
// GiB, 0.56–0.59 of it in the kernel, against 1.14–1.23 and 0.30 now that
// S3's bytes queue in the socket while a chunk is hashed; it took as long
// either way (1.13–1.34 s against 1.16–1.27). SHA-256 itself is about
// 0.65 s per GiB of it.
//
// The chunk is 4 MiB. Reading 1 GiB from a standalone VersityGW on a
// 2-core AMD EPYC VM, this loop (SHA-256 and CRC32C, three reads each,
// sizes interleaved) spent 1.00–1.02 CPU s per GiB with 1 MiB chunks,
// 0.87–0.89 with 2 MiB, 0.92 with 3 MiB, 0.82–0.86 with 4 MiB, 0.96–1.03
// with 6 MiB and about 1.0 with 8 and 16 MiB; the kernel's share fell from
// 0.22–0.23 s to 0.13–0.16 (fewer, fuller reads of the socket) and the
// user time from 0.77–0.81 to 0.68–0.69. On a 2-core Intel Xeon VM
// (SHA-256 alone, at least six reads of each size) 1 MiB cost 0.90–0.97,
// 2 to 4 MiB 0.78–0.89, 5 and 6 MiB 0.79–0.99, 8 MiB 0.94–1.07 and 16 MiB
// 1.52–1.59.
//
// Waking the job less often saves nothing more. With SHA-256 alone, a GET
// on a connection of the job's own with SO_RCVLOWAT at 256 KiB, 1 MiB or
// 4 MiB (260 to 1,200 socket reads per GiB, against about 2,000 without)
// cost 0.77–0.87 CPU s per GiB, and the SDK's pooled GET 0.77–0.78, in
// the same run. So the job keeps the SDK's GET.
//
// Nor do huge pages help. The SDK's GET into SHA-256 in 4 MiB reads, on
// a 2-core AMD EPYC Turin VM, cost a median 0.850 CPU s per GiB
// (0.770–0.927, 18 reads) into a 2 MiB-aligned buffer that
// madvise(MADV_HUGEPAGE) had backed with transparent huge pages, against
// 0.861 (0.803–0.924) into a buffer from Go's heap, the two interleaved:
// neither the copy off the socket nor SHA-256 waits on the TLB. So the
// buffer stays an ordinary slice.
//
// Nor can the job take the bytes without the kernel's copy. On Linux 6.18,
// TCP_ZEROCOPY_RECEIVE over loopback mapped none of a 1 GiB stream,
// whether the sender used sendfile, as a store serving a file does (the
// kernel maps no page that belongs to a file), or write(2) (its buffers
// are compound pages, which it does not map either): every call only
// said how much to copy, and the loop cost 0.91–1.49 CPU s per GiB
// against 0.72 with read(2) in the same runs.
const verifyChunk = 4 << 20

// chunk returns a verify buffer, an idle one if there is one. Reusing it
// keeps a 4 MiB allocation per file, with the collection and the return of
// its pages to the OS that follow it, out of the next upload's path. In 18
// uploads of 1 GiB with each build, alternating, on a 2-core AMD EPYC VM,
// `ferry serve` spent a median 50 ms of CPU from the client's start to its
// success with reuse, against 60 without; the verify job took as long.
func (s *Service) chunk() []byte {
	select {
	case b := <-s.chunks:
		return b
	default:
		return make([]byte, verifyChunk)
	}
}

// releaseChunk keeps b for the next verification, unless as many are idle
// as verify workers can use at once.
func (s *Service) releaseChunk(b []byte) {
	select {
	case s.chunks <- b:
	default:
	}
}

// castagnoli is CRC32C's table, for blob heads (HeadLength) and whole
// objects.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// hashed is content the verify job read back and hashed: the object at
// key, as S3 tagged it (etag) when it was read.
type hashed struct {
	key, etag, sum string
	head           string // base64 CRC32C of the first min(size, HeadLength) bytes
	crc            string // base64 CRC32C of the whole object
}

// verify is the verify job's handler: it streams a merged file's object
// through SHA-256 and, in one transaction with the job's completion,
// records the true hash on the file (correcting a client's wrong claim,
// never trusting it), puts the content in the dedup index (or, when ferry
// already holds it, moves the file onto the existing blob and drops the
// second copy), and writes upload.completed with verified facts only.
func (s *Service) verify(ctx context.Context, j *jobs.Job) error {
	start := time.Now()
	var u models.Upload
	err := s.db.WithContext(ctx).Where("id = ?", j.Key).Take(&u).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if u.State != StateSuccess || u.FileID == nil {
		return nil
	}
	var f models.File
	err = s.db.WithContext(ctx).Where("id = ?", *u.FileID).Take(&f).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		s.log.InfoContext(ctx, "file deleted before it was verified", "upload_id", u.ID, "file_id", *u.FileID)
		return nil
	}
	if err != nil {
		return err
	}
	if f.SHA256Verified {
		return nil
	}
	var b models.Blob
	if err := s.db.WithContext(ctx).Where("id = ?", f.BlobID).Take(&b).Error; err != nil {
		return err
	}
	checked := ""
	if b.CRC32C != nil {
		checked = *b.CRC32C // S3's, from the merge
	}
	h, n, err := s.verifyObject(ctx, b.S3Key, u.ID, checked)
	if errors.Is(err, s3store.ErrNotFound) {
		return s.quarantine(ctx, j, &u, &f, &b, "the file's object vanished before it was verified")
	}
	if err != nil {
		return err
	}
	if n != b.Size || (b.S3ETag != "" && normalizeETag(h.etag) != normalizeETag(b.S3ETag)) {
		// Nothing ferry hands out can write a merged object: this is a bug
		// or a write to the bucket from outside, never to be passed on.
		s.metrics.blobMismatch.Inc()
		return s.quarantine(ctx, j, &u, &f, &b, fmt.Sprintf("the stored object changed after it was merged (%d bytes, ETag %s; merged %d bytes, ETag %s)", n, h.etag, b.Size, b.S3ETag))
	}
	existing, err := s.blobFor(ctx, h.sum, b.Size)
	if err != nil {
		return err
	}
	var share *models.Blob // a verified blob to move the file onto
	if existing != nil && s.intact(ctx, existing) {
		share = existing
	}
	now := s.nowUTC()
	moved := false
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		moved = false
		if share != nil {
			res := tx.Model(&models.Blob{}).Where("id = ? AND refs > 0", share.ID).
				Updates(map[string]any{"refs": gorm.Expr("refs + 1"), "updated_at": now})
			if res.Error != nil {
				return res.Error
			}
			moved = res.RowsAffected == 1 // 0: its last file is being deleted; keep ours
			if moved && (share.HeadCRC32C == nil || share.CRC32C == nil) {
				// Verified before blobs kept their head and CRC32C: it
				// has them now.
				err := tx.Model(&models.Blob{}).Where("id = ?", share.ID).
					Updates(map[string]any{"head_crc32c": h.head, "crc32c": h.crc}).Error
				if err != nil {
					return err
				}
			}
		}
		target := b.ID
		if moved {
			target = share.ID
			if err := tx.Where("id = ?", b.ID).Delete(&models.Blob{}).Error; err != nil {
				return err
			}
			if err := s.enqueuePurge(ctx, tx, b.S3Key, ""); err != nil {
				return err
			}
		} else {
			if existing != nil {
				// The content's blob is not what ferry verified: its files
				// move onto this verified copy, and its object goes.
				res := tx.Model(&models.File{}).Where("blob_id = ?", existing.ID).Update("blob_id", b.ID)
				if res.Error != nil {
					return res.Error
				}
				if err := tx.Where("id = ?", existing.ID).Delete(&models.Blob{}).Error; err != nil {
					return err
				}
				if err := s.enqueuePurge(ctx, tx, existing.S3Key, ""); err != nil {
					return err
				}
				b.Refs += int(res.RowsAffected)
				s.log.ErrorContext(ctx, "blob object changed after verification; its files now share a new verified copy",
					"blob_id", existing.ID, "old_key", existing.S3Key, "new_key", b.S3Key, "files", res.RowsAffected)
			}
			// A racing verification of the same content makes this fail
			// on the unique sha256; the retry then shares its blob.
			res := tx.Model(&models.Blob{}).Where("id = ? AND sha256 IS NULL", b.ID).
				Updates(map[string]any{"sha256": h.sum, "s3_etag": h.etag, "head_crc32c": h.head, "crc32c": h.crc, "refs": b.Refs, "updated_at": now})
			if res.Error != nil {
				return res.Error
			}
		}
		res := tx.Model(&models.File{}).Where("id = ?", f.ID).
			Updates(map[string]any{"blob_id": target, "sha256": h.sum, "sha256_verified": true})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return fmt.Errorf("upload: file %s was deleted during its verification", f.ID)
		}
		if err := tx.Model(&models.Upload{}).Where("id = ?", u.ID).Update("sha256", h.sum).Error; err != nil {
			return err
		}
		f.SHA256, f.SHA256Verified = h.sum, true
		if err := s.emitCompleted(ctx, tx, &u, &f, now); err != nil {
			return err
		}
		return j.Finish(ctx, tx)
	})
	if err != nil {
		return err
	}
	s.queue.Wake(KindPurge)
	s.queue.Wake(notify.WakeDispatch)
	if u.SHA256 != nil && *u.SHA256 != h.sum {
		s.metrics.claimsCorrected.Inc()
		s.log.WarnContext(ctx, "the client's sha256 was wrong; the file records the one ferry computed",
			"upload_id", u.ID, "file_id", f.ID, "claimed", *u.SHA256, "sha256", h.sum)
	}
	s.metrics.verifyDuration.Observe(time.Since(start).Seconds())
	s.log.InfoContext(ctx, "upload verified", "upload_id", u.ID, "file_id", f.ID, "sha256", h.sum, "deduplicated", moved, "elapsed", time.Since(start))
	return nil
}

// quarantine ends a merged file whose object cannot be verified: the file
// and its blob go (the owner is the only one who could have seen it), the
// upload is failed with the reason and upload.failed is written, with the
// job's completion.
func (s *Service) quarantine(ctx context.Context, j *jobs.Job, u *models.Upload, f *models.File, b *models.Blob, reason string) error {
	now := s.nowUTC()
	s.log.ErrorContext(ctx, "merged file failed verification", "upload_id", u.ID, "file_id", f.ID, "reason", reason)
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Where("id = ?", f.ID).Delete(&models.File{}).Error; err != nil {
			return err
		}
		if err := tx.Where("id = ? AND sha256 IS NULL", b.ID).Delete(&models.Blob{}).Error; err != nil {
			return err
		}
		res := tx.Model(&models.Upload{}).Where("id = ? AND state = ?", u.ID, StateSuccess).
			Updates(map[string]any{"state": StateFailed, "error": reason, "file_id": nil, "updated_at": now})
		if res.Error != nil {
			return res.Error
		}
		if err := s.emitFailed(ctx, tx, u, reason, now); err != nil {
			return err
		}
		if err := s.enqueuePurge(ctx, tx, b.S3Key, ""); err != nil {
			return err
		}
		return j.Finish(ctx, tx)
	})
	if err == nil {
		s.queue.Wake(KindPurge)
		s.queue.Wake(notify.WakeDispatch)
		s.metrics.transition(StateFailed)
	}
	return err
}

// verifyObject streams the object through SHA-256 and returns what it
// hashed (the digest and the ETag of the version read) and the byte count.
// Memory is one chunk, whatever the size. The jobs runner
// heartbeats the lease meanwhile; if the lease is lost ctx ends and so does
// the read.
//
// checked is the whole object's CRC32C when S3 checked the object against
// it at completion. It is taken as the object's rather than computed again:
// in the bench (1 GiB, 2-core AMD EPYC, SHA-256 alone 0.63 s) the job went
// from a median of 0.92 CPU s per GiB to 0.83 and 0.86 in two five-run
// benches. It names the same bytes: the caller refuses a version whose
// ETag is not the merged one.
func (s *Service) verifyObject(ctx context.Context, key, uploadID, checked string) (hashed, int64, error) {
	start := time.Now()
	body, info, err := s.store.GetVersion(ctx, key)
	if err != nil {
		return hashed{}, 0, err
	}
	defer body.Close()

	buf := s.chunk()
	defer s.releaseChunk(buf)
	h := sha256.New()
	head := crc32.New(castagnoli)
	// Downloads send the whole object's CRC32C as Repr-Digest.
	var crc hash.Hash32
	if checked == "" {
		crc = crc32.New(castagnoli)
	}
	var n int64
	var rerr error
	for {
		k, err := io.ReadFull(body, buf)
		if k > 0 {
			h.Write(buf[:k])
			if crc != nil {
				crc.Write(buf[:k])
			}
			if n < HeadLength {
				head.Write(buf[:min(int64(k), HeadLength-n)])
			}
			n += int64(k)
			if p := s.hooks.VerifyProgress; p != nil {
				p(uploadID, n)
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			rerr = err
			break
		}
	}
	s.metrics.verifyBytes.Add(float64(n))
	if rerr != nil {
		return hashed{}, n, fmt.Errorf("upload: verify %s after %d bytes: %w", key, n, rerr)
	}
	if secs := time.Since(start).Seconds(); secs > 0 && n > 0 {
		s.metrics.verifyThroughput.Observe(float64(n) / secs)
	}
	if crc != nil {
		checked = base64.StdEncoding.EncodeToString(crc.Sum(nil))
	}
	return hashed{key: key, etag: info.ETag, sum: hex.EncodeToString(h.Sum(nil)),
		head: base64.StdEncoding.EncodeToString(head.Sum(nil)), crc: checked}, n, nil
}

// intact reports whether a blob's object is still the one ferry verified:
// there, of the blob's size, with the ETag S3 gave it then. Blobs verified
// before ETags were recorded are checked by size alone. A storage error
// counts as intact: it says nothing about the bytes, and deduplication
// against the blob fails later anyway if the object is unreachable.
func (s *Service) intact(ctx context.Context, b *models.Blob) bool {
	info, err := s.store.Head(ctx, b.S3Key)
	if err != nil && !errors.Is(err, s3store.ErrNotFound) {
		return true
	}
	ok := err == nil && info.Size == b.Size && (b.S3ETag == "" || normalizeETag(info.ETag) == normalizeETag(b.S3ETag))
	if !ok {
		s.metrics.blobMismatch.Inc()
		s.log.ErrorContext(ctx, "blob object is not the one ferry verified; it is neither served for deduplication nor shared",
			"blob_id", b.ID, "key", b.S3Key, "recorded_etag", b.S3ETag, "etag", info.ETag, "err", err)
	}
	return ok
}
