package upload_test

import (
	"bytes"
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/s3store"
	"github.com/ferry-io/ferry/upload"
)

// headCRC32C is what a client sends as head_crc32c: the base64 big-endian
// CRC32C of the first min(size, upload.HeadLength) bytes.
func headCRC32C(data []byte) string {
	return s3store.CRC32C(data[:min(len(data), upload.HeadLength)])
}

// TestInstantCandidateByHead: a client that sends the head CRC32C of its
// file, and no SHA-256, is told whether hashing can pay off. Only content
// ferry verified counts (a claim or an unverified upload never does), the
// hint needs the same size and head, and declaring the SHA-256 then gives
// the instant file or the proof as before.
func TestInstantCandidateByHead(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e, verify := newHeldEnv(t, db)
		e.run(t, 5*time.Second)
		ctx := context.Background()
		data := randomBytes(upload.HeadLength + 3*mib) // the head is a prefix, not the file
		init := func(user string, d []byte) upload.InitResult {
			t.Helper()
			res, err := e.svc.Init(ctx, user, upload.InitRequest{FileName: "f.bin", Size: int64(len(d)), HeadCRC32C: headCRC32C(d)})
			if err != nil {
				t.Fatalf("init: %v", err)
			}
			return res
		}
		owner := newClient(t, e, "usr_a")
		st := owner.uploadAll("a.bin", data, true) // declares a SHA-256: a claim only
		if got := e.waitDone("usr_a", st.UploadID, 30*time.Second); got.State != upload.StateSuccess {
			t.Fatalf("upload = %+v", got)
		}
		if res := init("usr_b", data); res.Upload.InstantCandidate {
			t.Fatal("content merged but not yet verified is a candidate: a claim must never count")
		}
		verify()
		e.waitVerified("usr_a", st.UploadID, 30*time.Second)
		if n := e.count("blobs", "head_crc32c = ?", headCRC32C(data)); n != 1 {
			t.Fatalf("blobs with the file's head = %d, want 1", n)
		}
		// The same read recorded the whole object's CRC32C, which the
		// download proxy sends as Repr-Digest.
		if n := e.count("blobs", "crc32c = ?", s3store.CRC32C(data)); n != 1 {
			t.Fatalf("blobs with the file's CRC32C = %d, want 1", n)
		}

		// Same size, same head, other bytes after it: still a candidate
		// (the SHA-256 decides), and declaring the true hash gets no file.
		twin := append(append([]byte{}, data[:upload.HeadLength]...), randomBytes(3*mib)...)
		res := init("usr_b", twin)
		if res.Outcome != upload.Created || !res.Upload.InstantCandidate {
			t.Fatalf("twin head: %v candidate=%v, want a new upload marked as a candidate", res.Outcome, res.Upload.InstantCandidate)
		}
		got, err := e.svc.DeclareSHA256(ctx, "usr_b", res.Upload.UploadID, sha(twin))
		if err != nil || got.Outcome != upload.Resumed {
			t.Fatalf("declare the twin's hash = %v %v, want the upload to go on", got.Outcome, err)
		}

		for name, d := range map[string][]byte{
			"other head":            append(randomBytes(upload.HeadLength), data[upload.HeadLength:]...),
			"other size, same head": data[:len(data)-1],
		} {
			if res := init("usr_c", d); res.Upload.InstantCandidate {
				t.Fatalf("%s: marked as a candidate", name)
			}
		}

		// The owner is told, and declaring gives the file at once.
		res = init("usr_a", data)
		if !res.Upload.InstantCandidate {
			t.Fatal("the owner's init with the head of a verified file is no candidate")
		}
		got, err = e.svc.DeclareSHA256(ctx, "usr_a", res.Upload.UploadID, sha(data))
		if err != nil || got.Outcome != upload.Instant {
			t.Fatalf("owner declares = %v %v, want Instant", got.Outcome, err)
		}
		// Anyone else gets a proof to make.
		res = init("usr_d", data)
		if !res.Upload.InstantCandidate {
			t.Fatal("another user's init is no candidate")
		}
		got, err = e.svc.DeclareSHA256(ctx, "usr_d", res.Upload.UploadID, sha(data))
		if err != nil || got.Outcome != upload.ProofRequired {
			t.Fatalf("other user declares = %v %v, want ProofRequired", got.Outcome, err)
		}

		// A malformed head is a 400, and changes nothing.
		before := e.count("uploads", "1 = 1")
		_, err = e.svc.Init(ctx, "usr_a", upload.InitRequest{FileName: "x", Size: 10, HeadCRC32C: "not base64"})
		wantKind(t, err, errkind.Invalid, "invalid_head_crc32c")
		if after := e.count("uploads", "1 = 1"); after != before {
			t.Fatalf("uploads %d → %d after a refused init", before, after)
		}
	})
}

// TestVerifyRecordsTheObjectCRC32C: the verify job records the whole
// object's CRC32C with its SHA-256, Stored hands it to the download
// proxy, and a blob verified before blobs kept their CRC32Cs gets them
// when a later upload of its content is verified and shares it.
func TestVerifyRecordsTheObjectCRC32C(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil)
		e.run(t, 5*time.Second)
		ctx := context.Background()
		data := randomBytes(upload.HeadLength + 2*mib + 7)
		first := newClient(t, e, "usr_a").uploadAll("a.bin", data, false)
		e.waitVerified("usr_a", first.UploadID, 30*time.Second)
		f, err := e.svc.Stored(ctx, e.waitDone("usr_a", first.UploadID, time.Second).FileID)
		if err != nil || f.CRC32C != s3store.CRC32C(data) {
			t.Fatalf("stored file CRC32C %q, %v; want %q", f.CRC32C, err, s3store.CRC32C(data))
		}

		// As if verified before migration 0019 (and 0018).
		if err := e.db.Exec("UPDATE blobs SET crc32c = NULL, head_crc32c = NULL").Error; err != nil {
			t.Fatal(err)
		}
		second := newClient(t, e, "usr_b").uploadAll("b.bin", data, false)
		e.waitVerified("usr_b", second.UploadID, 30*time.Second)
		if n := e.count("blobs", "1 = 1"); n != 1 {
			t.Fatalf("%d blobs, want the second upload to share the first's", n)
		}
		if n := e.count("blobs", "crc32c = ? AND head_crc32c = ?", s3store.CRC32C(data), headCRC32C(data)); n != 1 {
			t.Fatal("the shared blob did not get its CRC32Cs back")
		}
	})
}

// TestVerifyReusesItsBuffer: verifying a file after another allocates far
// less than the 4 MiB chunk verification reads into, because the first
// one's buffer is kept for it (see verifyObject's chunk).
func TestVerifyReusesItsBuffer(t *testing.T) {
	db := testenv.NewDB(t, models.SQLite)
	e := newEnv(t, db, nil)
	ctx := context.Background()
	data := randomBytes(upload.VerifyChunk + mib)
	key := "verify-reuse.bin"
	if err := e.store.Put(ctx, key, bytes.NewReader(data), int64(len(data)), ""); err != nil {
		t.Fatal(err)
	}
	verify := func() uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		sum, n, err := e.svc.VerifyObject(ctx, key)
		runtime.ReadMemStats(&after)
		if err != nil || n != int64(len(data)) || sum != sha(data) {
			t.Fatalf("verify: %d bytes, %s, %v; want %d bytes, %s", n, sum, err, len(data), sha(data))
		}
		return after.TotalAlloc - before.TotalAlloc
	}
	first := verify()
	if first < upload.VerifyChunk {
		t.Fatalf("the first verification allocated %d bytes, less than its %d-byte buffer", first, upload.VerifyChunk)
	}
	for i := range 3 {
		if got := verify(); got > upload.VerifyChunk/4 {
			t.Fatalf("verification %d allocated %d bytes; want the first one's buffer reused (at most %d)", i+2, got, upload.VerifyChunk/4)
		}
	}
}
