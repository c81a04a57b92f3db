package upload_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/s3store"
	"github.com/ferry-io/ferry/upload"
)

// A user erased while S3 completes one of their uploads: the erasure's
// purge job can run before the merged object exists, and here it has run
// (and found nothing) by the time CompleteMultipartUpload returns. The
// merge, finding the upload gone when it records the file, deletes the
// object itself and ends its job, instead of leaving the object for the
// cleanup job's sweep of unknown objects.
func TestEraseDuringMergeLeavesNoObject(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		ctx := context.Background()
		var e *env
		erased := make(chan error, 1)
		e = newEnv(t, db, func(c *testConfig) {
			c.Checksums = true
			c.Hooks.AfterComplete = func(id string) {
				key := e.upload(id).S3Key
				erased <- e.db.Transaction(func(tx *gorm.DB) error {
					if _, err := upload.EraseUser(ctx, tx, e.queue, time.Now(), "usr_a"); err != nil {
						return err
					}
					// The purge it queued ran while S3 was still merging.
					return tx.Table("jobs").Where("kind = ? AND business_key = ?", upload.KindPurge, key).
						Updates(map[string]any{"state": jobs.StateDone}).Error
				})
			}
		})
		c := newClient(t, e, "usr_a")
		data := randomBytes(2*5*mib + 5)
		st := c.initChecked("e.bin", data, 5*mib)
		key := e.upload(st.UploadID).S3Key
		c.sendChecked(st, data, allParts(st))
		if _, err := e.svc.Complete(ctx, "usr_a", st.UploadID, upload.CompleteRequest{CRC32C: s3store.CRC32C(data)}); err != nil {
			t.Fatal(err)
		}
		e.run(t, 5*time.Second)
		select {
		case err := <-erased:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the merge never completed the multipart upload")
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			j, err := e.queue.Get(ctx, upload.KindMerge, st.UploadID)
			if err != nil {
				t.Fatal(err)
			}
			if j.State == jobs.StateDone {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("merge job still %s", j.State)
			}
			time.Sleep(30 * time.Millisecond)
		}
		if _, err := e.store.Head(ctx, key); !errors.Is(err, s3store.ErrNotFound) {
			t.Fatalf("the merged object of an erased upload is still in the bucket (err %v)", err)
		}
		if n := e.count("files", "user_id = ?", "usr_a") + e.count("blobs", "s3_key = ?", key) + e.count("uploads", "user_id = ?", "usr_a"); n != 0 {
			t.Fatalf("%d rows of the erased user's upload remain", n)
		}
	})
}
