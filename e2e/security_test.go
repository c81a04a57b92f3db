package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/ferry-io/ferry/client"
	"github.com/ferry-io/ferry/internal/testenv"
)

// The review's first attack, replayed through the binary: bob knows the
// SHA-256 and size of alice's 45-byte secret and answers the challenge
// with the hash itself (each range of so small a file is the whole file).
// He gets 403 and no file; a client holding the bytes still gets its
// instant file.
func TestAttackProofFromHashAlone(t *testing.T) {
	f := Start(t, Options{})
	_, alice := f.CreateUser("alice", false)
	_, bob := f.CreateUser("bob", false)
	_, carol := f.CreateUser("carol", false)
	ctx := context.Background()

	secret := []byte("the combination is 31-41-59; tell nobody. ok!")
	if len(secret) != 45 {
		t.Fatalf("secret is %d bytes", len(secret))
	}
	up, err := f.Client(alice).Upload(ctx, bytes.NewReader(secret), int64(len(secret)), client.UploadOptions{Name: "secret.txt"})
	if err != nil {
		t.Fatal(err)
	}
	f.waitVerified(alice, up.UploadID)
	sum := sha256.Sum256(secret)
	hash := hex.EncodeToString(sum[:])

	r := f.Do("POST", "/uploads", bob, map[string]any{"file_name": "stolen.txt", "size": len(secret), "sha256": hash})
	var ch struct {
		State     string
		Challenge struct {
			ID     string
			Nonce  string
			Ranges []struct{ Offset, Length int64 }
		}
	}
	r.JSON(t, &ch)
	if r.Status != 200 || ch.State != "proof_required" || len(ch.Challenge.Ranges) == 0 {
		t.Fatalf("bob's init: %d %s", r.Status, r.Body)
	}
	for _, rg := range ch.Challenge.Ranges {
		if rg.Offset != 0 || rg.Length != int64(len(secret)) {
			t.Fatalf("range %+v is not the whole file; the replay needs it to be", rg)
		}
	}
	digests := make([]string, len(ch.Challenge.Ranges))
	for i := range digests {
		digests[i] = hash
	}
	r = f.Do("POST", "/uploads/proofs/"+ch.Challenge.ID, bob, map[string]any{"digests": digests})
	if r.Status != 403 || !strings.Contains(string(r.Body), `"code":"proof_failed"`) {
		t.Fatalf("a proof made of the hash alone: %d %s, want 403 proof_failed", r.Status, r.Body)
	}
	if r := f.Do("GET", "/files", bob, nil); r.Status != 200 || strings.Contains(string(r.Body), "file_id") {
		t.Fatalf("bob's files after the attack: %d %s", r.Status, r.Body)
	}

	// A client that knows the hash asks first, and proves.
	res, err := f.Client(carol).Upload(ctx, bytes.NewReader(secret), int64(len(secret)), client.UploadOptions{Name: "mine.txt", SHA256: hash})
	if err != nil || !res.Instant {
		t.Fatalf("an honest holder's upload: %+v %v, want instant after a proof", res, err)
	}
}

// The review's second attack, replayed through the binary: alice uploads
// through a POST policy and polls, so the upload is adopted and verified
// at once; the same policy, still valid, then writes other bytes. Her
// file still downloads as the original under its SHA-256 ETag, another
// user uploading the original is deduplicated onto the original bytes,
// and an honest proof over them succeeds. Cleanup deletes the stray POST.
func TestAttackPolicyOverwritesVerifiedObject(t *testing.T) {
	f := Start(t, Options{Env: map[string]string{"FERRY_UPLOAD_CLEANUP_EVERY": "1s"}})
	_, alice := f.CreateUser("alice", false)
	_, bob := f.CreateUser("bob", false)
	_, carol := f.CreateUser("carol", false)
	ctx := context.Background()
	original, other := make([]byte, 2*mib+11), make([]byte, 2*mib+11)
	rand.Read(original)
	rand.Read(other)
	sum := sha256.Sum256(original)
	hash := hex.EncodeToString(sum[:])

	r := f.Do("GET", "/s3/params?filename=holiday.png&type=image/png", alice, nil)
	var pol struct {
		URL    string
		Fields map[string]string
	}
	r.JSON(t, &pol)
	if r.Status != 200 || pol.Fields["key"] == "" {
		t.Fatalf("params: %d %s", r.Status, r.Body)
	}
	id := pol.Fields["key"][strings.LastIndex(pol.Fields["key"], "/")+1:]
	if code, body := testenv.PostForm(t, pol.URL, pol.Fields, original); code/100 != 2 {
		t.Fatalf("form POST: %d %s", code, body)
	}
	var up uploadJSON
	deadline := time.Now().Add(60 * time.Second)
	for up.State != "success" || up.SHA256Verified == nil || !*up.SHA256Verified {
		if time.Now().After(deadline) {
			t.Fatalf("upload still %q (verified %v)", up.State, up.SHA256Verified)
		}
		f.Do("GET", "/uploads/"+id, alice, nil).JSON(t, &up)
		time.Sleep(100 * time.Millisecond)
	}
	if code, body := testenv.PostForm(t, pol.URL, pol.Fields, other); code/100 != 2 {
		t.Fatalf("second form POST with the same policy: %d %s (the replay needs the policy to still work)", code, body)
	}

	var file struct {
		SHA256      string `json:"sha256"`
		DownloadURL string `json:"download_url"`
	}
	f.Do("GET", "/files/"+up.FileID, alice, nil).JSON(t, &file)
	got, etag := download(t, file.DownloadURL)
	if g := sha256.Sum256(got); hex.EncodeToString(g[:]) != hash || etag != `"`+hash+`"` || file.SHA256 != hash {
		t.Fatalf("alice's file downloads as other bytes (etag %s, recorded %s)", etag, file.SHA256)
	}

	// bob uploads the original without declaring its hash: deduplicated at
	// the merge onto the existing blob.
	res, err := f.Client(bob).Upload(ctx, bytes.NewReader(original), int64(len(original)), client.UploadOptions{Name: "copy.png"})
	if err != nil {
		t.Fatal(err)
	}
	f.Do("GET", "/files/"+res.FileID, bob, nil).JSON(t, &file)
	got, _ = download(t, file.DownloadURL)
	if g := sha256.Sum256(got); hex.EncodeToString(g[:]) != hash {
		t.Fatal("bob's copy of the original downloads as other bytes")
	}

	// carol proves possession of the original: she gets it.
	res, err = f.Client(carol).Upload(ctx, bytes.NewReader(original), int64(len(original)), client.UploadOptions{Name: "mine.png", SHA256: hash})
	if err != nil || !res.Instant {
		t.Fatalf("an honest proof over the original: %+v %v", res, err)
	}

	mc := ferryBucket(t, f)
	deadline = time.Now().Add(30 * time.Second)
	for {
		if _, err := mc.StatObject(ctx, mc.Name, pol.Fields["key"], minio.StatObjectOptions{}); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stray POST %s is still in the bucket", pol.Fields["key"])
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitVerified waits until ferry has verified the upload's SHA-256 in the
// background (it succeeds before that).
func (f *Ferry) waitVerified(tok, id string) uploadJSON {
	f.t.Helper()
	var up uploadJSON
	for deadline := time.Now().Add(60 * time.Second); up.SHA256Verified == nil || !*up.SHA256Verified; {
		if time.Now().After(deadline) || up.State == "failed" {
			f.t.Fatalf("upload %s: %+v, want it verified", id, up)
		}
		f.Do("GET", "/uploads/"+id+"?wait=10s", tok, nil).JSON(f.t, &up)
		if up.State == "success" && (up.SHA256Verified == nil || !*up.SHA256Verified) {
			time.Sleep(50 * time.Millisecond)
		}
	}
	return up
}

// download GETs a URL and returns the body and the ETag.
func download(t *testing.T, url string) ([]byte, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return b, resp.Header.Get("ETag")
}
