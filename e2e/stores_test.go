package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"path"
	"strings"
	"testing"

	"github.com/ferry-io/ferry/client"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/s3store"
)

// A store without checksums, POST policies, CORS, lifecycle rules and
// CopyObject (a proxy in front of the test server answers as Cloudflare
// R2, Backblaze B2 and MinIO's community edition do: testenv.S3Lacking):
// ferry starts, logs once what the store has and warns once per missing
// capability with what it does instead, and every upload path still ends
// in a verified file with the right bytes. The CLI client's upload falls
// back to Content-MD5, and Uppy's single-request upload gets a presigned
// PUT whose object ferry copies to its blob key through itself.
func TestStoreWithoutOptionalFeatures(t *testing.T) {
	lacks := []s3store.Capability{s3store.CapChecksums, s3store.CapPostPolicy, s3store.CapCORS, s3store.CapLifecycle, s3store.CapCopyObject}
	srv := testenv.S3Lacking(t, testenv.S3(t), lacks...)
	f := Start(t, Options{S3: &srv})
	_, tok := f.CreateUser("alice", false)
	ctx := context.Background()

	caps, warned := 0, map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(f.Stderr()))
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) != nil {
			continue
		}
		switch rec["msg"] {
		case "store capabilities":
			caps++
			for _, k := range lacks {
				if rec[string(k)] != false {
					t.Errorf("store capabilities: %s = %v, want false", k, rec[string(k)])
				}
			}
		case "the store lacks a capability; ferry uses its fallback":
			if rec["level"] != "WARN" || rec["fallback"] == "" || rec["evidence"] == "" {
				t.Errorf("warning %v", rec)
			}
			warned[rec["capability"].(string)]++
		}
	}
	if caps != 1 || len(warned) != len(lacks) {
		t.Fatalf("start-up logged the capabilities %d times and warned %v, want once and once for each of %v", caps, warned, lacks)
	}
	for k, n := range warned {
		if n != 1 {
			t.Errorf("%s warned %d times", k, n)
		}
	}

	// The native upload: checksums are asked for, not granted; the client
	// pins Content-MD5 instead.
	data := make([]byte, 11*mib+5)
	rand.Read(data)
	sum := sha256.Sum256(data)
	res, err := f.Client(tok).Upload(ctx, bytes.NewReader(data), int64(len(data)), client.UploadOptions{Name: "n.bin", PartSize: 5 * mib})
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		uploadJSON
		Checksum string `json:"checksum_algorithm"`
	}
	f.Do("GET", "/uploads/"+res.UploadID, tok, nil).JSON(t, &st)
	if st.Checksum != "" {
		t.Fatalf("checksum_algorithm %q granted on a store without checksums", st.Checksum)
	}
	if up := f.waitVerified(tok, res.UploadID); up.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("native upload: %+v", up)
	}

	// Uppy's single-request upload: a presigned PUT instead of a form.
	r := f.Do("GET", "/s3/params?filename=p.png&type=image/png&metadata[name]=p.png", tok, nil)
	var params struct {
		Method  string            `json:"method"`
		URL     string            `json:"url"`
		Fields  map[string]string `json:"fields"`
		Headers map[string]string `json:"headers"`
	}
	r.JSON(t, &params)
	if r.Status != 200 || params.Method != "PUT" || len(params.Fields) != 0 || params.Headers["Content-Type"] != "image/png" {
		t.Fatalf("params on a store without POST policies: %d %s", r.Status, r.Body)
	}
	small := make([]byte, 2*mib+3)
	rand.Read(small)
	if code, _, err := putPart(presigned{URL: params.URL, Method: params.Method, Headers: params.Headers}, bytes.NewReader(small), int64(len(small))); err != nil || code != 200 {
		t.Fatalf("PUT to the presigned URL: %d %v", code, err)
	}
	u, _ := url.Parse(params.URL)
	up := f.waitVerified(tok, path.Base(u.Path))
	var file struct {
		DownloadURL string `json:"download_url"`
	}
	f.Do("GET", "/files/"+up.FileID, tok, nil).JSON(t, &file)
	got, _ := download(t, file.DownloadURL)
	if !bytes.Equal(got, small) {
		t.Fatalf("the file posted with a PUT downloads as %d other bytes", len(got))
	}

	// The presigned PUT pins its headers: another content type is refused.
	// A short body: the server refuses before reading a long one and
	// resets the connection, which the proxy would turn into a 502.
	other := map[string]string{}
	for k, v := range params.Headers {
		other[k] = v
	}
	other["Content-Type"] = "text/html"
	if code, _, err := putPart(presigned{URL: params.URL, Method: http.MethodPut, Headers: other}, strings.NewReader("<p>"), 3); err != nil || code != 403 {
		t.Fatalf("PUT with another content type: %d %v, want 403", code, err)
	}
}

// A store limited to fewer parts (FERRY_S3_MAX_PARTS): an init whose
// part size makes more is refused with the limit, and ferry's CLI client,
// which lays files out for S3's 10,000 parts, lays the file out again
// within it and uploads it.
func TestStoreWithFewerParts(t *testing.T) {
	f := Start(t, Options{Env: map[string]string{"FERRY_S3_MAX_PARTS": "4"}})
	_, tok := f.CreateUser("alice", false)
	data := make([]byte, 40*mib+1) // 6 parts of 8 MiB; 4 parts need 11 MiB
	rand.Read(data)
	r := f.Do("POST", "/uploads", tok, map[string]any{"file_name": "a.bin", "size": len(data), "part_size": 8 * mib})
	var problem struct {
		Code     string `json:"code"`
		MaxParts int    `json:"max_parts"`
	}
	r.JSON(t, &problem)
	if r.Status != 400 || problem.Code != "too_many_parts" || problem.MaxParts != 4 {
		t.Fatalf("init in 6 parts on a 4-part store: %d %s", r.Status, r.Body)
	}
	res, err := f.Client(tok).Upload(context.Background(), bytes.NewReader(data), int64(len(data)), client.UploadOptions{Name: "a.bin"})
	if err != nil {
		t.Fatal(err)
	}
	var st uploadJSON
	f.Do("GET", "/uploads/"+res.UploadID, tok, nil).JSON(t, &st)
	sum := sha256.Sum256(data)
	if up := f.waitVerified(tok, res.UploadID); up.SHA256 != hex.EncodeToString(sum[:]) || st.PartCount != 4 || st.PartSize != 11*mib {
		t.Fatalf("upload on a 4-part store: %+v, %d parts of %d", up, st.PartCount, st.PartSize)
	}
}
