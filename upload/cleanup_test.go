package upload_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/notify"
	"github.com/ferry-io/ferry/s3store"
	"github.com/ferry-io/ferry/upload"
)

// Done-when 12: cleanup expires an idle upload and aborts it in S3, aborts
// a multipart upload no row knows once it is older than the TTL, aborts
// at once one whose row already ended, leaves other prefixes and live
// uploads alone, and purges expired challenges. Expired uploads answer 410.
func TestCleanup(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, func(c *testConfig) { c.TTL = time.Hour })
		ctx := context.Background()
		// Content someone owns, merged by a runner that stops (with its
		// own periodic cleanup) before the scene below is set.
		owned := randomBytes(1000)
		t.Run("merge", func(t *testing.T) {
			st := newClient(t, e, "usr_b").uploadAll("owned.bin", owned, true)
			e.run(t, 5*time.Second)
			e.waitVerified("usr_b", st.UploadID, 30*time.Second)
		})
		c := newClient(t, e, "usr_a")
		data := randomBytes(5*mib + 1)
		idle := c.init("idle.bin", data, true, 5*mib).Upload
		c.send(idle, data, []int{1}, true)

		orphanKey := "uploads/upl_orphan" + testenv.RandomHex(4)
		if _, err := e.store.CreateMultipart(ctx, orphanKey, s3store.MultipartOptions{}); err != nil {
			t.Fatal(err)
		}
		otherKey := "exports/exp_x/artifact" // another feature's writer
		if _, err := e.store.CreateMultipart(ctx, otherKey, s3store.MultipartOptions{}); err != nil {
			t.Fatal(err)
		}
		// A row aborted by a process that died before aborting in S3.
		dead := c.init("dead.bin", randomBytes(100), false, 0).Upload
		db.Model(&models.Upload{}).Where("id = ?", dead.UploadID).Update("state", upload.StateAborted)
		// A proof challenge.
		if res, _ := e.svc.Init(ctx, "usr_c", upload.InitRequest{FileName: "x", Size: 1000, SHA256: sha(owned)}); res.Outcome != upload.ProofRequired {
			t.Fatalf("want a challenge, got %v", res.Outcome)
		}

		// Now: nothing is old enough, except the dead row's upload.
		rep, err := e.svc.Cleanup(ctx)
		if err != nil || rep != (upload.CleanupReport{Orphans: 1}) {
			t.Fatalf("first pass = %+v %v, want only the dead row's upload aborted", rep, err)
		}
		b := e.bucket()
		if _, ok := b.Pending["uploads/"+dead.UploadID]; ok || len(b.Pending) != 3 {
			t.Fatalf("pending after the first pass = %v", b.Pending)
		}

		// Past the TTL: the idle upload expires, the orphan goes.
		e.clock.Advance(2 * time.Hour)
		rep, err = e.svc.Cleanup(ctx)
		if err != nil || rep != (upload.CleanupReport{Expired: 1, Orphans: 1, Challenges: 1}) {
			t.Fatalf("second pass = %+v %v", rep, err)
		}
		b = e.bucket()
		if len(b.Pending) != 1 || b.Pending[otherKey] == "" {
			t.Fatalf("pending after cleanup = %v, want only %s", b.Pending, otherKey)
		}
		if u := e.upload(idle.UploadID); u.State != upload.StateExpired || u.ResumeKey != nil {
			t.Fatalf("idle upload = %s (resume key %v)", u.State, u.ResumeKey)
		}
		if n := e.count("upload_challenges", "1 = 1"); n != 0 {
			t.Fatalf("challenges left: %d", n)
		}
		// Clients are told to start over, the same way on every route.
		_, err = e.svc.Status(ctx, "usr_a", idle.UploadID)
		wantKind(t, err, errkind.Gone, "upload_expired")
		_, err = e.svc.Presign(ctx, "usr_a", idle.UploadID, upload.PresignRequest{Parts: []int{1}})
		wantKind(t, err, errkind.Gone, "upload_expired")
		_, err = e.svc.Complete(ctx, "usr_a", idle.UploadID, upload.CompleteRequest{})
		wantKind(t, err, errkind.Gone, "upload_expired")
		_, err = e.svc.Find(ctx, "usr_a", sha(data), int64(len(data)))
		wantKind(t, err, errkind.NotFound, "upload_not_found")
		// ... and a new Init of the content starts afresh.
		if res := c.init("idle.bin", data, true, 5*mib); res.Outcome != upload.Created {
			t.Fatalf("init after expiry = %v", res.Outcome)
		}
		// A second pass finds nothing left to do.
		if rep, err := e.svc.Cleanup(ctx); err != nil || rep != (upload.CleanupReport{}) {
			t.Fatalf("third pass = %+v %v", rep, err)
		}
	})
}

// An upload past its TTL answers 410 at once, before cleanup has run, and
// activity keeps an upload alive.
func TestExpiryIsConsistentAndActivityExtends(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, func(c *testConfig) { c.TTL = time.Hour })
		ctx := context.Background()
		c := newClient(t, e, "usr_a")
		data := randomBytes(100)
		st := c.init("a", data, true, 0).Upload
		e.clock.Advance(50 * time.Minute)
		c.presign(st.UploadID, []int{1}, nil) // activity
		e.clock.Advance(50 * time.Minute)
		if _, err := e.svc.Status(ctx, "usr_a", st.UploadID); err != nil {
			t.Fatalf("an upload active 50 minutes ago expired: %v", err)
		}
		e.clock.Advance(11 * time.Minute)
		_, err := e.svc.Status(ctx, "usr_a", st.UploadID)
		wantKind(t, err, errkind.Gone, "upload_expired")
		_, err = e.svc.Find(ctx, "usr_a", sha(data), int64(len(data)))
		wantKind(t, err, errkind.NotFound, "upload_not_found")
		_, err = e.svc.Status(ctx, "usr_a", st.UploadID)
		wantKind(t, err, errkind.Gone, "upload_expired")
		if _, err := e.svc.Abort(ctx, "usr_a", st.UploadID); !errors.Is(err, errkind.Gone) {
			t.Fatalf("abort of an expired upload: %v", err)
		}
		// Init of the same content expires the stale one and starts anew.
		res := c.init("a", data, true, 0)
		if res.Outcome != upload.Created || res.Upload.UploadID == st.UploadID {
			t.Fatalf("init = %v %s", res.Outcome, res.Upload.UploadID)
		}
		if e.upload(st.UploadID).State != upload.StateExpired {
			t.Fatal("the stale upload was not marked expired")
		}
		if _, ok := e.bucket().Pending["uploads/"+st.UploadID]; ok {
			t.Fatal("the stale multipart upload was not aborted")
		}
	})
}

// The periodic cleanup job runs through the jobs runner, and a merge
// whose job gave up (its worker died on the last attempt) is failed with
// an event rather than left merging forever.
func TestCleanupJobFailsAbandonedMerges(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, func(c *testConfig) { c.CleanupEvery = 200 * time.Millisecond })
		c := newClient(t, e, "usr_a")
		st := c.uploadAll("f", randomBytes(1000), true)
		// What the runner leaves when the last attempt's worker dies.
		db.Model(&models.Upload{}).Where("id = ?", st.UploadID).Update("state", upload.StateMerging)
		db.Model(&models.Job{}).Where("kind = ? AND business_key = ?", upload.KindMerge, st.UploadID).Update("state", jobs.StateFailed)
		e.run(t, 5*time.Second)
		done := e.waitVerified("usr_a", st.UploadID, 30*time.Second)
		if done.State != upload.StateFailed || done.Error == "" {
			t.Fatalf("final = %+v", done)
		}
		if n := e.count("outbox", "type = ? AND subject = ?", notify.UploadFailed, st.UploadID); n != 1 {
			t.Fatalf("upload.failed events = %d", n)
		}
		// The purge job aborts the multipart upload after the failure
		// commits; wait for it rather than for the object, which never
		// existed.
		deadline := time.Now().Add(10 * time.Second)
		for len(e.bucket().Pending) != 0 {
			if time.Now().After(deadline) {
				t.Fatal("the abandoned multipart upload was not aborted")
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// Uploads that ended without a file are deleted by cleanup once past the
// retention, with their part reports and Companion mappings; successful
// ones, and recently ended ones, stay.
func TestCleanupPrunesEndedUploads(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, func(c *testConfig) { c.Retention = 24 * time.Hour })
		e.run(t, 5*time.Second)
		ctx := context.Background()
		c := newClient(t, e, "usr_a")
		ok := c.uploadAll("kept.bin", randomBytes(1000), true)
		e.waitVerified("usr_a", ok.UploadID, 30*time.Second)
		aborted := c.init("gone.bin", randomBytes(100), false, 0).Upload
		c.send(aborted, make([]byte, 100), []int{1}, true)
		if _, err := e.svc.Abort(ctx, "usr_a", aborted.UploadID); err != nil {
			t.Fatal(err)
		}
		mp, err := e.svc.InitMultipart(ctx, "usr_a", upload.OpenRequest{FileName: "uppy.bin"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.AbortMultipart(ctx, "usr_a", mp.S3UploadID); err != nil {
			t.Fatal(err)
		}
		recent := c.init("recent.bin", randomBytes(100), false, 0).Upload
		e.svc.Abort(ctx, "usr_a", recent.UploadID)
		old := models.Time(time.Now().Add(-48 * time.Hour))
		db.Model(&models.Upload{}).Where("id IN ?", []string{aborted.UploadID, mp.UploadID, ok.UploadID}).Update("finished_at", old)

		rep, err := e.svc.Cleanup(ctx)
		if err != nil || rep.Pruned != 2 {
			t.Fatalf("cleanup = %+v %v, want 2 ended uploads pruned", rep, err)
		}
		if n := e.count("uploads", "id IN ?", []string{aborted.UploadID, mp.UploadID}); n != 0 {
			t.Fatalf("%d old ended uploads left", n)
		}
		if n := e.count("upload_parts", "upload_id = ?", aborted.UploadID) + e.count("companion_uploads", "upload_id = ?", mp.UploadID); n != 0 {
			t.Fatalf("%d part reports or mappings of pruned uploads left", n)
		}
		if n := e.count("uploads", "id IN ?", []string{ok.UploadID, recent.UploadID}); n != 2 {
			t.Fatal("a successful or recently ended upload was pruned")
		}
	})
}
