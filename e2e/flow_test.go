package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-io/ferry/client"
)

// writeRandomFile creates a file of n random bytes and returns its path and
// hex SHA-256.
func writeRandomFile(t *testing.T, dir, name string, n int) (string, string) {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return path, hex.EncodeToString(sum[:])
}

// A file uploaded with the Go client is served back through the download
// proxy to its owner, and to a conversation member while the message that
// attaches it is visible; a recall or a delete takes effect on the next
// request.
func TestFilesThroughTheDownloadProxy(t *testing.T) {
	forEachDriver(t, func(t *testing.T, mysql bool) {
		f := startWithAdmin(t, mysql, nil)
		_, alice := f.CreateUser("alice", false)
		bobID, bob := f.CreateUser("bob", false)
		ctx := context.Background()
		dir := t.TempDir()
		path, sum := writeRandomFile(t, dir, "movie.bin", 13<<20+7)

		ac := f.Client(alice)
		up, err := ac.UploadFile(ctx, path, client.UploadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if up.Instant || up.FileID == "" || up.PartsSent != 2 {
			t.Fatalf("upload result %+v", up)
		}
		// Until ferry has hashed it, the file reaches nobody but alice.
		if v := f.waitVerified(alice, up.UploadID); v.SHA256 != sum {
			t.Fatalf("ferry verified sha256 %s, the file has %s", v.SHA256, sum)
		}
		if got := sha256.Sum256(ferryObject(t, f, "uploads/"+up.UploadID)); hex.EncodeToString(got[:]) != sum {
			t.Fatal("the object in the bucket is not the file")
		}

		var file struct {
			DownloadURL string `json:"download_url"`
			SHA256      string `json:"sha256"`
		}
		f.Do("GET", "/files/"+up.FileID, alice, nil).JSON(t, &file)
		dl, err := ac.Download(ctx, file.DownloadURL, filepath.Join(dir, "back.bin"), client.DownloadOptions{})
		if err != nil || dl.SHA256 != sum {
			t.Fatalf("owner download: %+v %v", dl, err)
		}
		// A verified file's download carries the CRC32C the verify job
		// computed with its SHA-256 (Repr-Digest), and the bytes were
		// checked by it.
		if dl.CheckedBy != "crc32c" {
			t.Fatalf("owner download checked by %q, want crc32c", dl.CheckedBy)
		}

		// Bob can read it only through a message he can see.
		var conv struct{ ID string }
		f.Do("POST", "/conversations", alice, map[string]any{"title": "films"}).JSON(t, &conv)
		want(t, f.Do("POST", "/conversations/"+conv.ID+"/members", alice, map[string]any{"user_id": bobID}), 201, "")
		var msg struct{ Seq int64 }
		r := f.Do("POST", "/conversations/"+conv.ID+"/messages", alice, map[string]any{"body": "look", "attachments": []string{up.FileID}})
		want(t, r, 201, "")
		r.JSON(t, &msg)
		want(t, f.Do("POST", "/conversations/"+conv.ID+"/messages", bob, map[string]any{"body": "steal", "attachments": []string{up.FileID}}), 404, "attachment_not_found")

		var page struct {
			Messages []struct {
				AttachmentURLs map[string]string `json:"attachment_urls"`
				Expire         time.Time         `json:"attachment_urls_expire_at"`
			}
		}
		f.Do("GET", "/conversations/"+conv.ID+"/messages", bob, nil).JSON(t, &page)
		link := page.Messages[0].AttachmentURLs[up.FileID]
		if link == "" || !strings.HasPrefix(link, f.URL+"/download/") || time.Until(page.Messages[0].Expire) < time.Minute {
			t.Fatalf("no absolute attachment link with its expiry for bob: %+v", page)
		}
		bc := f.Client(bob)
		if dl, err := bc.Download(ctx, link, filepath.Join(dir, "bob.bin"), client.DownloadOptions{}); err != nil || dl.SHA256 != sum {
			t.Fatalf("member download: %+v %v", dl, err)
		}

		// The same link stops working the moment the message is recalled.
		want(t, f.Do("POST", "/conversations/"+conv.ID+"/messages/1/recall", alice, nil), 200, "")
		want(t, f.Do("GET", strings.TrimPrefix(link, f.URL), "", nil), 403, "download_forbidden")
		// The owner's link stops working when the file is deleted.
		if r := f.Do("DELETE", "/files/"+up.FileID, alice, nil); r.Status/100 != 2 {
			t.Fatalf("delete file: %d %s", r.Status, r.Body)
		}
		want(t, f.Do("GET", strings.TrimPrefix(file.DownloadURL, f.URL), "", nil), 404, "download_not_found")
	})
}

// An export's artifact downloads through the proxy with its SHA-256; the
// owner's delete, an admin's revoke and a deactivation each stop the very
// next request.
func TestExportsThroughTheDownloadProxy(t *testing.T) {
	forEachDriver(t, func(t *testing.T, mysql bool) {
		f := startWithAdmin(t, mysql, map[string]string{"FERRY_EXPORT_SHARD_SIZE": "7"})
		aliceID, alice := f.CreateUser("alice", false)
		ctx := context.Background()
		var conv struct{ ID string }
		f.Do("POST", "/conversations", alice, map[string]any{"title": "notes"}).JSON(t, &conv)
		for i := range 30 {
			want(t, f.Do("POST", "/conversations/"+conv.ID+"/messages", alice, map[string]any{"body": strings.Repeat("x", i+1)}), 201, "")
		}
		ac := f.Client(alice)
		dir := t.TempDir()
		out := filepath.Join(dir, "export.jsonl.gz")
		res, err := ac.Export(ctx, "all", out, client.ExportOptions{})
		if err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(out)
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		var lines bytes.Buffer
		lines.ReadFrom(zr)
		if n := strings.Count(lines.String(), "\n"); n != 30 {
			t.Fatalf("artifact has %d lines, want 30", n)
		}

		var job struct {
			DownloadURL string `json:"download_url"`
			SHA256      string `json:"sha256"`
		}
		f.Do("GET", "/exports/"+res.JobID, alice, nil).JSON(t, &job)
		path := strings.TrimPrefix(job.DownloadURL, f.URL)
		r := f.Do("GET", path, "", nil, "Range", "bytes=10-19")
		if r.Status != 206 || r.Header.Get("ETag") != `"`+job.SHA256+`"` || !bytes.Equal(r.Body, data[10:20]) {
			t.Fatalf("range: %d etag %s", r.Status, r.Header.Get("ETag"))
		}

		// Deactivation: 403 at once, and back after reactivation.
		want(t, f.Do("POST", "/admin/users/"+aliceID+"/deactivate", f.Token, nil), 200, "")
		want(t, f.Do("GET", path, "", nil), 403, "user_inactive")
		want(t, f.Do("POST", "/admin/users/"+aliceID+"/activate", f.Token, nil), 200, "")
		want(t, f.Do("GET", path, "", nil), 200, "")

		// The owner deletes the export: the link issued a moment ago is 410.
		if r := f.Do("DELETE", "/exports/"+res.JobID, alice, nil); r.Status/100 != 2 {
			t.Fatalf("delete export: %d %s", r.Status, r.Body)
		}
		want(t, f.Do("GET", path, "", nil), 410, "download_revoked")

		// An admin revokes a second export.
		res2, err := ac.Export(ctx, "conv:"+conv.ID, filepath.Join(dir, "conv.jsonl.gz"), client.ExportOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f.Do("GET", "/exports/"+res2.JobID, alice, nil).JSON(t, &job)
		want(t, f.Do("POST", "/admin/exports/"+res2.JobID+"/revoke", f.Token, nil), 200, "")
		want(t, f.Do("GET", strings.TrimPrefix(job.DownloadURL, f.URL), "", nil), 410, "download_revoked")
	})
}
