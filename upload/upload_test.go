package upload_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/notify"
	"github.com/ferry-io/ferry/s3store"
	"github.com/ferry-io/ferry/upload"
)

// The whole path: init, parts, complete (202 at once), merge, verify; one
// blob, one file, one upload.completed event; the file lists with a signed
// download link; complete again answers the state.
func TestUploadHappyPath(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil)
		e.run(t, 5*time.Second)
		ctx := context.Background()
		c := newClient(t, e, "usr_a")
		data := randomBytes(11*mib + 3)
		st := c.uploadAll("report.pdf", data, true)
		if st.State != upload.StatePending {
			t.Fatalf("complete answered %s, want pending", st.State)
		}
		done := e.waitVerified("usr_a", st.UploadID, 30*time.Second)
		if done.State != upload.StateSuccess || done.FileID == "" || done.SHA256 != sha(data) {
			t.Fatalf("final = %+v", done)
		}
		again, err := e.svc.Complete(ctx, "usr_a", st.UploadID, upload.CompleteRequest{})
		if err != nil || again.State != upload.StateSuccess || again.FileID != done.FileID {
			t.Fatalf("repeated complete = %+v, %v", again, err)
		}
		f, err := e.svc.File(ctx, "usr_a", done.FileID)
		if err != nil || f.Name != "report.pdf" || f.Size != int64(len(data)) || f.SHA256 != sha(data) {
			t.Fatalf("file = %+v, %v", f, err)
		}
		if !strings.HasPrefix(f.DownloadURL, "http://ferry.test/download/"+f.ID+"?") || time.Until(f.LinkExpires) > 5*time.Minute || time.Until(f.LinkExpires) < 4*time.Minute {
			t.Fatalf("download_url = %q until %s; want an absolute link for 5 minutes", f.DownloadURL, f.LinkExpires)
		}
		for _, q := range []string{"u=usr_a", "exp=", "kid=k1", "sig="} {
			if !strings.Contains(f.DownloadURL, q) {
				t.Errorf("download_url %q lacks %s", f.DownloadURL, q)
			}
		}
		if got, n := e.objectSHA("uploads/" + st.UploadID); got != sha(data) || n != int64(len(data)) {
			t.Fatalf("object = %s (%d bytes)", got, n)
		}
		if n := e.count("outbox", "type = ? AND subject = ?", notify.UploadCompleted, st.UploadID); n != 1 {
			t.Fatalf("upload.completed events = %d, want 1", n)
		}
		if n := e.count("blobs", "sha256 = ? AND refs = 1", sha(data)); n != 1 {
			t.Fatalf("blobs = %d, want 1 with one reference", n)
		}
		if b := e.bucket(); len(b.Pending) != 0 {
			t.Fatalf("multipart uploads left: %v", b.Pending)
		}
		// Another user sees none of it.
		if _, err := e.svc.Status(ctx, "usr_b", st.UploadID); !errors.Is(err, errkind.NotFound) {
			t.Fatalf("other user's status: %v", err)
		}
		if _, err := e.svc.File(ctx, "usr_b", f.ID); !errors.Is(err, errkind.NotFound) {
			t.Fatalf("other user's file: %v", err)
		}
	})
}

// failingReader returns an error after n bytes, like a client that dies
// in the middle of a PUT.
type failingReader struct {
	r io.Reader
	n int
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("client crashed")
	}
	if len(p) > f.n {
		p = p[:f.n]
	}
	k, err := f.r.Read(p)
	f.n -= k
	return k, err
}

// Done-when 1: a client dies mid-upload (one part finished and reported,
// one finished but never reported, one cut off in the middle of its PUT).
// A new client holding only the file asks ferry, learns exactly which
// parts S3 has, and PUTs only the missing ones.
func TestResumeAfterClientCrash(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil)
		e.run(t, 5*time.Second)
		ctx := context.Background()
		data := randomBytes(4*5*mib + 12345) // 5 parts
		first := newClient(t, e, "usr_a")
		res := first.init("movie.mkv", data, true, 5*mib)
		st := res.Upload
		if res.Outcome != upload.Created || st.PartCount != 5 {
			t.Fatalf("init = %v %+v", res.Outcome, st)
		}
		first.send(st, data, []int{1}, true)
		first.send(st, data, []int{3}, false)
		urls := first.presign(st.UploadID, []int{4}, nil)
		body := partBytes(st, data, 4)
		if code, _ := first.put(urls[4], &failingReader{r: bytes.NewReader(body), n: len(body) / 2}, int64(len(body))); code == 200 {
			t.Fatal("a PUT cut off half-way succeeded")
		}
		// first is gone. second knows nothing but the file.
		second := newClient(t, e, "usr_a")
		found, err := e.svc.Find(ctx, "usr_a", sha(data), int64(len(data)))
		if err != nil || found.UploadID != st.UploadID {
			t.Fatalf("find = %+v, %v", found, err)
		}
		res = second.init("movie (1).mkv", data, true, 0)
		if res.Outcome != upload.Resumed || res.Upload.UploadID != st.UploadID {
			t.Fatalf("second init: outcome %v upload %s, want Resumed %s", res.Outcome, res.Upload.UploadID, st.UploadID)
		}
		// A careful client checks each listed part against its own bytes:
		// a single part's ETag is its MD5. (The embedded VersityGW keeps
		// the part cut off half-way, padded to its declared length, where
		// AWS S3 would drop it; the ETag gives it away.)
		todo := second.todo(res.Upload, data)
		if fmt.Sprint(todo) != "[2 4 5]" {
			t.Fatalf("parts to send = %v, want [2 4 5]; S3 listed %+v", todo, res.Upload.Parts)
		}
		for _, n := range []int{1, 3} {
			if i := indexOf(res.Upload.Parts, n); i < 0 || res.Upload.Parts[i].Size != 5*mib {
				t.Fatalf("resumed parts %+v lack part %d (S3's list counts, reported or not)", res.Upload.Parts, n)
			}
		}
		second.send(res.Upload, data, todo, true)
		if second.puts.Load() != 3 || fmt.Sprint(todo) != "[2 4 5]" {
			t.Fatalf("second client PUT %d parts (%v), want exactly the 3 missing ones", second.puts.Load(), todo)
		}
		if _, err := e.svc.Complete(ctx, "usr_a", st.UploadID, upload.CompleteRequest{}); err != nil {
			t.Fatal(err)
		}
		done := e.waitVerified("usr_a", st.UploadID, 30*time.Second)
		if done.State != upload.StateSuccess || done.SHA256 != sha(data) {
			t.Fatalf("final = %+v", done)
		}
		if got, _ := e.objectSHA("uploads/" + st.UploadID); got != sha(data) {
			t.Fatal("merged object differs from the file")
		}
		if _, err := e.svc.Find(ctx, "usr_a", sha(data), int64(len(data))); !errors.Is(err, errkind.NotFound) {
			t.Fatalf("find after success: %v, want 404", err)
		}
	})
}

func indexOf(ps []upload.Part, n int) int {
	for i, p := range ps {
		if p.Number == n {
			return i
		}
	}
	return -1
}

// Done-when 3: the same part PUT twice at once and reported twice at once
// leaves one row, and the merged object is the file.
func TestDuplicatePart(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil)
		e.run(t, 5*time.Second)
		ctx := context.Background()
		c := newClient(t, e, "usr_a")
		data := randomBytes(2*5*mib + 777)
		res := c.init("dup.bin", data, true, 5*mib)
		st := res.Upload
		c.send(st, data, []int{1, 3}, true)
		urls := c.presign(st.UploadID, []int{2}, nil)
		body := partBytes(st, data, 2)
		var wg sync.WaitGroup
		etags := make([]string, 2)
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, etag := c.put(urls[2], bytes.NewReader(body), int64(len(body)))
				if code != 200 {
					t.Errorf("PUT %d: %d", i, code)
				}
				etags[i] = etag
			}()
		}
		wg.Wait()
		errs := make(chan error, 8)
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := e.svc.ReportPart(ctx, "usr_a", st.UploadID, 2, etags[i%2], int64(len(body)))
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("report: %v", err)
			}
		}
		if n := e.count("upload_parts", "upload_id = ? AND part_number = ?", st.UploadID, 2); n != 1 {
			t.Fatalf("rows for part 2 = %d, want 1", n)
		}
		if n := e.count("upload_parts", "upload_id = ?", st.UploadID); n != 3 {
			t.Fatalf("part rows = %d, want 3", n)
		}
		now, _ := e.svc.Status(ctx, "usr_a", st.UploadID)
		if len(now.Parts) != 3 {
			t.Fatalf("status parts = %+v", now.Parts)
		}
		if _, err := e.svc.Complete(ctx, "usr_a", st.UploadID, upload.CompleteRequest{}); err != nil {
			t.Fatal(err)
		}
		done := e.waitVerified("usr_a", st.UploadID, 30*time.Second)
		if done.State != upload.StateSuccess {
			t.Fatalf("final = %+v", done)
		}
		if got, n := e.objectSHA("uploads/" + st.UploadID); got != sha(data) || n != int64(len(data)) {
			t.Fatalf("merged object sha %s (%d bytes), want the file's", got, n)
		}
	})
}

// Done-when 4: stray parts (beyond part_count) and parts replaced after
// the client vouched for them never end up in a file: the merge fails, or
// the file holds exactly the bytes that were verified.
func TestStrayParts(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil)
		ctx := context.Background()
		// Each case uploads its own content, so one case's blob cannot
		// turn another's init into an instant upload.
		var data, other []byte
		cases := []struct {
			name    string
			withSHA bool
			report  bool
			// tamper runs after every part is uploaded; it may complete
			// the upload itself, and then returns true.
			tamper    func(c *client, st upload.Status, etags map[int]string) bool
			wantError string // "" for success
			// wantReplaced: on success the file holds the content with
			// part 2 replaced (what S3 merged and ferry verified).
			wantReplaced bool
		}{
			{"strays beyond part_count", true, true, func(c *client, st upload.Status, _ map[int]string) bool {
				putRaw(c, st.UploadID, 4, randomBytes(5*mib))
				putRaw(c, st.UploadID, 9, []byte("stray"))
				return false
			}, "", false},
			{"part replaced after it was reported", false, true, func(c *client, st upload.Status, _ map[int]string) bool {
				putRaw(c, st.UploadID, 2, other)
				return false
			}, "part 2 changed", false},
			{"part replaced after complete named its etag", false, false, func(c *client, st upload.Status, etags map[int]string) bool {
				var parts []upload.ClientPart
				for _, n := range sortedKeys(etags) {
					parts = append(parts, upload.ClientPart{Number: n, ETag: etags[n]})
				}
				if _, err := e.svc.Complete(ctx, c.user, st.UploadID, upload.CompleteRequest{Parts: parts}); err != nil {
					t.Fatal(err)
				}
				putRaw(c, st.UploadID, 1, other) // before any worker runs
				return true
			}, "part 1 changed", false},
			// The declared SHA-256 is only a claim: the file records what
			// S3 merged, as ferry hashed it.
			{"part replaced unreported, sha256 declared", true, false, func(c *client, st upload.Status, _ map[int]string) bool {
				putRaw(c, st.UploadID, 2, other)
				return false
			}, "", true},
			{"part replaced unreported, no sha256", false, false, func(c *client, st upload.Status, _ map[int]string) bool {
				putRaw(c, st.UploadID, 2, other)
				return false
			}, "", true},
		}
		keeps := e.keepsReplacedParts()
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				data = randomBytes(2*5*mib + 99) // 3 parts
				other = randomBytes(5 * mib)     // the size of part 1 or 2, other bytes
				if keeps && tc.wantError != "" {
					// The part the client vouched for is still there: it
					// is the file, not a failure.
					tc.wantError = ""
				}
				if keeps && tc.wantReplaced {
					// Only a second apart can the listing tell which PUT
					// is newer.
					tamper := tc.tamper
					tc.tamper = func(c *client, st upload.Status, etags map[int]string) bool {
						time.Sleep(1100 * time.Millisecond)
						return tamper(c, st, etags)
					}
				}
				want := data
				if tc.wantReplaced {
					want = append(append(append([]byte{}, data[:5*mib]...), other...), data[10*mib:]...)
				}
				c := newClient(t, e, "usr_"+testenv.RandomHex(4))
				res := c.init("f.bin", data, tc.withSHA, 5*mib)
				etags := c.send(res.Upload, data, allParts(res.Upload), tc.report)
				if !tc.tamper(c, res.Upload, etags) {
					if _, err := e.svc.Complete(ctx, c.user, res.Upload.UploadID, upload.CompleteRequest{}); err != nil {
						t.Fatal(err)
					}
				}
				e.run(t, 5*time.Second)
				done := e.waitVerified(c.user, res.Upload.UploadID, 30*time.Second)
				key := "uploads/" + res.Upload.UploadID
				if tc.wantError != "" {
					if done.State != upload.StateFailed || !strings.Contains(done.Error, tc.wantError) {
						t.Fatalf("final = %s %q, want failed with %q", done.State, done.Error, tc.wantError)
					}
					if n := e.count("files", "upload_id = ?", res.Upload.UploadID); n != 0 {
						t.Fatalf("a failed upload has %d files", n)
					}
					e.waitGone(key, 10*time.Second)
					return
				}
				if done.State != upload.StateSuccess {
					t.Fatalf("final = %s %q", done.State, done.Error)
				}
				f, err := e.svc.File(ctx, c.user, done.FileID)
				got, n := e.objectSHA(key)
				if err != nil || f.SHA256 != sha(want) || got != f.SHA256 || n != int64(len(want)) {
					t.Fatalf("file sha %s, object %s (%d bytes); want both %s", f.SHA256, got, n, sha(want))
				}
			})
		}
	})
}

// putRaw PUTs arbitrary bytes as part n, bypassing the client's
// bookkeeping.
func putRaw(c *client, id string, n int, body []byte) {
	c.t.Helper()
	code, _ := c.put(c.presignRaw(id, n), bytes.NewReader(body), int64(len(body)))
	if code != 200 {
		c.t.Fatalf("PUT part %d: %d", n, code)
	}
}

// presignRaw signs a part straight through S3, as a misbehaving client
// holding a URL (or the upload id) could: ferry itself refuses part numbers
// beyond part_count and signs nothing once the upload left uploading.
func (c *client) presignRaw(id string, n int) upload.PresignedPart {
	c.t.Helper()
	var u models.Upload
	if err := c.e.db.Where("id = ?", id).Take(&u).Error; err != nil {
		c.t.Fatal(err)
	}
	req, err := c.e.store.PresignPart(context.Background(), u.S3Key, u.S3UploadID, s3store.PartSpec{Number: int32(n)}, time.Minute)
	if err != nil {
		c.t.Fatal(err)
	}
	return upload.PresignedPart{URL: req.URL, Method: req.Method, Headers: req.Headers}
}

// A wrong declared SHA-256 never becomes anyone's truth: the upload
// succeeds (S3 holds what the client sent), but the file, the blob, the
// upload and upload.completed all carry the SHA-256 ferry computed, and
// the claimed hash gives nobody an instant upload.
func TestWrongDeclaredSHA256(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil)
		e.run(t, 5*time.Second)
		ctx := context.Background()
		data := randomBytes(5*mib + 10)
		claimed := sha([]byte("something else entirely"))
		c := newClient(t, e, "usr_a")
		res, err := e.svc.Init(ctx, "usr_a", upload.InitRequest{FileName: "lie.bin", Size: int64(len(data)), SHA256: claimed})
		if err != nil || res.Outcome != upload.Created {
			t.Fatal(res.Outcome, err)
		}
		c.send(res.Upload, data, allParts(res.Upload), true)
		if _, err := e.svc.Complete(ctx, "usr_a", res.Upload.UploadID, upload.CompleteRequest{}); err != nil {
			t.Fatal(err)
		}
		done := e.waitVerified("usr_a", res.Upload.UploadID, 30*time.Second)
		if done.State != upload.StateSuccess || done.SHA256 != sha(data) {
			t.Fatalf("final = %s %q sha %s, want success with the true sha256", done.State, done.Error, done.SHA256)
		}
		f, err := e.svc.File(ctx, "usr_a", done.FileID)
		if err != nil || f.SHA256 != sha(data) || !f.SHA256Verified {
			t.Fatalf("file = %+v %v", f, err)
		}
		if n := e.count("blobs", "sha256 = ?", claimed); n != 0 {
			t.Fatal("the claimed hash is in the dedup index")
		}
		if n := e.count("blobs", "sha256 = ?", sha(data)); n != 1 {
			t.Fatalf("blobs with the true hash = %d", n)
		}
		if ev := e.eventData(res.Upload.UploadID, notify.UploadCompleted); ev.SHA256 != sha(data) {
			t.Fatalf("upload.completed carries %s, want the true %s", ev.SHA256, sha(data))
		}
		for _, user := range []string{"usr_a", "usr_b"} {
			again, err := e.svc.Init(ctx, user, upload.InitRequest{FileName: "x", Size: int64(len(data)), SHA256: claimed})
			if err != nil || again.Outcome != upload.Created {
				t.Fatalf("%s init with the false claim: %v %v, want a new upload", user, again.Outcome, err)
			}
		}
		if again, _ := e.svc.Init(ctx, "usr_a", upload.InitRequest{FileName: "y", Size: int64(len(data)), SHA256: sha(data)}); again.Outcome != upload.Instant {
			t.Fatalf("the owner's init with the true hash: %v, want Instant", again.Outcome)
		}
	})
}

func TestInstantUpload(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil)
		e.run(t, 5*time.Second)
		ctx := context.Background()
		data := randomBytes(5*mib + 70_000)
		owner := newClient(t, e, "usr_a")
		st := owner.uploadAll("a.bin", data, true)
		first := e.waitVerified("usr_a", st.UploadID, 30*time.Second)
		if first.State != upload.StateSuccess {
			t.Fatal(first)
		}
		req := upload.InitRequest{FileName: "again.bin", Size: int64(len(data)), SHA256: sha(data)}

		t.Run("same user", func(t *testing.T) {
			res, err := e.svc.Init(ctx, "usr_a", req)
			if err != nil || res.Outcome != upload.Instant || res.Upload.FileID == "" || res.Upload.FileID == first.FileID {
				t.Fatalf("init = %v %+v %v, want Instant with a new file", res.Outcome, res.Upload, err)
			}
			f, err := e.svc.File(ctx, "usr_a", res.Upload.FileID)
			if err != nil || f.Name != "again.bin" || f.SHA256 != sha(data) {
				t.Fatalf("instant file = %+v %v", f, err)
			}
			if owner.puts.Load() != 2 {
				t.Fatalf("PUTs = %d; the instant upload must send no bytes", owner.puts.Load())
			}
			if n := e.count("outbox", "type = ? AND subject = ?", notify.UploadCompleted, res.Upload.UploadID); n != 1 {
				t.Fatalf("instant upload events = %d, want 1", n)
			}
		})

		t.Run("other user, right proof", func(t *testing.T) {
			res, err := e.svc.Init(ctx, "usr_b", req)
			if err != nil || res.Outcome != upload.ProofRequired || len(res.Challenge.Ranges) != 3 {
				t.Fatalf("init = %v %+v %v, want a challenge", res.Outcome, res.Challenge, err)
			}
			for _, r := range res.Challenge.Ranges {
				if r.Length != 64<<10 || r.Offset < 0 || r.Offset+r.Length > int64(len(data)) {
					t.Fatalf("range %+v", r)
				}
			}
			got, err := e.svc.Prove(ctx, "usr_b", res.Challenge.ID, digests(data, res.Challenge))
			if err != nil || got.Outcome != upload.Instant || got.Upload.FileID == "" {
				t.Fatalf("prove = %v %+v %v", got.Outcome, got.Upload, err)
			}
			if _, err := e.svc.File(ctx, "usr_b", got.Upload.FileID); err != nil {
				t.Fatal(err)
			}
			// Single use.
			_, err = e.svc.Prove(ctx, "usr_b", res.Challenge.ID, digests(data, res.Challenge))
			wantKind(t, err, errkind.NotFound, "challenge_not_found")
			// Now usr_b owns it: the next init is instant.
			if res, _ := e.svc.Init(ctx, "usr_b", req); res.Outcome != upload.Instant {
				t.Fatalf("owner's second init = %v, want Instant", res.Outcome)
			}
		})

		t.Run("other user, wrong proof", func(t *testing.T) {
			res, _ := e.svc.Init(ctx, "usr_c", req)
			if res.Outcome != upload.ProofRequired {
				t.Fatal(res.Outcome)
			}
			// Someone else cannot answer usr_c's challenge.
			_, err := e.svc.Prove(ctx, "usr_d", res.Challenge.ID, digests(data, res.Challenge))
			wantKind(t, err, errkind.NotFound, "challenge_not_found")
			wrong := digests(data, res.Challenge)
			wrong[1] = sha([]byte("guess"))
			_, err = e.svc.Prove(ctx, "usr_c", res.Challenge.ID, wrong)
			wantKind(t, err, errkind.Forbidden, "proof_failed")
			// The wrong answer burned it: the right one now gets nothing.
			_, err = e.svc.Prove(ctx, "usr_c", res.Challenge.ID, digests(data, res.Challenge))
			wantKind(t, err, errkind.NotFound, "challenge_not_found")
			if n := e.count("files", "user_id = ?", "usr_c"); n != 0 {
				t.Fatalf("usr_c has %d files", n)
			}
		})

		t.Run("expired challenge", func(t *testing.T) {
			res, _ := e.svc.Init(ctx, "usr_e", req)
			e.clock.Advance(6 * time.Minute)
			defer e.clock.Advance(-6 * time.Minute)
			_, err := e.svc.Prove(ctx, "usr_e", res.Challenge.ID, digests(data, res.Challenge))
			wantKind(t, err, errkind.Gone, "challenge_expired")
		})

		t.Run("forged hash claim", func(t *testing.T) {
			// usr_f claims the hash of content nobody has and sends other
			// bytes; the claim never becomes anyone's instant upload.
			secret := randomBytes(5 * mib)
			claim := upload.InitRequest{FileName: "forged", Size: int64(len(secret)), SHA256: sha(secret)}
			res, err := e.svc.Init(ctx, "usr_f", claim)
			if err != nil || res.Outcome != upload.Created {
				t.Fatal(res.Outcome, err)
			}
			forger := newClient(t, e, "usr_f")
			sent := randomBytes(5 * mib)
			forger.send(res.Upload, sent, []int{1}, true)
			if _, err := e.svc.Complete(ctx, "usr_f", res.Upload.UploadID, upload.CompleteRequest{}); err != nil {
				t.Fatal(err)
			}
			if st := e.waitVerified("usr_f", res.Upload.UploadID, 30*time.Second); st.State != upload.StateSuccess || st.SHA256 != sha(sent) {
				t.Fatalf("forged upload ended %s with sha %s, want success with the sent bytes' sha", st.State, st.SHA256)
			}
			for _, user := range []string{"usr_f", "usr_g", "usr_a"} {
				got, err := e.svc.Init(ctx, user, claim)
				if err != nil || got.Outcome != upload.Created {
					t.Fatalf("%s init with the forged claim: %v %v, want a plain new upload", user, got.Outcome, err)
				}
			}
			// The size is part of the identity too.
			other := req
			other.Size++
			if got, _ := e.svc.Init(ctx, "usr_g", other); got.Outcome != upload.Created {
				t.Fatalf("same hash, other size: %v", got.Outcome)
			}
		})

		t.Run("files share the blob until the last goes", func(t *testing.T) {
			var files []models.File
			db.Where("sha256 = ?", sha(data)).Find(&files)
			var blob models.Blob
			db.Where("sha256 = ?", sha(data)).Take(&blob)
			if len(files) != 4 || blob.Refs != 4 {
				t.Fatalf("%d files and %d refs, want 4 and 4", len(files), blob.Refs)
			}
			for i, f := range files {
				if err := e.svc.DeleteFile(ctx, f.UserID, f.ID); err != nil {
					t.Fatal(err)
				}
				if i < len(files)-1 {
					if _, err := e.store.Head(ctx, blob.S3Key); err != nil {
						t.Fatalf("object gone while %d files remain: %v", len(files)-1-i, err)
					}
				}
			}
			if n := e.count("blobs", "id = ?", blob.ID); n != 0 {
				t.Fatal("blob row outlived its files")
			}
			e.waitGone(blob.S3Key, 10*time.Second)
			if err := e.svc.DeleteFile(ctx, files[0].UserID, files[0].ID); !errors.Is(err, errkind.NotFound) {
				t.Fatalf("second delete: %v", err)
			}
		})
	})
}

// digests answers a challenge the way an honest client holding data does.
func digests(data []byte, ch *upload.Challenge) []string {
	nonce, err := hex.DecodeString(ch.Nonce)
	if err != nil {
		panic(err)
	}
	out := make([]string, len(ch.Ranges))
	for i, r := range ch.Ranges {
		out[i] = upload.ProofDigest(nonce, data[r.Offset:r.Offset+r.Length])
	}
	return out
}

// Two uploads of the same content race past the dedup check: both end as
// files on one blob, and the second copy of the bytes is deleted.
func TestConcurrentSameContentSharesOneBlob(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil)
		ctx := context.Background()
		data := randomBytes(5*mib + 1)
		var ids []string
		for _, user := range []string{"usr_a", "usr_b"} {
			st := newClient(t, e, user).uploadAll("same.bin", data, true)
			ids = append(ids, st.UploadID)
		}
		e.run(t, 5*time.Second)
		for i, user := range []string{"usr_a", "usr_b"} {
			if st := e.waitVerified(user, ids[i], 30*time.Second); st.State != upload.StateSuccess {
				t.Fatalf("%s: %+v", user, st)
			}
		}
		var blob models.Blob
		if err := db.Take(&blob).Error; err != nil || blob.Refs != 2 {
			t.Fatalf("blob %+v %v, want one with 2 refs", blob, err)
		}
		for _, id := range ids {
			if key := "uploads/" + id; key != blob.S3Key {
				e.waitGone(key, 10*time.Second)
			}
		}
		if b := e.bucket(); len(b.Objects) != 1 {
			t.Fatalf("objects = %v, want only the blob's", b.Objects)
		}
		files, _, err := e.svc.Files(ctx, "usr_b", "", 10)
		if err != nil || len(files) != 1 || files[0].SHA256 != sha(data) {
			t.Fatalf("usr_b files = %+v %v", files, err)
		}
	})
}

// Done-when 8: S3 refuses an expired part URL; signing again works.
func TestExpiredPartURL(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		// SigV4 dates have whole seconds, so a URL signed for 3 s lasts
		// 2-3 s: enough for the fresh one to be used, short for the test.
		e := newEnv(t, db, func(c *testConfig) { c.PresignTTL = 3 * time.Second })
		c := newClient(t, e, "usr_a")
		data := randomBytes(1000)
		st := c.init("small.txt", data, true, 0).Upload
		old := c.presign(st.UploadID, []int{1}, nil)[1]
		time.Sleep(3100 * time.Millisecond)
		if code, _ := c.put(old, bytes.NewReader(data), int64(len(data))); code != http.StatusForbidden {
			t.Fatalf("expired URL: %d, want 403", code)
		}
		fresh := c.presign(st.UploadID, []int{1}, nil)[1]
		if code, _ := c.put(fresh, bytes.NewReader(data), int64(len(data))); code != http.StatusOK {
			t.Fatalf("re-signed URL: %d, want 200", code)
		}
		now, _ := e.svc.Status(context.Background(), "usr_a", st.UploadID)
		if len(now.Parts) != 1 || now.Parts[0].Size != 1000 {
			t.Fatalf("parts = %+v", now.Parts)
		}
	})
}

// Done-when 9: a part URL signed with the part's Content-MD5 is refused
// for a corrupted body.
func TestPinnedContentMD5(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil)
		c := newClient(t, e, "usr_a")
		data := randomBytes(5*mib + 5)
		st := c.init("pinned.bin", data, true, 5*mib).Upload
		body := partBytes(st, data, 1)
		url := c.presign(st.UploadID, []int{1}, map[int]string{1: md5b64(body)})[1]
		if url.Headers["Content-Md5"] != md5b64(body) {
			t.Fatalf("headers to send = %v, want the pinned Content-MD5", url.Headers)
		}
		bad := append([]byte{}, body...)
		bad[12345] ^= 0xff
		if code, _ := c.put(url, bytes.NewReader(bad), int64(len(bad))); code != http.StatusBadRequest {
			t.Fatalf("corrupted body: %d, want 400 (BadDigest)", code)
		}
		if now, _ := e.svc.Status(context.Background(), "usr_a", st.UploadID); len(now.Parts) != 0 {
			t.Fatalf("S3 kept the corrupted part: %+v", now.Parts)
		}
		if code, _ := c.put(url, bytes.NewReader(body), int64(len(body))); code != http.StatusOK {
			t.Fatalf("right body: %d", code)
		}
	})
}

// Done-when 10: status lists every part past S3's 1,000-per-page limit.
func TestStatusPaginatesParts(t *testing.T) {
	if testing.Short() {
		t.Skip("uploads 1,050 parts")
	}
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil)
		ctx := context.Background()
		c := newClient(t, e, "usr_a")
		const n = 1050
		res, err := e.svc.Init(ctx, "usr_a", upload.InitRequest{FileName: "many", Size: n * 5 * mib, PartSize: 5 * mib})
		if err != nil || res.Upload.PartCount != n {
			t.Fatalf("init: %+v %v", res.Upload, err)
		}
		st := res.Upload
		// ferry's URLs carry each part's size; 1-byte parts (to keep the
		// test small) need URLs signed straight through S3.
		urls := map[int]upload.PresignedPart{}
		for _, p := range allParts(st) {
			urls[p] = c.presignRaw(st.UploadID, p)
		}
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for _, p := range allParts(st) {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if code, _ := c.put(urls[p], strings.NewReader("x"), 1); code != 200 {
					t.Errorf("part %d: %d", p, code)
				}
			}()
		}
		wg.Wait()
		now, err := e.svc.Status(ctx, "usr_a", st.UploadID)
		if err != nil || len(now.Parts) != n {
			t.Fatalf("status: %d parts, %v; want %d", len(now.Parts), err, n)
		}
		for i, p := range now.Parts {
			if p.Number != i+1 || p.Size != 1 {
				t.Fatalf("part %d = %+v", i, p)
			}
		}
		if m := missing(now); len(m) != 0 {
			t.Fatalf("missing = %v", m)
		}
		if _, err := e.svc.Abort(ctx, "usr_a", st.UploadID); err != nil {
			t.Fatal(err)
		}
	})
}

// Complete refuses missing and wrongly sized parts with a 409 that lists
// them, and leaves the upload resumable; once accepted, the upload is
// still what Init and Find answer for its content until it is merged.
func TestCompleteNamesMissingAndBadParts(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil)
		ctx := context.Background()
		c := newClient(t, e, "usr_a")
		data := randomBytes(3*5*mib + 10) // 4 parts
		st := c.init("f", data, true, 5*mib).Upload
		c.send(st, data, []int{1, 4}, false)
		// ferry's own URL refuses a body of the wrong size; a URL signed
		// without one (an older ferry, a misbehaving signer) does not,
		// and complete still catches the part.
		if code, _ := c.put(c.presign(st.UploadID, []int{2}, nil)[2], strings.NewReader("too short"), 9); code != 403 {
			t.Fatalf("a short part through ferry's URL: %d, want 403", code)
		}
		c.put(c.presignRaw(st.UploadID, 2), strings.NewReader("too short"), 9)
		_, err := e.svc.Complete(ctx, "usr_a", st.UploadID, upload.CompleteRequest{})
		ke := wantKind(t, err, errkind.Conflict, "parts_incomplete")
		if fmt.Sprint(ke.Fields["missing_parts"]) != "[3]" || fmt.Sprint(ke.Fields["bad_parts"]) != "[2]" {
			t.Fatalf("fields = %v", ke.Fields)
		}
		if u := e.upload(st.UploadID); u.State != upload.StateUploading || e.count("jobs", "1 = 1") != 0 {
			t.Fatalf("a refused complete changed the upload (%s) or queued a job", u.State)
		}
		c.send(st, data, []int{2, 3}, false)
		if got, err := e.svc.Complete(ctx, "usr_a", st.UploadID, upload.CompleteRequest{}); err != nil || got.State != upload.StatePending {
			t.Fatalf("complete = %+v %v", got, err)
		}
		if _, err := e.svc.Presign(ctx, "usr_a", st.UploadID, upload.PresignRequest{Parts: []int{1}}); !errors.Is(err, errkind.Conflict) {
			t.Fatalf("presign while pending: %v, want 409", err)
		}
		// A client that lost track after complete finds the upload to poll.
		if res := c.init("f", data, true, 0); res.Outcome != upload.Resumed || res.Upload.UploadID != st.UploadID || res.Upload.State != upload.StatePending {
			t.Fatalf("init while pending = %v %s %s", res.Outcome, res.Upload.UploadID, res.Upload.State)
		}
		if found, err := e.svc.Find(ctx, "usr_a", sha(data), int64(len(data))); err != nil || found.State != upload.StatePending {
			t.Fatalf("find while pending = %+v %v", found, err)
		}
	})
}

// Files pages newest first with an opaque cursor.
func TestFilesPaging(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil)
		e.run(t, 5*time.Second)
		ctx := context.Background()
		data := randomBytes(1000)
		st := newClient(t, e, "usr_a").uploadAll("f0", data, true)
		e.waitVerified("usr_a", st.UploadID, 30*time.Second)
		for i := 1; i < 5; i++ {
			e.clock.Advance(time.Millisecond) // distinct times, like real life
			res, err := e.svc.Init(ctx, "usr_a", upload.InitRequest{FileName: fmt.Sprintf("f%d", i), Size: 1000, SHA256: sha(data)})
			if err != nil || res.Outcome != upload.Instant {
				t.Fatal(res.Outcome, err)
			}
		}
		var names []string
		cursor := ""
		for page := 0; page < 5; page++ {
			files, next, err := e.svc.Files(ctx, "usr_a", cursor, 2)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				names = append(names, f.Name)
			}
			if next == "" {
				break
			}
			cursor = next
		}
		if fmt.Sprint(names) != "[f4 f3 f2 f1 f0]" {
			t.Fatalf("pages gave %v", names)
		}
		if _, _, err := e.svc.Files(ctx, "usr_a", "bogus!", 2); !errors.Is(err, errkind.Invalid) {
			t.Fatalf("bad cursor: %v", err)
		}
		if files, _, _ := e.svc.Files(ctx, "usr_b", "", 10); len(files) != 0 {
			t.Fatalf("usr_b sees %d files", len(files))
		}
	})
}

// Presigning keeps an upload alive, but a client presigning batch after
// batch does not rewrite the row on every call: an expiry already close to
// the one presigning would set is kept.
func TestPresignKeepsUploadAliveWithoutRewriting(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, func(c *testConfig) { c.TTL = time.Hour })
		ctx := context.Background()
		c := newClient(t, e, "usr_a")
		st := c.init("f", randomBytes(6*mib), false, 5*mib).Upload
		first := e.upload(st.UploadID)

		e.clock.Advance(10 * time.Second)
		if _, err := e.svc.Presign(ctx, "usr_a", st.UploadID, upload.PresignRequest{Parts: []int{1}}); err != nil {
			t.Fatal(err)
		}
		if u := e.upload(st.UploadID); !u.UpdatedAt.Equal(first.UpdatedAt) || !u.ExpiresAt.Equal(first.ExpiresAt) {
			t.Fatalf("a presign 10 s later rewrote the row: expiry %v -> %v", first.ExpiresAt, u.ExpiresAt)
		}

		e.clock.Advance(20 * time.Minute)
		if _, err := e.svc.Presign(ctx, "usr_a", st.UploadID, upload.PresignRequest{Parts: []int{2}}); err != nil {
			t.Fatal(err)
		}
		if u := e.upload(st.UploadID); !u.ExpiresAt.After(first.ExpiresAt.Add(19 * time.Minute)) {
			t.Fatalf("a presign 20 min later left the expiry at %v (was %v)", u.ExpiresAt, first.ExpiresAt)
		}
	})
}
