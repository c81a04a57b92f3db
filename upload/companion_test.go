package upload_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/s3store"
	"github.com/ferry-io/ferry/upload"
)

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	var ke *errkind.Error
	if !errors.As(err, &ke) || ke.Code != code {
		t.Fatalf("err = %v, want code %s", err, code)
	}
}

// sendS3 PUTs the parts of data (5 MiB each) of an upload started with
// InitMultipart and returns their ETags.
func (c *client) sendS3(m upload.Multipart, data []byte) []upload.ClientPart {
	c.t.Helper()
	var parts []upload.ClientPart
	for n, off := 1, 0; off < len(data); n, off = n+1, off+5*mib {
		body := data[off:min(off+5*mib, len(data))]
		urls, err := c.svc.PresignMultipart(context.Background(), c.user, m.S3UploadID, []int{n})
		if err != nil {
			c.t.Fatal(err)
		}
		code, etag := c.put(urls[n], bytes.NewReader(body), int64(len(body)))
		if code != 200 {
			c.t.Fatalf("PUT part %d: %d", n, code)
		}
		parts = append(parts, upload.ClientPart{Number: n, ETag: etag})
	}
	return parts
}

// An upload whose size is only learnt at completion: its layout is checked
// against S3 (a named part S3 holds with another ETag is refused before
// anything changes), native calls that need a layout are refused, and a complete
// retried after S3 already completed (a crash in between) is recorded and
// verified like any upload.
func TestUnsizedUpload(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil)
		e.run(t, 5*time.Second)
		ctx := context.Background()
		c := newClient(t, e, "usr_alice")
		m, err := e.svc.InitMultipart(ctx, c.user, upload.OpenRequest{FileName: "clip.mp4", ContentType: "video/mp4"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.svc.Presign(ctx, c.user, m.UploadID, upload.PresignRequest{Parts: []int{1}})
		wantCode(t, err, "upload_size_unknown")
		_, err = e.svc.Complete(ctx, c.user, m.UploadID, upload.CompleteRequest{})
		wantCode(t, err, "upload_size_unknown")
		_, err = e.svc.ReportPart(ctx, c.user, m.UploadID, 1, `"abc"`, 5*mib)
		wantCode(t, err, "upload_size_unknown")
		if _, err := e.svc.MultipartStatus(ctx, "usr_mallory", m.S3UploadID); errkind.KindOf(err) != errkind.NotFound {
			t.Fatalf("another user's upload id: %v", err)
		}

		data := randomBytes(2*5*mib + 99)
		parts := c.sendS3(m, data)
		_, err = e.svc.CompleteMultipart(ctx, c.user, m.S3UploadID, []upload.ClientPart{parts[0], {Number: 3, ETag: parts[1].ETag}})
		wantCode(t, err, "invalid_parts") // part 3's ETag is part 2's
		if st := e.upload(m.UploadID); st.State != upload.StateUploading || st.Size != 0 {
			t.Fatalf("a refused complete changed the upload: %+v", st)
		}

		// S3 completes, then the process "dies" before recording it.
		cps := make([]s3store.CompletedPart, len(parts))
		for i, p := range parts {
			cps[i] = s3store.CompletedPart{Number: int32(p.Number), ETag: p.ETag}
		}
		if _, err := e.store.CompleteMultipart(ctx, m.Key, m.S3UploadID, cps, ""); err != nil {
			t.Fatal(err)
		}
		done, err := e.svc.CompleteMultipart(ctx, c.user, m.S3UploadID, parts)
		if err != nil || done.State != upload.StatePending {
			t.Fatalf("complete after S3 completed: %+v %v", done, err)
		}
		st := e.waitVerified(c.user, m.UploadID, 30*time.Second)
		if st.State != upload.StateSuccess || st.SHA256 != sha(data) || st.Size != int64(len(data)) {
			t.Fatalf("verified = %+v", st)
		}
		if again, err := e.svc.CompleteMultipart(ctx, c.user, m.S3UploadID, parts); err != nil || again.State != upload.StateSuccess {
			t.Fatalf("complete again: %+v %v", again, err)
		}
		if n := e.count("outbox", "type = ? AND subject = ?", "upload.completed", m.UploadID); n != 1 {
			t.Fatalf("upload.completed events = %d", n)
		}
	})
}

func postObject(t *testing.T, pol s3store.PostPolicy, data []byte) {
	t.Helper()
	if code, body := testenv.PostForm(t, pol.URL, pol.Fields, data); code/100 != 2 {
		t.Fatalf("form POST: %d %s", code, body)
	}
}

// A POST-policy upload is adopted when its object has landed (verified,
// one event) and expires when it never came; aborting one deletes an
// object that landed anyway.
func TestPostUploadAdoption(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil)
		e.run(t, 5*time.Second)
		ctx := context.Background()
		user := "usr_alice"
		open := func(name string) upload.PostUpload {
			p, err := e.svc.InitPost(ctx, user, upload.OpenRequest{FileName: name, ContentType: "image/png"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}

		landed := open("landed.png")
		data := randomBytes(3*mib + 1)
		postObject(t, landed.Policy, data)
		if err := e.svc.AdoptNow(ctx, landed.UploadID); err != nil {
			t.Fatal(err)
		}
		st := e.waitVerified(user, landed.UploadID, 30*time.Second)
		if st.State != upload.StateSuccess || st.SHA256 != sha(data) {
			t.Fatalf("adopted = %+v", st)
		}
		if err := e.svc.AdoptNow(ctx, landed.UploadID); err != nil { // a rerun changes nothing
			t.Fatal(err)
		}
		if n := e.count("outbox", "type = ? AND subject = ?", "upload.completed", landed.UploadID); n != 1 {
			t.Fatalf("upload.completed events = %d", n)
		}

		never := open("never.png")
		if err := e.svc.AdoptNow(ctx, never.UploadID); err != nil {
			t.Fatal(err)
		}
		if u := e.upload(never.UploadID); u.State != upload.StateExpired {
			t.Fatalf("an upload whose object never came is %s", u.State)
		}

		aborted := open("aborted.png")
		postObject(t, aborted.Policy, []byte("late"))
		if _, err := e.svc.Abort(ctx, user, aborted.UploadID); err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.Head(ctx, aborted.Key); !errors.Is(err, s3store.ErrNotFound) {
			t.Fatalf("the aborted upload's object: %v", err)
		}
		if err := e.svc.AdoptNow(ctx, aborted.UploadID); err != nil {
			t.Fatal(err)
		}
		if u := e.upload(aborted.UploadID); u.State != upload.StateAborted {
			t.Fatalf("aborted upload is %s after adoption", u.State)
		}
	})
}
