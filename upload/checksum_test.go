package upload_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/notify"
	"github.com/ferry-io/ferry/s3store"
	"github.com/ferry-io/ferry/upload"
)

// withChecksums is the configuration of a store that verifies CRC32C.
func withChecksums(c *testConfig) { c.Checksums = true }

func crcs(st upload.Status, data []byte, parts []int) map[int]string {
	out := map[int]string{}
	for _, n := range parts {
		out[n] = s3store.CRC32C(partBytes(st, data, n))
	}
	return out
}

// initChecked starts an upload of data with CRC32C checksums, in parts of
// partSize (0 for the server's choice), and fails the test unless the
// server granted them.
func (c *client) initChecked(name string, data []byte, partSize int64) upload.Status {
	c.t.Helper()
	res, err := c.svc.Init(context.Background(), c.user, upload.InitRequest{FileName: name, Size: int64(len(data)), PartSize: partSize, Checksum: "CRC32C"})
	if err != nil || res.Upload.Checksum != s3store.ChecksumCRC32C {
		c.t.Fatalf("init %s = %+v %v, want checksum CRC32C granted", name, res.Upload, err)
	}
	return res.Upload
}

// sendChecked presigns parts with their CRC32Cs and PUTs them.
func (c *client) sendChecked(st upload.Status, data []byte, parts []int) {
	c.t.Helper()
	urls, err := c.svc.Presign(context.Background(), c.user, st.UploadID, upload.PresignRequest{Parts: parts, CRC32C: crcs(st, data, parts)})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, n := range parts {
		body := partBytes(st, data, n)
		if code, msg := c.put(urls[n], bytes.NewReader(body), int64(len(body))); code != 200 {
			c.t.Fatalf("PUT part %d: %d %s", n, code, msg)
		}
	}
}

// With checksums, S3 itself checks every part against the CRC32C signed
// into its URL and the whole file against the client's CRC32C at
// completion: a wrong part is refused at the door, a wrong whole fails the
// upload with no file; the right ones make a file at once, before ferry has
// read a byte back, whose SHA-256 is verified in the background.
func TestChecksummedUpload(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, withChecksums)
		e.run(t, 5*time.Second)
		ctx := context.Background()
		c := newClient(t, e, "usr_a")
		data := randomBytes(2*5*mib + 77)

		st := c.initChecked("c.bin", data, 5*mib)
		// Every part needs its CRC32C, and gets it signed in.
		_, err := e.svc.Presign(ctx, "usr_a", st.UploadID, upload.PresignRequest{Parts: []int{1}})
		wantKind(t, err, errkind.Invalid, "missing_checksum")
		body := partBytes(st, data, 1)
		urls, err := e.svc.Presign(ctx, "usr_a", st.UploadID, upload.PresignRequest{Parts: []int{1}, CRC32C: map[int]string{1: s3store.CRC32C(body)}})
		if err != nil {
			t.Fatal(err)
		}
		bad := append([]byte{}, body...)
		bad[12345] ^= 1
		if code, msg := c.put(urls[1], bytes.NewReader(bad), int64(len(bad))); code != 400 {
			t.Fatalf("a corrupted part: %d %s, want 400 BadDigest", code, msg)
		}
		c.sendChecked(st, data, allParts(st))
		now, err := e.svc.Status(ctx, "usr_a", st.UploadID)
		if err != nil || len(now.Parts) != 3 || now.Parts[0].CRC32C != s3store.CRC32C(body) {
			t.Fatalf("status = %+v %v, want parts with their CRC32C", now.Parts, err)
		}

		// The whole file's CRC32C is required, and checked by S3.
		_, err = e.svc.Complete(ctx, "usr_a", st.UploadID, upload.CompleteRequest{})
		wantKind(t, err, errkind.Invalid, "missing_checksum")
		wrong := s3store.CRC32C(append(append([]byte{}, data...), 0))
		if _, err := e.svc.Complete(ctx, "usr_a", st.UploadID, upload.CompleteRequest{CRC32C: wrong}); err != nil {
			t.Fatal(err)
		}
		failed := e.waitDone("usr_a", st.UploadID, 30*time.Second)
		if failed.State != upload.StateFailed || failed.FileID != "" || e.count("files", "upload_id = ?", st.UploadID) != 0 {
			t.Fatalf("a wrong full-object checksum: %+v, want failed with no file", failed)
		}
		if n := e.count("outbox", "subject = ? AND type = ?", st.UploadID, notify.UploadFailed); n != 1 {
			t.Fatalf("upload.failed events = %d", n)
		}

		// The right one.
		// The algorithm's name is case-insensitive.
		res, err := e.svc.Init(ctx, "usr_a", upload.InitRequest{FileName: "c.bin", Size: int64(len(data)), PartSize: 5 * mib, Checksum: "crc32c"})
		if err != nil || res.Upload.Checksum != s3store.ChecksumCRC32C {
			t.Fatalf("init = %+v %v, want checksum CRC32C granted", res.Upload, err)
		}
		st = res.Upload
		c.sendChecked(st, data, allParts(st))
		if _, err := e.svc.Complete(ctx, "usr_a", st.UploadID, upload.CompleteRequest{CRC32C: s3store.CRC32C(data), SHA256: sha(data)}); err != nil {
			t.Fatal(err)
		}
		done := e.waitVerified("usr_a", st.UploadID, 30*time.Second)
		if done.State != upload.StateSuccess || done.SHA256 != sha(data) {
			t.Fatalf("final = %+v", done)
		}
		if got, _ := e.objectSHA("uploads/" + st.UploadID); got != sha(data) {
			t.Fatal("the object is not the file")
		}
	})
}

// From success on, the file is listed and its owner may read it; until
// ferry has hashed it, its sha256 is the client's claim marked unverified,
// the content is not in the dedup index, and nobody else can be served it.
// upload.completed waits for the verification and carries the true hash.
func TestSuccessBeforeVerification(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e, verify := newHeldEnv(t, db, withChecksums)
		e.run(t, 5*time.Second)
		ctx := context.Background()
		c := newClient(t, e, "usr_a")
		data := randomBytes(5*mib + 3)
		st := c.initChecked("early.bin", data, 0)
		c.sendChecked(st, data, allParts(st))
		claim := sha([]byte("a claim"))
		if _, err := e.svc.Complete(ctx, "usr_a", st.UploadID, upload.CompleteRequest{CRC32C: s3store.CRC32C(data), SHA256: claim}); err != nil {
			t.Fatal(err)
		}
		done := e.waitDone("usr_a", st.UploadID, 30*time.Second)
		if done.State != upload.StateSuccess || done.SHA256Verified || done.FileID == "" {
			t.Fatalf("at success: %+v, want a file not yet verified", done)
		}
		f, err := e.svc.File(ctx, "usr_a", done.FileID)
		if err != nil || f.SHA256 != claim || f.SHA256Verified {
			t.Fatalf("file before verification = %+v %v, want the claim, unverified", f, err)
		}
		stored, _ := e.svc.Stored(ctx, done.FileID)
		if !stored.Readable("usr_a") || stored.Readable("usr_b") {
			t.Fatal("before verification the file must reach its owner and nobody else")
		}
		if n := e.count("blobs", "sha256 IS NOT NULL"); n != 0 {
			t.Fatal("unverified content is in the dedup index")
		}
		// The merge keeps the CRC32C S3 checked the object against, so
		// the verify job has only the SHA-256 to compute.
		if n := e.count("blobs", "crc32c = ? AND s3_etag <> ''", s3store.CRC32C(data)); n != 1 {
			t.Fatal("the merged blob lacks the whole-object CRC32C S3 checked")
		}
		if n := e.count("outbox", "type = ?", notify.UploadCompleted); n != 0 {
			t.Fatal("upload.completed was sent before verification")
		}
		if r, _ := e.svc.Init(ctx, "usr_b", upload.InitRequest{FileName: "x", Size: int64(len(data)), SHA256: claim}); r.Outcome != upload.Created {
			t.Fatalf("the unverified claim gave %v", r.Outcome)
		}
		verify()
		v := e.waitVerified("usr_a", st.UploadID, 30*time.Second)
		f, _ = e.svc.File(ctx, "usr_a", v.FileID)
		stored, _ = e.svc.Stored(ctx, v.FileID)
		if v.SHA256 != sha(data) || !f.SHA256Verified || f.SHA256 != sha(data) || !stored.Readable("usr_b") || stored.CRC32C != s3store.CRC32C(data) {
			t.Fatalf("after verification: %+v %+v %+v", v, f, stored)
		}
		if ev := e.eventData(st.UploadID, notify.UploadCompleted); ev.SHA256 != sha(data) {
			t.Fatalf("upload.completed carries %s, want the computed %s", ev.SHA256, sha(data))
		}
	})
}

// A merge that finds its upload completed already (an earlier attempt
// died between S3's CompleteMultipartUpload and recording it) cannot vouch
// that S3 checked the whole file's CRC32C: the verify job computes it
// from the object instead, and the file carries the right one.
func TestMergeRerunComputesTheCRC32C(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e, verify := newHeldEnv(t, db, withChecksums)
		ctx := context.Background()
		c := newClient(t, e, "usr_a")
		data := randomBytes(2*5*mib + 11)
		st := c.initChecked("r.bin", data, 5*mib)
		c.sendChecked(st, data, allParts(st))
		if _, err := e.svc.Complete(ctx, "usr_a", st.UploadID, upload.CompleteRequest{CRC32C: s3store.CRC32C(data)}); err != nil {
			t.Fatal(err)
		}
		// The first attempt's CompleteMultipartUpload, before any worker
		// runs the merge job.
		u := e.upload(st.UploadID)
		parts, err := e.store.ListParts(ctx, u.S3Key, u.S3UploadID)
		if err != nil {
			t.Fatal(err)
		}
		cps := make([]s3store.CompletedPart, len(parts))
		for i, p := range parts {
			cps[i] = s3store.CompletedPart{Number: p.Number, ETag: p.ETag, CRC32C: p.CRC32C}
		}
		if _, err := e.store.CompleteMultipart(ctx, u.S3Key, u.S3UploadID, cps, s3store.CRC32C(data)); err != nil {
			t.Fatal(err)
		}

		e.run(t, 5*time.Second)
		done := e.waitDone("usr_a", st.UploadID, 30*time.Second)
		if done.State != upload.StateSuccess {
			t.Fatalf("rerun merge: %+v", done)
		}
		if n := e.count("blobs", "crc32c IS NULL"); n != 1 {
			t.Fatal("the rerun merge recorded a CRC32C it did not see S3 check")
		}
		verify()
		v := e.waitVerified("usr_a", st.UploadID, 30*time.Second)
		stored, err := e.svc.Stored(ctx, v.FileID)
		if err != nil || stored.CRC32C != s3store.CRC32C(data) || v.SHA256 != sha(data) {
			t.Fatalf("verified file = %+v %v, want CRC32C %s", stored, err, s3store.CRC32C(data))
		}
	})
}

// A client that has not hashed the file finds its unfinished upload again
// by size, part size and the first part's CRC32C, and learns which parts
// S3 holds with their CRC32Cs; declaring the SHA-256 as soon as it knows it
// turns the upload into an instant one when the caller already owns the
// content, asks for a proof when someone else does, and otherwise is kept
// for the verification.
func TestResumeAndDeclareWithoutHashingFirst(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, withChecksums)
		e.run(t, 5*time.Second)
		ctx := context.Background()
		c := newClient(t, e, "usr_a")
		data := randomBytes(3*5*mib + 9)
		first := s3store.CRC32C(data[:5*mib])
		req := upload.InitRequest{FileName: "r.bin", Size: int64(len(data)), PartSize: 5 * mib, Checksum: "CRC32C", FirstPartCRC32C: first}
		res, err := e.svc.Init(ctx, "usr_a", req)
		if err != nil || res.Outcome != upload.Created {
			t.Fatal(res.Outcome, err)
		}
		st := res.Upload
		c.sendChecked(st, data, []int{1, 3})
		again, err := e.svc.Init(ctx, "usr_a", req)
		if err != nil || again.Outcome != upload.Resumed || again.Upload.UploadID != st.UploadID || len(again.Upload.Parts) != 2 {
			t.Fatalf("second init = %v %+v %v, want the same upload with 2 parts", again.Outcome, again.Upload, err)
		}
		for _, p := range again.Upload.Parts {
			if p.CRC32C != s3store.CRC32C(partBytes(st, data, p.Number)) {
				t.Fatalf("part %d lists CRC32C %s", p.Number, p.CRC32C)
			}
		}
		if other, _ := e.svc.Init(ctx, "usr_b", req); other.Outcome != upload.Created {
			t.Fatal("another user's hint found usr_a's upload")
		}

		// Nobody holds the content: the declared hash is kept.
		dec, err := e.svc.DeclareSHA256(ctx, "usr_a", st.UploadID, sha(data))
		if err != nil || dec.Outcome != upload.Resumed || dec.Upload.SHA256 != sha(data) {
			t.Fatalf("declare = %v %+v %v", dec.Outcome, dec.Upload, err)
		}
		_, err = e.svc.DeclareSHA256(ctx, "usr_a", st.UploadID, sha([]byte("x")))
		wantKind(t, err, errkind.Conflict, "sha256_mismatch")
		if f, err := e.svc.Find(ctx, "usr_a", sha(data), int64(len(data))); err != nil || f.UploadID != st.UploadID {
			t.Fatalf("find by the declared hash: %+v %v", f, err)
		}
		c.sendChecked(st, data, []int{2, 4})
		if _, err := e.svc.Complete(ctx, "usr_a", st.UploadID, upload.CompleteRequest{CRC32C: s3store.CRC32C(data)}); err != nil {
			t.Fatal(err)
		}
		if v := e.waitVerified("usr_a", st.UploadID, 30*time.Second); v.SHA256 != sha(data) {
			t.Fatalf("final = %+v", v)
		}

		// Now usr_a owns it: a new upload of the same file, declared
		// mid-way, becomes instant and the running upload is aborted.
		res, _ = e.svc.Init(ctx, "usr_a", upload.InitRequest{FileName: "r2.bin", Size: int64(len(data)), Checksum: "CRC32C"})
		dec, err = e.svc.DeclareSHA256(ctx, "usr_a", res.Upload.UploadID, sha(data))
		if err != nil || dec.Outcome != upload.Instant || dec.Upload.FileID == "" {
			t.Fatalf("declare by the owner = %v %v", dec.Outcome, err)
		}
		if u := e.upload(res.Upload.UploadID); u.State != upload.StateAborted {
			t.Fatalf("the running upload is %s, want aborted", u.State)
		}
		// usr_b does not own it: a proof is asked for.
		res, _ = e.svc.Init(ctx, "usr_b", upload.InitRequest{FileName: "b.bin", Size: int64(len(data)), Checksum: "CRC32C"})
		dec, err = e.svc.DeclareSHA256(ctx, "usr_b", res.Upload.UploadID, sha(data))
		if err != nil || dec.Outcome != upload.ProofRequired {
			t.Fatalf("declare by another user = %v %v", dec.Outcome, err)
		}
		got, err := e.svc.Prove(ctx, "usr_b", dec.Challenge.ID, digests(data, dec.Challenge))
		if err != nil || got.Outcome != upload.Instant {
			t.Fatalf("prove = %v %v", got.Outcome, err)
		}
	})
}

// A store without checksums (or a client that does not ask) gets none: the
// upload falls back to Content-MD5 per part, and a CRC32C is refused
// rather than signed into a URL S3 would then reject.
func TestChecksumFallback(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil) // Checksums: false, as for a store the probe found lacking
		ctx := context.Background()
		res, err := e.svc.Init(ctx, "usr_a", upload.InitRequest{FileName: "f", Size: 100, Checksum: "CRC32C"})
		if err != nil || res.Upload.Checksum != "" {
			t.Fatalf("init = %+v %v, want no checksum granted", res.Upload, err)
		}
		_, err = e.svc.Presign(ctx, "usr_a", res.Upload.UploadID, upload.PresignRequest{Parts: []int{1}, CRC32C: map[int]string{1: s3store.CRC32C([]byte("x"))}})
		wantKind(t, err, errkind.Invalid, "invalid_checksum_crc32c")
		_, err = e.svc.Init(ctx, "usr_a", upload.InitRequest{FileName: "f", Size: 100, Checksum: "MD5"})
		wantKind(t, err, errkind.Invalid, "invalid_checksum_algorithm")
		if _, err := e.svc.Presign(ctx, "usr_a", res.Upload.UploadID, upload.PresignRequest{Parts: []int{1}, ContentMD5: map[int]string{1: md5b64(make([]byte, 100))}}); err != nil {
			t.Fatalf("the Content-MD5 fallback: %v", err)
		}
	})
}

// WaitStatus answers as soon as the merge is done, not at the end of the
// wait.
func TestWaitStatusAnswersOnChange(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, withChecksums)
		ctx := context.Background()
		c := newClient(t, e, "usr_a")
		data := randomBytes(1000)
		res, _ := e.svc.Init(ctx, "usr_a", upload.InitRequest{FileName: "w", Size: int64(len(data)), Checksum: "CRC32C"})
		c.sendChecked(res.Upload, data, []int{1})
		if _, err := e.svc.Complete(ctx, "usr_a", res.Upload.UploadID, upload.CompleteRequest{CRC32C: s3store.CRC32C(data)}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		go func() { time.Sleep(300 * time.Millisecond); e.run(t, 5*time.Second) }()
		st, err := e.svc.WaitStatus(ctx, "usr_a", res.Upload.UploadID, 20*time.Second)
		if err != nil || st.State != upload.StateSuccess {
			t.Fatalf("wait = %+v %v", st, err)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Fatalf("wait answered after %s, not when the upload changed", took)
		}
	})
}

// A waiting call does not poll the database while its upload is merged on
// the same replica: the merge's end wakes it. Here S3's merge is held for
// a second (ten polls at waitPoll's 100 ms); the call reads the upload's
// state at most once meanwhile, and still answers success as soon as the
// merge is recorded.
func TestWaitStatusDoesNotPollDuringALocalMerge(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		var polls atomic.Int64
		err := db.DB.Callback().Query().After("gorm:query").Register("test:count_state_polls", func(tx *gorm.DB) {
			if strings.Contains(tx.Statement.SQL.String(), "SELECT `state` FROM `uploads`") {
				polls.Add(1)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		const hold = time.Second
		var during atomic.Int64
		e := newEnv(t, db, func(c *testConfig) {
			c.Checksums = true
			c.Hooks.AfterComplete = func(string) {
				before := polls.Load()
				time.Sleep(hold)
				during.Store(polls.Load() - before)
			}
		})
		ctx := context.Background()
		c := newClient(t, e, "usr_a")
		data := randomBytes(1000)
		res, err := e.svc.Init(ctx, "usr_a", upload.InitRequest{FileName: "w", Size: int64(len(data)), Checksum: "CRC32C"})
		if err != nil {
			t.Fatal(err)
		}
		c.sendChecked(res.Upload, data, []int{1})
		if _, err := e.svc.Complete(ctx, "usr_a", res.Upload.UploadID, upload.CompleteRequest{CRC32C: s3store.CRC32C(data)}); err != nil {
			t.Fatal(err)
		}
		e.run(t, 5*time.Second)
		start := time.Now()
		st, err := e.svc.WaitStatus(ctx, "usr_a", res.Upload.UploadID, 20*time.Second)
		if err != nil || st.State != upload.StateSuccess {
			t.Fatalf("wait = %+v %v", st, err)
		}
		if took := time.Since(start); took < hold || took > hold+5*time.Second {
			t.Fatalf("wait answered after %s; the merge was held %s", took, hold)
		}
		if n := during.Load(); n > 1 {
			t.Fatalf("the waiting call read the upload's state %d times while this replica merged it, want at most 1", n)
		}
	})
}

// Calls waiting on one replica for merges that run on another cost the
// database one read of all their uploads' states per poll, not one per
// call: 60 calls, 10 on each of 6 pending uploads, read them at most
// about once per waitPoll (each call read its own, ten times a second,
// before), and ferry_upload_waiting_requests counts them. When the other
// replica merges the uploads, every call answers success.
func TestWaitingCallsShareOnePoll(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		var polls atomic.Int64
		err := db.DB.Callback().Query().After("gorm:query").Register("test:count_state_reads", func(tx *gorm.DB) {
			if q := tx.Statement.SQL.String(); strings.Contains(q, "`state`") && strings.Contains(q, "FROM `uploads`") {
				polls.Add(1)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		e := newEnv(t, db, nil) // the replica that merges, once its runner starts
		cfg, reg := e.cfg, prometheus.NewRegistry()
		cfg.Registerer = reg
		waiting, err := upload.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		c := newClient(t, e, "usr_a")
		const uploads, callsEach = 6, 10
		var ids []string
		for i := range uploads {
			data := randomBytes(1000 + i)
			res, err := e.svc.Init(ctx, "usr_a", upload.InitRequest{FileName: fmt.Sprintf("w%d", i), Size: int64(len(data))})
			if err != nil {
				t.Fatal(err)
			}
			c.send(res.Upload, data, allParts(res.Upload), false)
			if _, err := e.svc.Complete(ctx, "usr_a", res.Upload.UploadID, upload.CompleteRequest{}); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, res.Upload.UploadID)
		}
		type answer struct {
			st  upload.Status
			err error
		}
		answers := make(chan answer, uploads*callsEach)
		for _, id := range ids {
			for range callsEach {
				go func() {
					st, err := waiting.WaitStatus(ctx, "usr_a", id, 30*time.Second)
					answers <- answer{st, err}
				}()
			}
		}
		// Every call has read its upload once and waits when the gauge
		// counts them all.
		for deadline := time.Now().Add(10 * time.Second); gauge(t, reg, "ferry_upload_waiting_requests") != uploads*callsEach; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("ferry_upload_waiting_requests = %v after 10s, want %d while the calls wait", gauge(t, reg, "ferry_upload_waiting_requests"), uploads*callsEach)
			}
		}
		const window = time.Second
		before := polls.Load()
		time.Sleep(window)
		n := polls.Load() - before
		t.Logf("%s: %d reads of upload states in %s while %d calls waited", db.Dialect, n, window, uploads*callsEach)
		const poll = 100 * time.Millisecond // the package's waitPoll
		if limit := int64(window/poll) + 3; n > limit {
			t.Fatalf("%d reads of upload states in %s while %d calls waited on %d uploads, want at most %d (one per %s)",
				n, window, uploads*callsEach, uploads, limit, poll)
		}
		select {
		case a := <-answers:
			t.Fatalf("a call answered before any merge: %+v %v", a.st, a.err)
		default:
		}
		if g := gauge(t, reg, "ferry_upload_waiting_requests"); g != uploads*callsEach {
			t.Fatalf("ferry_upload_waiting_requests = %v after a second more, want %d", g, uploads*callsEach)
		}
		start := time.Now()
		e.run(t, 30*time.Second)
		for range uploads * callsEach {
			select {
			case a := <-answers:
				if a.err != nil || a.st.State != upload.StateSuccess {
					t.Fatalf("wait = %+v %v, want success", a.st, a.err)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("calls still waiting %s after the merges started", time.Since(start).Round(time.Millisecond))
			}
		}
		t.Logf("%s: all %d calls answered success %s after the other replica started merging", db.Dialect, uploads*callsEach, time.Since(start).Round(time.Millisecond))
		if g := gauge(t, reg, "ferry_upload_waiting_requests"); g != 0 {
			t.Fatalf("ferry_upload_waiting_requests = %v after every call answered", g)
		}
	})
}

// gauge is the value of the unlabelled gauge name in g.
func gauge(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// Status reads the upload and then its file; a verification that commits
// in between leaves it holding the upload row as it was, with the claim.
// It must still pair sha256_verified with the hash ferry verified, never
// with the claim that hash replaced.
func TestStatusPairsVerifiedWithTheVerifiedHash(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil)
		e.run(t, 5*time.Second)
		ctx := context.Background()
		c := newClient(t, e, "usr_a")
		data := randomBytes(mib)
		claim := sha([]byte("a claim"))
		res, err := e.svc.Init(ctx, "usr_a", upload.InitRequest{FileName: "v.bin", Size: int64(len(data)), SHA256: claim})
		if err != nil {
			t.Fatal(err)
		}
		c.send(res.Upload, data, allParts(res.Upload), false)
		if _, err := e.svc.Complete(ctx, "usr_a", res.Upload.UploadID, upload.CompleteRequest{}); err != nil {
			t.Fatal(err)
		}
		e.waitVerified("usr_a", res.Upload.UploadID, 30*time.Second)
		// The upload row as a reader that loaded it just before the
		// verification committed still has it.
		if err := e.db.Table("uploads").Where("id = ?", res.Upload.UploadID).Update("sha256", claim).Error; err != nil {
			t.Fatal(err)
		}
		st, err := e.svc.Status(ctx, "usr_a", res.Upload.UploadID)
		if err != nil || !st.SHA256Verified || st.SHA256 != sha(data) {
			t.Fatalf("status = verified %v sha %s (%v), want verified with %s, never the claim", st.SHA256Verified, st.SHA256, err, sha(data))
		}
	})
}
