package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/ferry-io/ferry/client"
)

const mib = 1 << 20

type partJSON struct {
	PartNumber int    `json:"part_number"`
	Size       int64  `json:"size"`
	ETag       string `json:"etag"`
}

type uploadJSON struct {
	UploadID  string     `json:"upload_id"`
	State     string     `json:"state"`
	PartCount int        `json:"part_count"`
	PartSize  int64      `json:"part_size"`
	Parts     []partJSON `json:"parts"`
	FileID    string     `json:"file_id"`
	SHA256    string     `json:"sha256"`
}

type presigned struct {
	URL     string            `json:"url"`
	Method  string            `json:"method"`
	Headers map[string]string `json:"headers"`
}

func (f *Ferry) presign(tok, id string, parts ...int) map[string]presigned {
	f.t.Helper()
	r := f.Do("POST", "/uploads/"+id+"/presign", tok, map[string]any{"part_numbers": parts})
	if r.Status != 200 {
		f.t.Fatalf("presign: %d %s", r.Status, r.Body)
	}
	var out struct{ URLs map[string]presigned }
	r.JSON(f.t, &out)
	return out.URLs
}

// putPart PUTs body to a presigned URL.
func putPart(p presigned, body io.Reader, size int64) (int, string, error) {
	req, err := http.NewRequest(p.Method, p.URL, body)
	if err != nil {
		return 0, "", err
	}
	req.ContentLength = size
	for k, v := range p.Headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("ETag"), nil
}

// embeddedBucket is an independent minio-go view of ferry's embedded S3.
func embeddedBucket(t *testing.T, f *Ferry) *minio.Core {
	t.Helper()
	var creds struct {
		AccessKey string `json:"access_key"`
		SecretKey string `json:"secret_key"`
	}
	b, err := os.ReadFile(filepath.Join(f.Dir, "ferry-data", "s3-credentials.json"))
	if err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(b, &creds)
	var addr string
	for _, kv := range f.Env {
		if v, ok := strings.CutPrefix(kv, "FERRY_S3_EMBEDDED_ADDR="); ok {
			addr = v
		}
	}
	c, err := minio.NewCore(addr, &minio.Options{Creds: credentials.NewStaticV4(creds.AccessKey, creds.SecretKey, ""), Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// s3Parts lists an upload's parts as S3 holds them, through minio-go.
func s3Parts(t *testing.T, mc *minio.Core, key string) []partJSON {
	t.Helper()
	ctx := context.Background()
	var uploadID string
	for u := range mc.ListIncompleteUploads(ctx, "ferry", key, false) {
		if u.Err != nil {
			t.Fatal(u.Err)
		}
		uploadID = u.UploadID
	}
	if uploadID == "" {
		t.Fatalf("no multipart upload for %s", key)
	}
	res, err := mc.ListObjectParts(ctx, "ferry", key, uploadID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []partJSON
	for _, p := range res.ObjectParts {
		out = append(out, partJSON{PartNumber: p.PartNumber, Size: p.Size, ETag: p.ETag})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PartNumber < out[j].PartNumber })
	return out
}

func sameParts(a, b []partJSON) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].PartNumber != b[i].PartNumber || a[i].Size != b[i].Size || normETag(a[i].ETag) != normETag(b[i].ETag) {
			return false
		}
	}
	return true
}

func normETag(e string) string { return strings.Trim(e, `"`) }

// Done-when 2: ferry (with its embedded S3) is SIGKILLed in the middle of
// an upload, with a part PUT in flight, and restarted. The progress query
// still answers exactly what S3 holds, and the upload finishes.
func TestUploadSurvivesServerKill(t *testing.T) {
	forEachDriver(t, func(t *testing.T, mysql bool) {
		f := Start(t, Options{MySQL: mysql})
		if mysql {
			f.Token = cliCreateAdmin(t, f)
		}
		_, tok := f.CreateUser("alice", false)
		data := make([]byte, 3*5*mib+77) // 4 parts
		rand.Read(data)
		sum := sha256.Sum256(data)
		digest := hex.EncodeToString(sum[:])
		part := func(n int) []byte { return data[(n-1)*5*mib : min(n*5*mib, len(data))] }

		r := f.Do("POST", "/uploads", tok, map[string]any{"file_name": "big.bin", "size": len(data), "sha256": digest, "part_size": 5 * mib})
		if r.Status != 201 {
			t.Fatalf("init: %d %s", r.Status, r.Body)
		}
		var up uploadJSON
		r.JSON(t, &up)
		urls := f.presign(tok, up.UploadID, 1, 2, 3, 4)
		for _, n := range []int{1, 3} {
			code, etag, err := putPart(urls[fmt.Sprint(n)], bytes.NewReader(part(n)), int64(len(part(n))))
			if err != nil || code != 200 {
				t.Fatalf("PUT part %d: %d %v", n, code, err)
			}
			if n == 1 {
				f.Do("PUT", "/uploads/"+up.UploadID+"/parts/1", tok, map[string]any{"etag": etag, "size": 5 * mib})
			}
		}
		// Part 2 is half-way through its PUT when ferry dies.
		pr, pw := io.Pipe()
		putDone := make(chan error, 1)
		go func() {
			_, _, err := putPart(urls["2"], pr, 5*mib)
			putDone <- err
		}()
		pw.Write(part(2)[:2*mib])
		f.Kill()
		pw.CloseWithError(io.ErrClosedPipe)
		if err := <-putDone; err == nil {
			t.Log("the in-flight PUT returned without error")
		}

		f.Restart()
		mc := embeddedBucket(t, f)
		var after uploadJSON
		r = f.Do("GET", "/uploads/"+up.UploadID, tok, nil)
		if r.Status != 200 {
			t.Fatalf("status after restart: %d %s", r.Status, r.Body)
		}
		r.JSON(t, &after)
		truth := s3Parts(t, mc, "uploads/"+up.UploadID)
		if after.State != "uploading" || !sameParts(after.Parts, truth) {
			t.Fatalf("progress after restart = %+v\nS3 holds %+v", after.Parts, truth)
		}
		have := map[int]bool{}
		for _, p := range after.Parts {
			have[p.PartNumber] = true
		}
		if !have[1] || !have[3] {
			t.Fatalf("finished parts lost across the restart: %+v", after.Parts)
		}
		t.Logf("after restart S3 and ferry agree on parts %+v", after.Parts)
		r = f.Do("GET", fmt.Sprintf("/uploads?sha256=%s&size=%d", digest, len(data)), tok, nil)
		var found uploadJSON
		r.JSON(t, &found)
		if r.Status != 200 || found.UploadID != up.UploadID || !sameParts(found.Parts, truth) {
			t.Fatalf("find after restart: %d %s", r.Status, r.Body)
		}

		// A client that has only the file finishes the upload: it is
		// offered the same upload and sends just the parts S3 lacks (part
		// 2, cut mid-PUT, and part 4).
		res, err := client.New(f.URL, tok).Upload(context.Background(), bytes.NewReader(data), int64(len(data)), client.UploadOptions{Name: "big.bin"})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Resumed || res.UploadID != up.UploadID || res.PartsSent != 2 || res.PartsSkipped != 2 {
			t.Fatalf("resume after restart: %+v; want the same upload, 2 parts sent and 2 skipped", res)
		}
		var done uploadJSON
		f.Do("GET", "/uploads/"+up.UploadID, tok, nil).JSON(t, &done)
		if done.State != "success" || done.SHA256 != digest || done.FileID != res.FileID {
			t.Fatalf("final = %+v", done)
		}
		obj, _, _, err := mc.GetObject(context.Background(), "ferry", "uploads/"+up.UploadID, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		io.Copy(h, obj)
		obj.Close()
		if hex.EncodeToString(h.Sum(nil)) != digest {
			t.Fatal("the object in the bucket is not the file")
		}
		var list struct {
			Files []struct {
				FileID      string `json:"file_id"`
				SHA256      string `json:"sha256"`
				DownloadURL string `json:"download_url"`
			} `json:"files"`
		}
		f.Do("GET", "/files", tok, nil).JSON(t, &list)
		if len(list.Files) != 1 || list.Files[0].FileID != done.FileID || list.Files[0].SHA256 != digest {
			t.Fatalf("files = %+v", list.Files)
		}
		if u, err := url.Parse(list.Files[0].DownloadURL); err != nil || u.Query().Get("sig") == "" {
			t.Fatalf("download_url = %q", list.Files[0].DownloadURL)
		}
	})
}
