package upload_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/quota"
	"github.com/ferry-io/ferry/upload"
)

func withQuota(db *testenv.DB, bytes int64) func(*testConfig) {
	return func(c *testConfig) {
		c.Quotas = testenv.Must(quota.New(quota.Config{DB: db.DB, Defaults: quota.Limits{Bytes: bytes}, Now: nil}))
	}
}

func (e *env) usage(user string) upload.Usage {
	e.t.Helper()
	u, err := e.svc.Usage(context.Background(), user)
	if err != nil {
		e.t.Fatal(err)
	}
	return u
}

// Done-when 5 in the service: init refuses a declared size over what is
// left (413 quota_exceeded with the limit and the usage), counting what
// unfinished uploads reserve; content a user holds in several files counts
// once, and content two users hold counts for each; deleting files gives
// the room back.
func TestQuotaStoredBytes(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		const limit = 20 * mib
		e := newEnv(t, db, withQuota(db, limit))
		ctx := context.Background()
		alice, bob := newClient(t, e, "usr_alice"), newClient(t, e, "usr_bob")
		data := randomBytes(8 * mib)

		_, err := e.svc.Init(ctx, alice.user, upload.InitRequest{FileName: "big.bin", Size: limit + 1})
		ke := wantKind(t, err, errkind.TooLarge, quota.Code)
		if ke.Fields["limit"] != int64(limit) || ke.Fields["usage"] != int64(0) || ke.Fields["requested"] != int64(limit+1) {
			t.Fatalf("problem fields %v", ke.Fields)
		}

		// No job runs until after the usage is read, so the first upload
		// is certainly still merging then: with the runner started first,
		// a fast store (SeaweedFS in CI) had merged it already.
		first := alice.uploadAll("a.bin", data, false)
		if u := alice.e.usage(alice.user); u.Reserved != int64(len(data)) || u.Bytes != 0 {
			t.Fatalf("while merging: %+v, want the upload's size reserved", u)
		}
		e.run(t, 5*time.Second)
		alice.e.waitVerified(alice.user, first.UploadID, 30*time.Second)
		// The same content again, in a second file: stored once.
		second := alice.uploadAll("a-copy.bin", data, false)
		alice.e.waitVerified(alice.user, second.UploadID, 30*time.Second)
		if u := e.usage(alice.user); u.Bytes != int64(len(data)) || u.Files != 2 || u.Reserved != 0 {
			t.Fatalf("alice after dedup: %+v, want %d bytes in 2 files", u, len(data))
		}
		// Bob holds it too: it counts for him as well, and not twice for
		// her.
		b := bob.uploadAll("b.bin", data, false)
		e.waitVerified(bob.user, b.UploadID, 30*time.Second)
		if ua, ub := e.usage(alice.user), e.usage(bob.user); ua.Bytes != int64(len(data)) || ub.Bytes != int64(len(data)) {
			t.Fatalf("alice %+v, bob %+v; want %d each", ua, ub, len(data))
		}

		// 8 MiB stored, an unfinished upload reserving 8 MiB: 4 MiB left.
		open, err := e.svc.Init(ctx, alice.user, upload.InitRequest{FileName: "c.bin", Size: 8 * mib})
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.svc.Init(ctx, alice.user, upload.InitRequest{FileName: "d.bin", Size: 4*mib + 1})
		ke = wantKind(t, err, errkind.TooLarge, quota.Code)
		if ke.Fields["usage"] != int64(8*mib) || ke.Fields["reserved"] != int64(8*mib) {
			t.Fatalf("problem fields %v", ke.Fields)
		}
		if _, err := e.svc.Abort(ctx, alice.user, open.Upload.UploadID); err != nil {
			t.Fatal(err)
		}

		// Deleting one of the two files of the content frees nothing;
		// deleting the other frees it all.
		files, _, err := e.svc.Files(ctx, alice.user, "", 10)
		if err != nil || len(files) != 2 {
			t.Fatalf("files %v %v", files, err)
		}
		if err := e.svc.DeleteFile(ctx, alice.user, files[0].ID); err != nil {
			t.Fatal(err)
		}
		if u := e.usage(alice.user); u.Bytes != int64(len(data)) {
			t.Fatalf("after one delete: %+v", u)
		}
		if err := e.svc.DeleteFile(ctx, alice.user, files[1].ID); err != nil {
			t.Fatal(err)
		}
		if u := e.usage(alice.user); u.Bytes != 0 || u.Files != 0 {
			t.Fatalf("after both deletes: %+v", u)
		}
		if u := e.usage(bob.user); u.Bytes != int64(len(data)) {
			t.Fatalf("bob after alice's deletes: %+v", u)
		}
		if _, err := e.svc.Init(ctx, alice.user, upload.InitRequest{FileName: "e.bin", Size: limit}); err != nil {
			t.Fatalf("the whole quota again: %v", err)
		}
	})
}

// Uploads of one user started at the same moment cannot together pass the
// quota: the check is repeated under the user's lock in the transaction
// that records each upload.
func TestQuotaUnderRace(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, withQuota(db, 20*mib))
		if err := db.Exec("INSERT INTO users (id, name, is_admin, active, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
			"usr_alice", "alice", false, true, time.Now().UTC(), time.Now().UTC()).Error; err != nil {
			t.Fatal(err)
		}
		const n = 6
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = e.svc.Init(context.Background(), "usr_alice", upload.InitRequest{FileName: "f.bin", Size: 8 * mib})
			}()
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case errkind.KindOf(err) != errkind.TooLarge:
				t.Fatalf("init: %v", err)
			}
		}
		if u := e.usage("usr_alice"); ok != 2 || u.Reserved != 16*mib {
			t.Fatalf("%d inits of 8 MiB passed a 20 MiB quota (usage %+v), want 2", ok, u)
		}
	})
}

// An upload whose size is known only at completion (Companion's) is
// refused when it starts with no room left, and checked when it completes:
// a 413 that changes nothing, so that after making room the same complete
// succeeds. The ticket's size limit is checked the same way.
func TestQuotaUnsizedUpload(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, withQuota(db, 12*mib))
		e.run(t, 5*time.Second)
		ctx := context.Background()
		c := newClient(t, e, "usr_alice")
		held := c.uploadAll("held.bin", randomBytes(4*mib), false)
		e.waitVerified(c.user, held.UploadID, 30*time.Second)

		m, err := e.svc.InitMultipart(ctx, c.user, upload.OpenRequest{FileName: "clip.mp4", ContentType: "video/mp4",
			Metadata: upload.Metadata{"name": "clip.mp4", "relativePath": nil}})
		if err != nil {
			t.Fatal(err)
		}
		parts := c.sendS3(m, randomBytes(10*mib))
		_, err = e.svc.CompleteMultipart(ctx, c.user, m.S3UploadID, parts)
		ke := wantKind(t, err, errkind.TooLarge, quota.Code)
		if ke.Fields["limit"] != int64(12*mib) || ke.Fields["usage"] != int64(4*mib) || ke.Fields["requested"] != int64(10*mib) {
			t.Fatalf("problem fields %v", ke.Fields)
		}
		if u := e.upload(m.UploadID); u.State != upload.StateUploading || u.Size != 0 {
			t.Fatalf("a refused complete changed the upload: %+v", u)
		}
		if err := e.svc.DeleteFile(ctx, c.user, e.waitDone(c.user, held.UploadID, time.Second).FileID); err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.CompleteMultipart(ctx, c.user, m.S3UploadID, parts); err != nil {
			t.Fatalf("complete after making room: %v", err)
		}
		st := e.waitVerified(c.user, m.UploadID, 30*time.Second)
		f, err := e.svc.File(ctx, c.user, st.FileID)
		if err != nil || f.ClientMetadata["name"] != "clip.mp4" || f.ClientMetadata["relativePath"] != nil || len(f.ClientMetadata) != 2 {
			t.Fatalf("file %+v %v; want Uppy's meta as its client metadata", f, err)
		}

		// No room at all: the next Companion upload is refused at once.
		full := newEnv(t, db, withQuota(db, 10*mib))
		_, err = full.svc.InitMultipart(ctx, c.user, upload.OpenRequest{FileName: "more.mp4"})
		wantKind(t, err, errkind.TooLarge, quota.Code)
		_, err = full.svc.InitPost(ctx, c.user, upload.OpenRequest{FileName: "more.mp4"}, nil)
		wantKind(t, err, errkind.TooLarge, quota.Code)

		// A ticket's max_size holds for an upload of unknown size too.
		secret, tk := e.ticket(c.user, upload.TicketRequest{MaxSize: 6 * mib})
		m2, err := e.svc.InitMultipart(ctx, c.user, upload.OpenRequest{FileName: "t.bin", Ticket: tk})
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.svc.CompleteMultipart(ctx, c.user, m2.S3UploadID, c.sendS3(m2, randomBytes(6*mib+1)))
		wantKind(t, err, errkind.TooLarge, "ticket_max_size")
		_, err = e.svc.InitMultipart(ctx, c.user, upload.OpenRequest{FileName: "t2.bin", Ticket: e.resolve(secret)})
		wantKind(t, err, errkind.Conflict, "ticket_used")
	})
}
