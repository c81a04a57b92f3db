package upload_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/upload"
)

// An attacker who knows only a file's SHA-256 and size never gets a copy
// of it, whatever its size: every digest they can compute from the hash
// (the old whole-range answer, the hash bound to the nonce, the hex text
// bound to the nonce) is refused, and an honest holder of the bytes still
// proves. Files of at most 64 KiB are the case that used to fall: each
// range was the whole file, so its digest was the file's SHA-256.
func TestProofNeedsTheBytes(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil)
		e.run(t, 5*time.Second)
		ctx := context.Background()
		for _, size := range []int{1, 45, 64 << 10, 64<<10 + 1, 10 * mib} {
			t.Run(fmt.Sprint(size), func(t *testing.T) {
				secret := randomBytes(size)
				secret[0] |= 1 // never all zeroes, which the last guess below would know
				owner := newClient(t, e, "usr_owner")
				res := owner.init("secret.bin", secret, true, 5*mib)
				owner.send(res.Upload, secret, allParts(res.Upload), true)
				if _, err := e.svc.Complete(ctx, "usr_owner", res.Upload.UploadID, upload.CompleteRequest{}); err != nil {
					t.Fatal(err)
				}
				if st := e.waitVerified("usr_owner", res.Upload.UploadID, 30*time.Second); st.State != upload.StateSuccess {
					t.Fatalf("owner's upload ended %s: %s", st.State, st.Error)
				}

				sum := sha256.Sum256(secret)
				claim := upload.InitRequest{FileName: "mine.bin", Size: int64(size), SHA256: hex.EncodeToString(sum[:])}
				attacker := fmt.Sprintf("usr_attacker_%d", size)
				guesses := map[string]func(nonce []byte, r upload.Range) string{
					"the file's sha256":        func([]byte, upload.Range) string { return hex.EncodeToString(sum[:]) },
					"nonce and the raw sha256": func(n []byte, _ upload.Range) string { return upload.ProofDigest(n, sum[:]) },
					"nonce and the hex sha256": func(n []byte, _ upload.Range) string {
						return upload.ProofDigest(n, []byte(hex.EncodeToString(sum[:])))
					},
					"sha256 of the nonce alone":   func(n []byte, _ upload.Range) string { return upload.ProofDigest(n, nil) },
					"nonce and zeroes of the len": func(n []byte, r upload.Range) string { return upload.ProofDigest(n, make([]byte, r.Length)) },
				}
				for name, guess := range guesses {
					got, err := e.svc.Init(ctx, attacker, claim)
					if err != nil || got.Outcome != upload.ProofRequired {
						t.Fatalf("attacker init: %v %v, want a challenge", got.Outcome, err)
					}
					nonce, err := hex.DecodeString(got.Challenge.Nonce)
					if err != nil || len(nonce) != 32 {
						t.Fatalf("challenge nonce %q", got.Challenge.Nonce)
					}
					answer := make([]string, len(got.Challenge.Ranges))
					for i, r := range got.Challenge.Ranges {
						answer[i] = guess(nonce, r)
					}
					_, err = e.svc.Prove(ctx, attacker, got.Challenge.ID, answer)
					wantKind(t, err, errkind.Forbidden, "proof_failed")
					if n := e.count("files", "user_id = ?", attacker); n != 0 {
						t.Fatalf("guess %q gave the attacker %d files", name, n)
					}
				}

				// Nonces are fresh per challenge: an answer to one challenge
				// does not answer the next.
				honest := fmt.Sprintf("usr_honest_%d", size)
				first, _ := e.svc.Init(ctx, honest, claim)
				second, _ := e.svc.Init(ctx, honest, claim)
				if first.Challenge.Nonce == second.Challenge.Nonce {
					t.Fatal("two challenges share a nonce")
				}
				_, err := e.svc.Prove(ctx, honest, second.Challenge.ID, digests(secret, first.Challenge))
				wantKind(t, err, errkind.Forbidden, "proof_failed")
				third, _ := e.svc.Init(ctx, honest, claim)
				got, err := e.svc.Prove(ctx, honest, third.Challenge.ID, digests(secret, third.Challenge))
				if err != nil || got.Outcome != upload.Instant {
					t.Fatalf("honest proof: %v %v", got.Outcome, err)
				}
			})
		}
	})
}

// A verified object never changes: the exact sequence the review
// reproduced. A POST policy stays valid after its upload was adopted and
// verified, and writes other bytes to the same key; none of that reaches
// the file, the dedup index or a proof, because the blob is a copy under a
// key no policy can write. Cleanup then deletes the stray object. A native
// upload's part URLs stop working once it is complete.
func TestVerifiedObjectNeverChanges(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil)
		e.run(t, 5*time.Second)
		ctx := context.Background()
		original, other := randomBytes(3*mib+17), randomBytes(3*mib+17)

		pu, err := e.svc.InitPost(ctx, "usr_owner", upload.OpenRequest{FileName: "photo.png", ContentType: "image/png"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		postObject(t, pu.Policy, original)
		// The owner polls: the upload is adopted and verified at once.
		if _, err := e.svc.Status(ctx, "usr_owner", pu.UploadID); err != nil {
			t.Fatal(err)
		}
		st := e.waitVerified("usr_owner", pu.UploadID, 30*time.Second)
		if st.State != upload.StateSuccess || st.SHA256 != sha(original) {
			t.Fatalf("adopted upload = %+v", st)
		}
		// The same, still valid policy writes other bytes.
		postObject(t, pu.Policy, other)

		f, err := e.svc.Stored(ctx, st.FileID)
		if err != nil {
			t.Fatal(err)
		}
		if f.Key == pu.Key {
			t.Fatalf("the file's blob is the posted key %s, which the policy can still write", f.Key)
		}
		if got, n := e.objectSHA(f.Key); got != sha(original) || n != int64(len(original)) {
			t.Fatalf("the owner's file reads %s (%d bytes), want the original %s", got, n, sha(original))
		}
		if f.ETag == "" {
			t.Fatal("the blob records no ETag for downloads to check")
		}

		// Another user uploading the original content is deduplicated onto
		// the original bytes.
		dup := newClient(t, e, "usr_dup")
		dst := dup.uploadAll("same.png", original, false)
		dupDone := e.waitVerified("usr_dup", dst.UploadID, 30*time.Second)
		if dupDone.State != upload.StateSuccess {
			t.Fatalf("dedup upload ended %s: %s", dupDone.State, dupDone.Error)
		}
		df, _ := e.svc.Stored(ctx, dupDone.FileID)
		if df.Key != f.Key {
			t.Fatalf("same content, two blobs: %s and %s", df.Key, f.Key)
		}
		if got, _ := e.objectSHA(df.Key); got != sha(original) {
			t.Fatal("the deduplicated file reads other bytes")
		}

		// An honest proof over the true bytes still succeeds.
		claim := upload.InitRequest{FileName: "mine.png", Size: int64(len(original)), SHA256: sha(original)}
		res, err := e.svc.Init(ctx, "usr_prover", claim)
		if err != nil || res.Outcome != upload.ProofRequired {
			t.Fatalf("init: %v %v", res.Outcome, err)
		}
		if got, err := e.svc.Prove(ctx, "usr_prover", res.Challenge.ID, digests(original, res.Challenge)); err != nil || got.Outcome != upload.Instant {
			t.Fatalf("honest proof: %v %v", got.Outcome, err)
		}

		// Cleanup finds what the policy wrote after adoption and deletes it.
		if _, ok := e.bucket().Objects[pu.Key]; !ok {
			t.Fatalf("the stray POST is not in the bucket; the test proves nothing")
		}
		rep, err := e.svc.Cleanup(ctx)
		if err != nil || rep.StrayPosts != 1 {
			t.Fatalf("cleanup = %+v %v, want one stray post deleted", rep, err)
		}
		if _, ok := e.bucket().Objects[pu.Key]; ok {
			t.Fatal("cleanup left the stray POST")
		}

		// A native upload: once merged, its part URLs write nothing.
		native := newClient(t, e, "usr_native")
		data := randomBytes(5*mib + 3)
		nres := native.init("n.bin", data, true, 5*mib)
		urls := native.presign(nres.Upload.UploadID, allParts(nres.Upload), nil)
		native.send(nres.Upload, data, allParts(nres.Upload), true)
		if _, err := e.svc.Complete(ctx, "usr_native", nres.Upload.UploadID, upload.CompleteRequest{}); err != nil {
			t.Fatal(err)
		}
		nst := e.waitVerified("usr_native", nres.Upload.UploadID, 30*time.Second)
		if nst.State != upload.StateSuccess {
			t.Fatalf("native upload ended %s", nst.State)
		}
		if code, _ := native.put(urls[2], bytes.NewReader(make([]byte, 3)), 3); code/100 == 2 {
			t.Fatalf("a part URL of a completed upload still writes: %d", code)
		}
		nf, _ := e.svc.Stored(ctx, nst.FileID)
		if got, _ := e.objectSHA(nf.Key); got != sha(data) {
			t.Fatal("the native file changed after completion")
		}
	})
}

// Objects a policy writes after its upload was aborted, or after it
// expired without one, are found and deleted by cleanup; a live upload's
// object is left alone.
func TestCleanupDeletesStrayPosts(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil)
		ctx := context.Background()
		open := func(name string) upload.PostUpload {
			p, err := e.svc.InitPost(ctx, "usr_a", upload.OpenRequest{FileName: name}, nil)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		aborted, expired, live := open("aborted"), open("expired"), open("live")
		if _, err := e.svc.Abort(ctx, "usr_a", aborted.UploadID); err != nil {
			t.Fatal(err)
		}
		if err := e.svc.AdoptNow(ctx, expired.UploadID); err != nil { // nothing came: expired
			t.Fatal(err)
		}
		for _, p := range []upload.PostUpload{aborted, expired, live} {
			postObject(t, p.Policy, []byte("late bytes"))
		}
		rep, err := e.svc.Cleanup(ctx)
		if err != nil || rep.StrayPosts != 2 {
			t.Fatalf("cleanup = %+v %v, want 2 stray posts deleted", rep, err)
		}
		objs := e.bucket().Objects
		if _, ok := objs[live.Key]; !ok {
			t.Fatal("cleanup deleted the object of a live upload")
		}
		for _, p := range []upload.PostUpload{aborted, expired} {
			if _, ok := objs[p.Key]; ok {
				t.Fatalf("%s is still in the bucket", p.Key)
			}
		}
	})
}

// The dedup index never hands out bytes that are not what ferry verified:
// a blob object changed behind ferry's back is refused for instant upload
// and proofs, and the next upload of the same content repairs the blob.
func TestChangedBlobIsNotDeduplicated(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil)
		e.run(t, 5*time.Second)
		ctx := context.Background()
		data := randomBytes(2*mib + 5)
		st := newClient(t, e, "usr_a").uploadAll("a.bin", data, true)
		done := e.waitVerified("usr_a", st.UploadID, 30*time.Second)
		f, _ := e.svc.Stored(ctx, done.FileID)
		// An outside write to the bucket replaces the blob's object.
		tampered := append([]byte{}, data...)
		tampered[100] ^= 0xff
		if err := e.store.Put(ctx, f.Key, bytes.NewReader(tampered), int64(len(tampered)), ""); err != nil {
			t.Fatal(err)
		}
		claim := upload.InitRequest{FileName: "b.bin", Size: int64(len(data)), SHA256: sha(data)}
		for _, user := range []string{"usr_a", "usr_b"} {
			res, err := e.svc.Init(ctx, user, claim)
			if err != nil || res.Outcome != upload.Created {
				t.Fatalf("%s init over a changed blob: %v %v, want a plain upload", user, res.Outcome, err)
			}
			if _, err := e.svc.Abort(ctx, user, res.Upload.UploadID); err != nil {
				t.Fatal(err)
			}
		}
		// The next honest upload of the content repairs the blob.
		st2 := newClient(t, e, "usr_b").uploadAll("b.bin", data, true)
		if d := e.waitVerified("usr_b", st2.UploadID, 30*time.Second); d.State != upload.StateSuccess {
			t.Fatalf("repairing upload ended %s", d.State)
		}
		f, _ = e.svc.Stored(ctx, done.FileID)
		if got, _ := e.objectSHA(f.Key); got != sha(data) {
			t.Fatal("the first user's file still points at the changed bytes")
		}
		if res, _ := e.svc.Init(ctx, "usr_a", claim); res.Outcome != upload.Instant {
			t.Fatalf("after the repair, the owner's init is %v, want Instant", res.Outcome)
		}
	})
}

// A user may hold at most MaxOpen uploads that are still uploading, by any
// of the three entry points; a finished or aborted one frees its place.
func TestOpenUploadLimit(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, func(c *testConfig) { c.MaxOpen = 3 })
		ctx := context.Background()
		var ids []string
		res, err := e.svc.Init(ctx, "usr_a", upload.InitRequest{FileName: "a", Size: 10})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Upload.UploadID)
		mp, err := e.svc.InitMultipart(ctx, "usr_a", upload.OpenRequest{FileName: "b"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, mp.UploadID)
		if _, err := e.svc.InitPost(ctx, "usr_a", upload.OpenRequest{FileName: "c"}, nil); err != nil {
			t.Fatal(err)
		}
		before := e.count("uploads", "1 = 1")
		_, err = e.svc.Init(ctx, "usr_a", upload.InitRequest{FileName: "d", Size: 10})
		ke := wantKind(t, err, errkind.TooManyRequests, "too_many_open_uploads")
		if ke.Fields["limit"] != 3 {
			t.Fatalf("fields = %v", ke.Fields)
		}
		_, err = e.svc.InitMultipart(ctx, "usr_a", upload.OpenRequest{FileName: "e"})
		wantKind(t, err, errkind.TooManyRequests, "too_many_open_uploads")
		_, err = e.svc.InitPost(ctx, "usr_a", upload.OpenRequest{FileName: "f"}, nil)
		wantKind(t, err, errkind.TooManyRequests, "too_many_open_uploads")
		if n := e.count("uploads", "1 = 1"); n != before || len(e.bucket().Pending) != 2 {
			t.Fatalf("refused inits left %d uploads (want %d) and %d multipart uploads", n, before, len(e.bucket().Pending))
		}
		// Another user is not affected; an aborted upload frees a place.
		if _, err := e.svc.Init(ctx, "usr_b", upload.InitRequest{FileName: "a", Size: 10}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.Abort(ctx, "usr_a", ids[0]); err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.Init(ctx, "usr_a", upload.InitRequest{FileName: "g", Size: 10}); err != nil {
			t.Fatalf("after an abort: %v", err)
		}
	})
}
