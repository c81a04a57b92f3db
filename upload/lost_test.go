package upload_test

import (
	"context"
	"testing"
	"time"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/notify"
	"github.com/ferry-io/ferry/s3store"
	"github.com/ferry-io/ferry/upload"
)

// When the store loses a multipart upload after complete (VersityGW killed
// inside CompleteMultipartUpload loses it) and holds no object, the upload
// does not fail: it goes back to uploading on a new multipart upload, the
// client's next look lists no parts, and sending them all again and
// completing again ends in one file and one event.
func TestLostMultipartUploadRestarts(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, withChecksums)
		ctx := context.Background()
		c := newClient(t, e, "usr_a")
		data := randomBytes(2*5*mib + 5)
		st := c.initChecked("l.bin", data, 5*mib)
		c.sendChecked(st, data, allParts(st))
		if _, err := e.svc.Complete(ctx, "usr_a", st.UploadID, upload.CompleteRequest{CRC32C: s3store.CRC32C(data)}); err != nil {
			t.Fatal(err)
		}
		lost := e.upload(st.UploadID)
		if err := e.store.AbortMultipart(ctx, lost.S3Key, lost.S3UploadID); err != nil { // the store loses it
			t.Fatal(err)
		}
		e.run(t, 5*time.Second)
		back, err := e.svc.WaitStatus(ctx, "usr_a", st.UploadID, 20*time.Second)
		if err != nil || back.State != upload.StateUploading || len(back.Parts) != 0 {
			t.Fatalf("after the loss: %+v %v, want uploading with no parts", back, err)
		}
		if u := e.upload(st.UploadID); u.S3UploadID == lost.S3UploadID {
			t.Fatal("the upload kept the lost multipart upload")
		}
		if n := e.count("outbox", "subject = ? AND type = ?", st.UploadID, notify.UploadFailed); n != 0 {
			t.Fatal("a lost multipart upload failed the upload")
		}
		c.sendChecked(back, data, allParts(back))
		if _, err := e.svc.Complete(ctx, "usr_a", st.UploadID, upload.CompleteRequest{CRC32C: s3store.CRC32C(data)}); err != nil {
			t.Fatal(err)
		}
		done := e.waitVerified("usr_a", st.UploadID, 30*time.Second)
		if done.State != upload.StateSuccess || done.SHA256 != sha(data) {
			t.Fatalf("final = %+v", done)
		}
		if n := e.count("outbox", "subject = ? AND type = ?", st.UploadID, notify.UploadCompleted); n != 1 {
			t.Fatalf("upload.completed events = %d", n)
		}
		if j, _ := e.queue.Get(ctx, upload.KindMerge, st.UploadID); j.State != jobs.StateDone {
			t.Fatalf("merge job %s", j.State)
		}
	})
}
