package server_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-io/ferry/download"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/presign"
	"github.com/ferry-io/ferry/s3store"
	"github.com/ferry-io/ferry/server"
	"github.com/ferry-io/ferry/upload"
	"github.com/ferry-io/ferry/users"
)

const mib = 1 << 20

// api is a ferry HTTP server over a real database and bucket.
type api struct {
	t     testing.TB
	db    *testenv.DB
	store *s3store.Store
	queue *jobs.Queue
	svc   *upload.Service
	users *users.Service
	url   string
}

func newAPI(t testing.TB, db *testenv.DB) *api {
	t.Helper()
	return newAPIWith(t, db, func(*server.Deps) {})
}

// newAPIWith is newAPI with the server's Deps adjusted by edit.
func newAPIWith(t testing.TB, db *testenv.DB, edit func(*server.Deps)) *api {
	t.Helper()
	a := &api{t: t, db: db, store: testenv.Store(t), queue: testenv.Must(jobs.NewQueue(jobs.QueueConfig{DB: db.DB, Now: time.Now}))}
	signer, err := presign.NewSigner([]presign.Key{{ID: "k1", Secret: bytes.Repeat([]byte{1}, 32)}}, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	links, err := download.NewLinks(download.LinksConfig{Signer: signer, PublicURL: "http://localhost", TTL: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	// Checksums as ferry serve sets it for this store, whose probe finds
	// CRC32C verified (s3store.TestChecksumsAreEnforced).
	a.svc, err = upload.New(upload.Config{DB: db.DB, Store: a.store, Queue: a.queue, Links: links, Log: testenv.Logger(t), Registerer: reg, Checksums: true})
	if err != nil {
		t.Fatal(err)
	}
	a.users = testenv.Must(users.New(users.Config{DB: db.DB, Now: time.Now, SessionTTL: time.Hour}))
	d := server.Deps{
		Log: testenv.Logger(t), Users: a.users, Uploads: a.svc, Gatherer: reg, Registerer: reg,
		MaxBodyBytes: 1 << 20, Origins: []string{"http://localhost"},
	}
	edit(&d)
	srv, err := server.New(d)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	a.url = hs.URL
	return a
}

// runJobs runs the upload jobs until t ends.
func (a *api) runJobs(t *testing.T) {
	r := jobs.NewRunner(a.queue, jobs.RunnerConfig{Lease: 5 * time.Second, Poll: 50 * time.Millisecond, Log: testenv.Logger(t)})
	a.svc.Register(r)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx, 5*time.Second); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func (a *api) user(name string) string {
	a.t.Helper()
	_, token, err := a.users.Create(context.Background(), name, false)
	if err != nil {
		a.t.Fatal(err)
	}
	return token
}

type reply struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r reply) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("decode %s: %v", r.Body, err)
	}
	return m
}

// do sends body (a string is sent as is, anything else as JSON).
func (a *api) do(method, path, token string, body any, header ...string) reply {
	a.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, a.url+path, rd)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, b}
}

func hexSHA(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// putPart PUTs body to the presigned URL in a presign answer.
func putPart(t testing.TB, u map[string]any, body []byte) string {
	t.Helper()
	req, _ := http.NewRequest(u["method"].(string), u["url"].(string), bytes.NewReader(body))
	for k, v := range u["headers"].(map[string]any) {
		req.Header.Set(k, v.(string))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("PUT part: %d", resp.StatusCode)
	}
	return resp.Header.Get("ETag")
}

// sendAll presigns, PUTs and reports every part of data.
func (a *api) sendAll(token, id string, data []byte, partSize int64) {
	a.t.Helper()
	n := int((int64(len(data)) + partSize - 1) / partSize)
	nums := make([]int, n)
	for i := range nums {
		nums[i] = i + 1
	}
	r := a.do("POST", "/uploads/"+id+"/presign", token, map[string]any{"part_numbers": nums})
	if r.Status != 200 {
		a.t.Fatalf("presign: %d %s", r.Status, r.Body)
	}
	urls := r.json(a.t)["urls"].(map[string]any)
	for _, p := range nums {
		body := data[int64(p-1)*partSize : min(int64(p)*partSize, int64(len(data)))]
		etag := putPart(a.t, urls[fmt.Sprint(p)].(map[string]any), body)
		if r := a.do("PUT", fmt.Sprintf("/uploads/%s/parts/%d", id, p), token, map[string]any{"etag": etag, "size": len(body)}); r.Status != 200 {
			a.t.Fatalf("report part %d: %d %s", p, r.Status, r.Body)
		}
	}
}

func (a *api) waitState(token, id, state string) map[string]any {
	a.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := a.do("GET", "/uploads/"+id, token, nil)
		m := r.json(a.t)
		// "success" waits for the background verification as well, so
		// what follows sees the file's computed SHA-256.
		if m["state"] == state && (state != "success" || m["sha256_verified"] == true) {
			return m
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("upload %s: %s, want %s", id, r.Body, state)
		}
		time.Sleep(30 * time.Millisecond)
	}
}

func keys(m map[string]any) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return fmt.Sprint(ks)
}

// The native API end to end over HTTP: the answers have the documented
// shapes and status codes.
func TestUploadAPI(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		a := newAPI(t, db)
		a.runJobs(t)
		alice, bob := a.user("alice"), a.user("bob")
		data := bytes.Repeat([]byte("ferry!"), 1<<20) // 6 MiB: 2 parts of 5 MiB

		r := a.do("POST", "/uploads", alice, map[string]any{"file_name": "a.bin", "size": len(data), "sha256": hexSHA(data), "part_size": 5 * mib, "content_type": "application/x-test"})
		if r.Status != 201 {
			t.Fatalf("init: %d %s", r.Status, r.Body)
		}
		up := r.json(t)
		if keys(up) != "[content_type expires_at file_name part_count part_size parts sha256 size state upload_id]" ||
			up["state"] != "uploading" || up["part_count"] != 2.0 || up["part_size"] != float64(5*mib) || len(up["parts"].([]any)) != 0 {
			t.Fatalf("init answer = %s", r.Body)
		}
		id := up["upload_id"].(string)
		a.sendAll(alice, id, data, 5*mib)

		// Resume answers 200 with the parts filled.
		r = a.do("POST", "/uploads", alice, map[string]any{"file_name": "a.bin", "size": len(data), "sha256": hexSHA(data)})
		if m := r.json(t); r.Status != 200 || m["upload_id"] != id || len(m["parts"].([]any)) != 2 {
			t.Fatalf("resume: %d %s", r.Status, r.Body)
		}
		r = a.do("GET", "/uploads?sha256="+hexSHA(data)+"&size="+fmt.Sprint(len(data)), alice, nil)
		if r.Status != 200 || r.json(t)["upload_id"] != id {
			t.Fatalf("find: %d %s", r.Status, r.Body)
		}
		part := r.json(t)["parts"].([]any)[0].(map[string]any)
		if keys(part) != "[etag part_number size]" {
			t.Fatalf("part = %v", part)
		}

		r = a.do("POST", "/uploads/"+id+"/complete", alice, nil)
		if r.Status != 202 || r.json(t)["state"] != "pending" {
			t.Fatalf("complete: %d %s", r.Status, r.Body)
		}
		done := a.waitState(alice, id, "success")
		fileID := done["file_id"].(string)
		if r := a.do("POST", "/uploads/"+id+"/complete", alice, "{}"); r.Status != 200 || r.json(t)["file_id"] != fileID {
			t.Fatalf("complete again: %d %s", r.Status, r.Body)
		}

		r = a.do("GET", "/files", alice, nil)
		// URLs in JSON keep their "&": one copied from curl's output works.
		if strings.Contains(string(r.Body), `\u0026`) || !strings.Contains(string(r.Body), "&exp=") && !strings.Contains(string(r.Body), "&kid=") {
			t.Fatalf("the listing escapes its URLs: %s", r.Body)
		}
		files := r.json(t)["files"].([]any)
		if r.Status != 200 || len(files) != 1 {
			t.Fatalf("files: %d %s", r.Status, r.Body)
		}
		f := files[0].(map[string]any)
		if keys(f) != "[client_metadata content_type created_at download_url download_url_expires_at file_id metadata name sha256 sha256_verified size]" || f["file_id"] != fileID || f["sha256_verified"] != true ||
			f["sha256"] != hexSHA(data) || f["content_type"] != "application/x-test" || !strings.HasPrefix(f["download_url"].(string), "http://localhost/download/"+fileID+"?") {
			t.Fatalf("file = %v", f)
		}

		// Instant upload, and a challenge for someone else.
		r = a.do("POST", "/uploads", alice, map[string]any{"file_name": "copy.bin", "size": len(data), "sha256": hexSHA(data)})
		if m := r.json(t); r.Status != 200 || keys(m) != "[file_id instant state upload_id]" || m["state"] != "success" || m["instant"] != true {
			t.Fatalf("instant: %d %s", r.Status, r.Body)
		}
		r = a.do("POST", "/uploads", bob, map[string]any{"file_name": "mine.bin", "size": len(data), "sha256": hexSHA(data)})
		m := r.json(t)
		if r.Status != 200 || m["state"] != "proof_required" {
			t.Fatalf("challenge: %d %s", r.Status, r.Body)
		}
		ch := m["challenge"].(map[string]any)
		if keys(ch) != "[expires_at id nonce ranges]" {
			t.Fatalf("challenge = %v", ch)
		}
		nonce, err := hex.DecodeString(ch["nonce"].(string))
		if err != nil || len(nonce) != 32 {
			t.Fatalf("nonce = %v", ch["nonce"])
		}
		var digests []string
		for _, rg := range ch["ranges"].([]any) {
			rg := rg.(map[string]any)
			off, n := int(rg["offset"].(float64)), int(rg["length"].(float64))
			digests = append(digests, upload.ProofDigest(nonce, data[off:off+n]))
		}
		r = a.do("POST", "/uploads/proofs/"+ch["id"].(string), bob, map[string]any{"digests": digests})
		if m := r.json(t); r.Status != 200 || m["instant"] != true || m["file_id"] == "" {
			t.Fatalf("proof: %d %s", r.Status, r.Body)
		}

		// Delete and abort.
		if r := a.do("DELETE", "/files/"+fileID, alice, nil); r.Status != 204 {
			t.Fatalf("delete file: %d %s", r.Status, r.Body)
		}
		if r := a.do("GET", "/files/"+fileID, alice, nil); r.Status != 404 {
			t.Fatalf("deleted file: %d", r.Status)
		}
		r = a.do("POST", "/uploads", alice, map[string]any{"file_name": "x", "size": 10})
		other := r.json(t)["upload_id"].(string)
		if r := a.do("DELETE", "/uploads/"+other, alice, nil); r.Status != 200 || r.json(t)["state"] != "aborted" {
			t.Fatalf("abort: %d %s", r.Status, r.Body)
		}
		if r := a.do("POST", "/uploads/"+other+"/presign", alice, map[string]any{"part_numbers": []int{1}}); r.Status != 409 {
			t.Fatalf("presign after abort: %d %s", r.Status, r.Body)
		}

		// The metrics are exported.
		r = a.do("GET", "/metrics", "", nil)
		for _, name := range []string{`ferry_uploads{state="success"}`, "ferry_upload_parts_presigned_total 2", "ferry_upload_merge_duration_seconds_count", "ferry_upload_verify_throughput_bytes_per_second_count 1"} {
			if !strings.Contains(string(r.Body), name) {
				t.Errorf("metrics lack %s", name)
			}
		}
	})
}

// snapshot is the state bad requests must not change.
type snapshot struct {
	Tables  map[string][]map[string]any
	Objects map[string]string // key → etag
	Pending map[string]string // key → upload id
	Parts   []s3store.Part
}

func (a *api) snapshot(key, s3id string) snapshot {
	a.t.Helper()
	s := snapshot{Tables: map[string][]map[string]any{}, Objects: map[string]string{}, Pending: map[string]string{}}
	for _, table := range []string{"uploads", "upload_parts", "blobs", "files", "upload_challenges", "outbox", "jobs"} {
		var rows []map[string]any
		if err := a.db.Table(table).Order("created_at, id").Find(&rows).Error; err != nil {
			a.t.Fatal(err)
		}
		s.Tables[table] = rows
	}
	srv := testenv.S3(a.t)
	u, _ := url.Parse(srv.Endpoint)
	mc, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, ""), Region: "us-east-1"})
	if err != nil {
		a.t.Fatal(err)
	}
	ctx := context.Background()
	for o := range mc.ListObjects(ctx, a.store.Bucket(), minio.ListObjectsOptions{Recursive: true}) {
		s.Objects[o.Key] = o.ETag
	}
	for m := range mc.ListIncompleteUploads(ctx, a.store.Bucket(), "", true) {
		s.Pending[m.Key] = m.UploadID
	}
	if s.Parts, err = a.store.ListParts(ctx, key, s3id); err != nil {
		a.t.Fatal(err)
	}
	return s
}

// Done-when 11: bad input on every route, and someone else's ids, get a
// 4xx problem+json, and neither the database nor the bucket changes.
func TestBadInputChangesNothing(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		a := newAPI(t, db)
		alice, bob, carol := a.user("alice"), a.user("bob"), a.user("carol")
		data := bytes.Repeat([]byte{42}, 5*mib+100) // 2 parts
		var fileID, upID, challengeID string
		t.Run("setup", func(t *testing.T) {
			a.runJobs(t) // stops, with its periodic cleanup, before the table runs
			r := a.do("POST", "/uploads", alice, map[string]any{"file_name": "done.bin", "size": len(data), "sha256": hexSHA(data), "part_size": 5 * mib})
			done := r.json(t)["upload_id"].(string)
			a.sendAll(alice, done, data, 5*mib)
			a.do("POST", "/uploads/"+done+"/complete", alice, nil)
			fileID = a.waitState(alice, done, "success")["file_id"].(string)
			r = a.do("POST", "/uploads", alice, map[string]any{"file_name": "open.bin", "size": 3 * 5 * mib, "part_size": 5 * mib})
			upID = r.json(t)["upload_id"].(string)
			a.sendAll(alice, upID, bytes.Repeat([]byte{7}, 5*mib), 5*mib) // part 1 of 3
			r = a.do("POST", "/uploads", carol, map[string]any{"file_name": "c", "size": len(data), "sha256": hexSHA(data)})
			challengeID = r.json(t)["challenge"].(map[string]any)["id"].(string)
		})
		var row struct{ S3Key, S3UploadID string }
		db.Table("uploads").Select("s3_key, s3_upload_id").Where("id = ?", upID).Scan(&row)
		before := a.snapshot(row.S3Key, row.S3UploadID)

		b64 := func(n int) string { return base64.StdEncoding.EncodeToString(make([]byte, n)) }
		many := make([]int, 1001)
		for i := range many {
			many[i] = i + 1
		}
		sha := hexSHA(data)
		U := "/uploads/" + upID
		cases := []struct {
			name, method, path, token string
			body                      any
			header                    []string
			want                      int
		}{
			{"init: no credentials", "POST", "/uploads", "", `{"file_name":"a","size":1}`, nil, 401},
			{"init: malformed JSON", "POST", "/uploads", alice, `{"file_name":`, nil, 400},
			{"init: empty body", "POST", "/uploads", alice, "", nil, 400},
			{"init: array body", "POST", "/uploads", alice, `[]`, nil, 400},
			{"init: unknown field", "POST", "/uploads", alice, `{"file_name":"a","size":1,"sizes":2}`, nil, 400},
			{"init: trailing data", "POST", "/uploads", alice, `{"file_name":"a","size":1} {}`, nil, 400},
			{"init: wrong content type", "POST", "/uploads", alice, `{"file_name":"a","size":1}`, []string{"Content-Type", "text/html"}, 415},
			{"init: oversize body", "POST", "/uploads", alice, `{"file_name":"` + strings.Repeat("a", 2<<20) + `"}`, nil, 413},
			{"init: no file_name", "POST", "/uploads", alice, `{"size":1}`, nil, 400},
			{"init: empty file_name", "POST", "/uploads", alice, `{"file_name":"","size":1}`, nil, 400},
			{"init: blank file_name", "POST", "/uploads", alice, `{"file_name":"   ","size":1}`, nil, 400},
			{"init: slash", "POST", "/uploads", alice, `{"file_name":"a/b","size":1}`, nil, 400},
			{"init: backslash", "POST", "/uploads", alice, `{"file_name":"a\\b","size":1}`, nil, 400},
			{"init: dot dot", "POST", "/uploads", alice, `{"file_name":"..","size":1}`, nil, 400},
			{"init: newline", "POST", "/uploads", alice, `{"file_name":"a\nb","size":1}`, nil, 400},
			{"init: NUL", "POST", "/uploads", alice, `{"file_name":"a\u0000b","size":1}`, nil, 400},
			{"init: DEL", "POST", "/uploads", alice, `{"file_name":"a\u007fb","size":1}`, nil, 400},
			{"init: line separator", "POST", "/uploads", alice, `{"file_name":"a\u2028b","size":1}`, nil, 400},
			{"init: 256-byte name", "POST", "/uploads", alice, map[string]any{"file_name": strings.Repeat("é", 128), "size": 1}, nil, 400},
			{"init: size 0", "POST", "/uploads", alice, `{"file_name":"a","size":0}`, nil, 400},
			{"init: no size", "POST", "/uploads", alice, `{"file_name":"a"}`, nil, 400},
			{"init: negative size", "POST", "/uploads", alice, `{"file_name":"a","size":-5}`, nil, 400},
			{"init: string size", "POST", "/uploads", alice, `{"file_name":"a","size":"5"}`, nil, 400},
			{"init: fractional size", "POST", "/uploads", alice, `{"file_name":"a","size":1.5}`, nil, 400},
			{"init: absurd size", "POST", "/uploads", alice, `{"file_name":"a","size":1e30}`, nil, 400},
			{"init: size over the maximum", "POST", "/uploads", alice, map[string]any{"file_name": "a", "size": int64(10_000*5<<30 + 1)}, nil, 400},
			{"init: part size too small", "POST", "/uploads", alice, map[string]any{"file_name": "a", "size": 100, "part_size": 5*mib - 1}, nil, 400},
			{"init: part size too large", "POST", "/uploads", alice, map[string]any{"file_name": "a", "size": 100, "part_size": int64(5<<30) + 1}, nil, 400},
			{"init: negative part size", "POST", "/uploads", alice, map[string]any{"file_name": "a", "size": 100, "part_size": -1}, nil, 400},
			{"init: too many parts", "POST", "/uploads", alice, map[string]any{"file_name": "a", "size": 10001 * 5 * mib, "part_size": 5 * mib}, nil, 400},
			{"init: short sha256", "POST", "/uploads", alice, `{"file_name":"a","size":1,"sha256":"abc"}`, nil, 400},
			{"init: non-hex sha256", "POST", "/uploads", alice, map[string]any{"file_name": "a", "size": 1, "sha256": strings.Repeat("z", 64)}, nil, 400},
			{"init: long sha256", "POST", "/uploads", alice, map[string]any{"file_name": "a", "size": 1, "sha256": sha + "0"}, nil, 400},
			{"init: bad content type", "POST", "/uploads", alice, `{"file_name":"a","size":1,"content_type":"not a type"}`, nil, 400},
			{"init: control in content type", "POST", "/uploads", alice, `{"file_name":"a","size":1,"content_type":"text/plain\u0001"}`, nil, 400},
			{"init: long content type", "POST", "/uploads", alice, map[string]any{"file_name": "a", "size": 1, "content_type": "text/" + strings.Repeat("x", 300)}, nil, 400},

			{"find: no query", "GET", "/uploads", alice, nil, nil, 400},
			{"find: bad sha256", "GET", "/uploads?sha256=xyz&size=10", alice, nil, nil, 400},
			{"find: bad size", "GET", "/uploads?sha256=" + sha + "&size=ten", alice, nil, nil, 400},
			{"find: zero size", "GET", "/uploads?sha256=" + sha + "&size=0", alice, nil, nil, 400},
			{"find: two sizes", "GET", "/uploads?sha256=" + sha + "&size=1&size=2", alice, nil, nil, 400},
			{"find: nothing there", "GET", "/uploads?sha256=" + sha + "&size=1", alice, nil, nil, 404},

			{"status: someone else's", "GET", U, bob, nil, nil, 404},
			{"status: no such upload", "GET", "/uploads/upl_nope", alice, nil, nil, 404},
			{"abort: someone else's", "DELETE", U, bob, nil, nil, 404},
			{"abort: finished upload", "DELETE", "/uploads/" + a.uploadOf(fileID), alice, nil, nil, 409},

			{"presign: someone else's", "POST", U + "/presign", bob, `{"part_numbers":[2]}`, nil, 404},
			{"presign: no part numbers", "POST", U + "/presign", alice, `{}`, nil, 400},
			{"presign: empty list", "POST", U + "/presign", alice, `{"part_numbers":[]}`, nil, 400},
			{"presign: 1,001 parts", "POST", U + "/presign", alice, map[string]any{"part_numbers": many}, nil, 400},
			{"presign: part 0", "POST", U + "/presign", alice, `{"part_numbers":[0]}`, nil, 400},
			{"presign: negative part", "POST", U + "/presign", alice, `{"part_numbers":[-1]}`, nil, 400},
			{"presign: beyond part_count", "POST", U + "/presign", alice, `{"part_numbers":[4]}`, nil, 400},
			{"presign: duplicate part", "POST", U + "/presign", alice, `{"part_numbers":[2,2]}`, nil, 400},
			{"presign: string part", "POST", U + "/presign", alice, `{"part_numbers":["2"]}`, nil, 400},
			{"presign: md5 of an unlisted part", "POST", U + "/presign", alice, map[string]any{"part_numbers": []int{2}, "content_md5": map[string]string{"3": b64(16)}}, nil, 400},
			{"presign: md5 not base64", "POST", U + "/presign", alice, `{"part_numbers":[2],"content_md5":{"2":"!!!"}}`, nil, 400},
			{"presign: md5 of 15 bytes", "POST", U + "/presign", alice, map[string]any{"part_numbers": []int{2}, "content_md5": map[string]string{"2": b64(15)}}, nil, 400},
			{"presign: md5 key not a number", "POST", U + "/presign", alice, map[string]any{"part_numbers": []int{2}, "content_md5": map[string]string{"two": b64(16)}}, nil, 400},
			{"presign: md5 key with a zero", "POST", U + "/presign", alice, map[string]any{"part_numbers": []int{2}, "content_md5": map[string]string{"02": b64(16)}}, nil, 400},
			{"presign: unknown field", "POST", U + "/presign", alice, `{"part_numbers":[2],"md5":{}}`, nil, 400},
			{"presign: finished upload", "POST", "/uploads/" + a.uploadOf(fileID) + "/presign", alice, `{"part_numbers":[1]}`, nil, 409},

			{"part: someone else's", "PUT", U + "/parts/2", bob, `{"etag":"\"abc\"","size":5242880}`, nil, 404},
			{"part: number 0", "PUT", U + "/parts/0", alice, `{"etag":"x","size":5242880}`, nil, 400},
			{"part: number not a number", "PUT", U + "/parts/two", alice, `{"etag":"x","size":5242880}`, nil, 400},
			{"part: number with a sign", "PUT", U + "/parts/+2", alice, `{"etag":"x","size":5242880}`, nil, 400},
			{"part: number too large", "PUT", U + "/parts/10001", alice, `{"etag":"x","size":5242880}`, nil, 400},
			{"part: beyond part_count", "PUT", U + "/parts/4", alice, `{"etag":"x","size":5242880}`, nil, 400},
			{"part: no etag", "PUT", U + "/parts/2", alice, `{"size":5242880}`, nil, 400},
			{"part: quotes only", "PUT", U + "/parts/2", alice, `{"etag":"\"\"","size":5242880}`, nil, 400},
			{"part: long etag", "PUT", U + "/parts/2", alice, map[string]any{"etag": strings.Repeat("a", 200), "size": 5 * mib}, nil, 400},
			{"part: no size", "PUT", U + "/parts/2", alice, `{"etag":"x"}`, nil, 400},
			{"part: wrong size", "PUT", U + "/parts/2", alice, `{"etag":"x","size":5}`, nil, 400},
			{"part: malformed", "PUT", U + "/parts/2", alice, `{"etag":`, nil, 400},

			{"complete: someone else's", "POST", U + "/complete", bob, nil, nil, 404},
			{"complete: missing parts", "POST", U + "/complete", alice, nil, nil, 409},
			{"complete: part 0", "POST", U + "/complete", alice, `{"parts":[{"part_number":0,"etag":"x"}]}`, nil, 400},
			{"complete: beyond part_count", "POST", U + "/complete", alice, `{"parts":[{"part_number":4,"etag":"x"}]}`, nil, 400},
			{"complete: duplicate part", "POST", U + "/complete", alice, `{"parts":[{"part_number":1,"etag":"x"},{"part_number":1,"etag":"x"}]}`, nil, 400},
			{"complete: empty etag", "POST", U + "/complete", alice, `{"parts":[{"part_number":1,"etag":""}]}`, nil, 400},
			{"complete: unknown field", "POST", U + "/complete", alice, `{"parts":[],"force":true}`, nil, 400},

			{"proof: no such challenge", "POST", "/uploads/proofs/chl_nope", carol, `{"digests":[]}`, nil, 404},
			{"proof: someone else's challenge", "POST", "/uploads/proofs/" + challengeID, bob, map[string]any{"digests": []string{sha, sha, sha}}, nil, 404},
			{"proof: too few digests", "POST", "/uploads/proofs/" + challengeID, carol, map[string]any{"digests": []string{sha}}, nil, 400},
			{"proof: non-hex digest", "POST", "/uploads/proofs/" + challengeID, carol, map[string]any{"digests": []string{sha, sha, strings.Repeat("g", 64)}}, nil, 400},
			{"proof: malformed", "POST", "/uploads/proofs/" + challengeID, carol, `{"digests":"abc"}`, nil, 400},

			{"file: someone else's", "GET", "/files/" + fileID, bob, nil, nil, 404},
			{"file: delete someone else's", "DELETE", "/files/" + fileID, bob, nil, nil, 404},
			{"files: limit 0", "GET", "/files?limit=0", alice, nil, nil, 400},
			{"files: limit not a number", "GET", "/files?limit=many", alice, nil, nil, 400},
			{"files: limit too large", "GET", "/files?limit=1001", alice, nil, nil, 400},
			{"files: bad cursor", "GET", "/files?cursor=abc", alice, nil, nil, 400},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				r := a.do(tc.method, tc.path, tc.token, tc.body, tc.header...)
				if r.Status != tc.want {
					t.Fatalf("%s %s = %d %s, want %d", tc.method, tc.path, r.Status, r.Body, tc.want)
				}
				var p struct {
					Status int
					Code   string
				}
				if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" || json.Unmarshal(r.Body, &p) != nil || p.Status != tc.want || p.Code == "" {
					t.Fatalf("answer is not a problem: %s %s", ct, r.Body)
				}
			})
		}
		after := a.snapshot(row.S3Key, row.S3UploadID)
		for table, rows := range before.Tables {
			if !reflect.DeepEqual(rows, after.Tables[table]) {
				t.Errorf("table %s changed:\nbefore %v\nafter  %v", table, rows, after.Tables[table])
			}
		}
		if !reflect.DeepEqual(before.Objects, after.Objects) || !reflect.DeepEqual(before.Pending, after.Pending) || !reflect.DeepEqual(before.Parts, after.Parts) {
			t.Errorf("bucket changed:\nbefore %+v\nafter  %+v", before, after)
		}
	})
}

// uploadOf returns the upload that produced a file.
func (a *api) uploadOf(fileID string) string {
	var id string
	a.db.Table("files").Select("upload_id").Where("id = ?", fileID).Scan(&id)
	return id
}
