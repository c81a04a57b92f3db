package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-io/ferry/client"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/notify/receiver"
)

// hookSink is a host app's webhook endpoint built on notify/receiver: it
// keeps the data of every upload.completed it verified.
type hookSink struct {
	srv *httptest.Server
	mu  sync.Mutex
	h   *receiver.Handler
	got []json.RawMessage
}

func newHookSink(t *testing.T, f *Ferry) *hookSink {
	t.Helper()
	s := &hookSink{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		h := s.h
		s.mu.Unlock()
		if h == nil {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(s.srv.Close)
	r := f.Do("POST", "/admin/webhooks", f.Token, map[string]any{"url": s.srv.URL + "/hooks", "events": []string{"upload.completed"}})
	if r.Status != 201 {
		t.Fatalf("webhook: %d %s", r.Status, r.Body)
	}
	var wh struct{ Secret string }
	r.JSON(t, &wh)
	v, err := receiver.NewVerifier(wh.Secret)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.h = &receiver.Handler{Verifier: v, Store: receiver.NewMemoryStore(time.Hour, nil),
		Process: func(_ context.Context, m *receiver.Message) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.got = append(s.got, m.Data)
			return nil
		}}
	s.mu.Unlock()
	return s
}

// completed waits for the verified upload.completed of fileID.
func (s *hookSink) completed(t *testing.T, fileID string) map[string]any {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		s.mu.Lock()
		for _, raw := range s.got {
			var d map[string]any
			if json.Unmarshal(raw, &d) == nil && d["file_id"] == fileID {
				s.mu.Unlock()
				return d
			}
		}
		s.mu.Unlock()
	}
	t.Fatalf("no signed upload.completed for %s", fileID)
	return nil
}

// serviceKey creates a service key through the admin API.
func (f *Ferry) serviceKey(scopes ...string) string {
	f.t.Helper()
	r := f.Do("POST", "/admin/service-keys", f.Token, map[string]any{"name": "backend", "scopes": scopes})
	if r.Status != 201 {
		f.t.Fatalf("service key: %d %s", r.Status, r.Body)
	}
	var k struct{ Key string }
	r.JSON(f.t, &k)
	return k.Key
}

func (f *Ferry) ticket(key string, body map[string]any) string {
	f.t.Helper()
	r := f.Do("POST", "/tickets", key, body)
	if r.Status != 201 {
		f.t.Fatalf("ticket: %d %s", r.Status, r.Body)
	}
	var tk struct{ Ticket string }
	r.JSON(f.t, &tk)
	return tk.Ticket
}

type fileView struct {
	FileID         string            `json:"file_id"`
	Size           int64             `json:"size"`
	SHA256         string            `json:"sha256"`
	Verified       bool              `json:"sha256_verified"`
	DownloadURL    string            `json:"download_url"`
	Metadata       map[string]string `json:"metadata"`
	ClientMetadata map[string]string `json:"client_metadata"`
	TicketID       string            `json:"ticket_id"`
}

// Issue 14, done-when 3: a backend's ticket with metadata
// {"post_id":"42"}, max_size and content_types. `ferry upload --ticket`
// within it makes a file of the ticket's user carrying the metadata, in
// the file and in the signed upload.completed; an upload past it is
// refused; the ticket cannot be used twice; an expired ticket is refused.
func TestUploadTicketEndToEnd(t *testing.T) {
	forEachDriver(t, func(t *testing.T, mysql bool) {
		f := startWithAdmin(t, mysql, map[string]string{"FERRY_WEBHOOK_ALLOW_PRIVATE": "true", "FERRY_JOB_POLL": "50ms"})
		hooks := newHookSink(t, f)
		key := f.serviceKey("tickets:create")
		aliceID, alice := f.CreateUser("alice", false)
		dir := t.TempDir()
		clip, sum := writeRandomFile(t, dir, "clip.mp4", 12<<20+5)
		big, _ := writeRandomFile(t, dir, "big.mp4", 16<<20+1)
		photo, _ := writeRandomFile(t, dir, "photo.png", 1<<20)
		tk := f.ticket(key, map[string]any{"user_id": aliceID, "metadata": map[string]any{"post_id": "42"},
			"max_size": 16 << 20, "content_types": []string{"video/*"}, "expires_in": 600})

		upload := func(path string, extra ...string) (map[string]any, int) {
			cmd := cli(t, f, f.URL, "", append([]string{"upload", "--json", "--ticket", tk}, append(extra, path)...)...)
			out, err := cmd.Output()
			code := 0
			if ee, ok := err.(interface{ ExitCode() int }); ok {
				code = ee.ExitCode()
			}
			recs := jsonLines(t, out)
			if m := last(recs, "done"); m != nil {
				return m, code
			}
			return last(recs, "error"), code
		}
		// Past the ticket: refused (exit 5), and nothing is used up.
		if m, code := upload(big); code != 5 || m["code"] != "ticket_max_size" {
			t.Fatalf("upload past max_size: exit %d %v", code, m)
		}
		if m, code := upload(photo); code != 5 || m["code"] != "content_type_not_allowed" {
			t.Fatalf("upload of another type: exit %d %v", code, m)
		}
		done, code := upload(clip, "--meta", "caption=our trip")
		if code != 0 || done["file_id"] == nil {
			t.Fatalf("upload within the ticket: exit %d %v", code, done)
		}
		fileID := done["file_id"].(string)

		var file fileView
		f.Do("GET", "/files/"+fileID, alice, nil).JSON(t, &file)
		if file.Metadata["post_id"] != "42" || file.ClientMetadata["caption"] != "our trip" || file.TicketID == "" || file.Size != 12<<20+5 {
			t.Fatalf("alice's file %+v", file)
		}
		ev := hooks.completed(t, fileID)
		meta, _ := ev["metadata"].(map[string]any)
		cmeta, _ := ev["client_metadata"].(map[string]any)
		if meta["post_id"] != "42" || cmeta["caption"] != "our trip" || ev["user_id"] != aliceID || ev["sha256"] != sum || ev["ticket_id"] != file.TicketID {
			t.Fatalf("upload.completed %v", ev)
		}

		// The ticket is spent: another file, or the same one again, starts
		// nothing; and it opens no other route.
		if m, code := upload(photo); code != 5 || m["code"] != "ticket_used" {
			t.Fatalf("second use: exit %d %v", code, m)
		}
		want(t, f.Do("POST", "/uploads", tk, map[string]any{"file_name": "again.mp4", "size": 100, "content_type": "video/mp4"}), 409, "ticket_used")
		want(t, f.Do("GET", "/files", tk, nil), 403, "ticket_not_allowed")
		var list struct{ Files []fileView }
		f.Do("GET", "/files", alice, nil).JSON(t, &list)
		if len(list.Files) != 1 {
			t.Fatalf("alice has %d files, want 1", len(list.Files))
		}

		// An unused ticket past its expiry is refused.
		short := f.ticket(key, map[string]any{"user_id": aliceID, "expires_in": 1})
		time.Sleep(1100 * time.Millisecond)
		want(t, f.Do("POST", "/uploads", short, map[string]any{"file_name": "late.mp4", "size": 100}), 401, "ticket_expired")
	})
}

// Issue 14, done-when 4: a grant lets another user download a file
// through the proxy, with Range; revoking it answers 410 on the very next
// request; a grant for someone else's file is 404. A service key with
// grants:create grants any file.
func TestDownloadGrantEndToEnd(t *testing.T) {
	forEachDriver(t, func(t *testing.T, mysql bool) {
		f := startWithAdmin(t, mysql, map[string]string{"FERRY_JOB_POLL": "50ms"})
		_, alice := f.CreateUser("alice", false)
		bobID, bob := f.CreateUser("bob", false)
		carolID, carol := f.CreateUser("carol", false)
		ctx := context.Background()
		dir := t.TempDir()
		path, sum := writeRandomFile(t, dir, "movie.bin", 9<<20+3)
		data, _ := os.ReadFile(path)
		up, err := f.Client(alice).UploadFile(ctx, path, client.UploadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f.waitVerified(alice, up.UploadID)

		want(t, f.Do("POST", "/files/"+up.FileID+"/grants", bob, map[string]any{"user_id": carolID}), 404, "file_not_found")
		want(t, f.Do("POST", "/files/"+up.FileID+"/grants", alice, map[string]any{"user_id": "usr_nobody"}), 404, "user_not_found")
		r := f.Do("POST", "/files/"+up.FileID+"/grants", alice, map[string]any{"user_id": bobID})
		want(t, r, 201, "")
		var g struct {
			GrantID     string `json:"grant_id"`
			DownloadURL string `json:"download_url"`
			State       string `json:"state"`
		}
		r.JSON(t, &g)
		if g.State != "active" || !strings.Contains(g.DownloadURL, "u="+bobID) {
			t.Fatalf("grant %s", r.Body)
		}

		// Bob downloads a range, then the whole file, with his link.
		ranged := func(link, rng string) (int, []byte) {
			req, _ := http.NewRequest("GET", link, nil)
			req.Header.Set("Range", rng)
			resp, err := f.HTTP.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, b
		}
		if code, b := ranged(g.DownloadURL, "bytes=1000-1999"); code != 206 || !bytes.Equal(b, data[1000:2000]) {
			t.Fatalf("range: %d, %d bytes", code, len(b))
		}
		dl, err := f.Client(bob).Download(ctx, g.DownloadURL, filepath.Join(dir, "bob.bin"), client.DownloadOptions{})
		if err != nil || dl.SHA256 != sum {
			t.Fatalf("bob's download: %+v %v", dl, err)
		}
		// Carol's link from a service key.
		key := f.serviceKey("grants:create")
		r = f.Do("POST", "/files/"+up.FileID+"/grants", key, map[string]any{"user_id": carolID, "expires_in": 3600})
		want(t, r, 201, "")
		var cg struct {
			DownloadURL string `json:"download_url"`
		}
		r.JSON(t, &cg)
		if code, _ := ranged(cg.DownloadURL, "bytes=-10"); code != 206 {
			t.Fatalf("carol's range: %d", code)
		}
		want(t, f.Do("GET", "/files/"+up.FileID+"/grants", carol, nil), 404, "file_not_found")
		var list struct {
			Grants []struct{ State, UserID string } `json:"grants"`
		}
		f.Do("GET", "/files/"+up.FileID+"/grants", alice, nil).JSON(t, &list)
		if len(list.Grants) != 2 {
			t.Fatalf("grants %+v", list)
		}

		// Revoked: the very next request with the same link is 410.
		want(t, f.Do("DELETE", "/grants/"+g.GrantID, bob, nil), 404, "grant_not_found")
		want(t, f.Do("DELETE", "/grants/"+g.GrantID, alice, nil), 204, "")
		if code, b := ranged(g.DownloadURL, "bytes=0-99"); code != 410 || !strings.Contains(string(b), `"code":"download_revoked"`) {
			t.Fatalf("after revoke: %d %s", code, b)
		}
		want(t, f.Do("GET", "/grants/"+g.GrantID, bob, nil), 200, "")
		if code, _ := ranged(cg.DownloadURL, "bytes=0-0"); code != 206 {
			t.Fatalf("carol's grant after bob's revoke: %d", code)
		}
	})
}

// Issue 14, done-when 5: quotas. Init past what is left is 413
// quota_exceeded (limit and usage in the body); an unsized (Companion)
// upload is 413 at complete; GET /me shows usage that counts content a
// user holds twice once, content two users hold for each, and falls after
// deletes; the export quota is 429 with Retry-After; an admin overrides
// both per user.
func TestQuotasEndToEnd(t *testing.T) {
	forEachDriver(t, func(t *testing.T, mysql bool) {
		f := startWithAdmin(t, mysql, map[string]string{"FERRY_QUOTA_BYTES": "30MiB", "FERRY_QUOTA_EXPORTS_PER_DAY": "1", "FERRY_JOB_POLL": "50ms"})
		aliceID, alice := f.CreateUser("alice", false)
		_, bob := f.CreateUser("bob", false)
		ctx := context.Background()
		dir := t.TempDir()
		path, _ := writeRandomFile(t, dir, "a.bin", 12<<20)

		r := f.Do("POST", "/uploads", alice, map[string]any{"file_name": "huge.bin", "size": 30<<20 + 1})
		want(t, r, 413, "quota_exceeded")
		var p struct{ Limit, Usage, Requested int64 }
		r.JSON(t, &p)
		if p.Limit != 30<<20 || p.Usage != 0 || p.Requested != 30<<20+1 || r.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("problem %s", r.Body)
		}

		usage := func(tok string) (bytes, files int64) {
			var me struct {
				Usage struct{ Bytes, Files int64 }
				Quota struct{ Bytes int64 }
			}
			f.Do("GET", "/me", tok, nil).JSON(t, &me)
			if me.Quota.Bytes != 30<<20 {
				t.Fatalf("quota %+v", me.Quota)
			}
			return me.Usage.Bytes, me.Usage.Files
		}
		ac, bc := f.Client(alice), f.Client(bob)
		var ids []string
		for range 2 { // the same content twice
			up, err := ac.UploadFile(ctx, path, client.UploadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !up.Instant {
				f.waitVerified(alice, up.UploadID)
			}
			ids = append(ids, up.FileID)
		}
		up, err := bc.UploadFile(ctx, path, client.UploadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f.waitVerified(bob, up.UploadID)
		if b, n := usage(alice); b != 12<<20 || n != 2 {
			t.Fatalf("alice after dedup: %d bytes in %d files, want 12 MiB in 2", b, n)
		}
		if b, _ := usage(bob); b != 12<<20 {
			t.Fatalf("bob: %d bytes, want 12 MiB", b)
		}

		// An unsized upload over what is left (18 MiB): 413 at complete.
		r = f.Do("POST", "/s3/multipart", alice, map[string]any{"filename": "clip.mp4", "type": "video/mp4"})
		want(t, r, 200, "")
		var mp struct {
			Key      string `json:"key"`
			UploadID string `json:"uploadId"`
		}
		r.JSON(t, &mp)
		base, q := "/s3/multipart/"+url.PathEscape(mp.UploadID), "?key="+url.QueryEscape(mp.Key)
		var parts []map[string]any
		for n := 1; n <= 4; n++ { // 5 + 5 + 5 + 4 MiB = 19 MiB
			size := 5 << 20
			if n == 4 {
				size = 4 << 20
			}
			var signed struct{ URL string }
			f.Do("GET", fmt.Sprintf("%s/%d%s", base, n, q), alice, nil).JSON(t, &signed)
			code, etag, err := putPart(presigned{URL: signed.URL, Method: "PUT"}, bytes.NewReader(make([]byte, size)), int64(size))
			if err != nil || code != 200 {
				t.Fatalf("part %d: %d %v", n, code, err)
			}
			parts = append(parts, map[string]any{"PartNumber": n, "ETag": etag})
		}
		r = f.Do("POST", base+"/complete"+q, alice, map[string]any{"parts": parts})
		want(t, r, 413, "quota_exceeded")
		if !strings.Contains(string(r.Body), `"limit":31457280`) || !strings.Contains(string(r.Body), `"usage":12582912`) {
			t.Fatalf("complete over the quota: %s", r.Body)
		}

		// Deleting one copy frees nothing; both, everything; then the same
		// complete goes through.
		want(t, f.Do("DELETE", "/files/"+ids[0], alice, nil), 204, "")
		if b, n := usage(alice); b != 12<<20 || n != 1 {
			t.Fatalf("after one delete: %d bytes in %d files", b, n)
		}
		want(t, f.Do("DELETE", "/files/"+ids[1], alice, nil), 204, "")
		if b, n := usage(alice); b != 0 || n != 0 {
			t.Fatalf("after both deletes: %d bytes in %d files", b, n)
		}
		want(t, f.Do("POST", base+"/complete"+q, alice, map[string]any{"parts": parts}), 200, "")
		if b, _ := usage(bob); b != 12<<20 {
			t.Fatalf("bob after alice's deletes: %d", b)
		}

		// One export a day: the second is 429 with Retry-After, a replay of
		// the first is not refused; an override lifts the limit.
		want(t, f.Do("POST", "/exports", alice, map[string]any{"scope": "all"}, "Idempotency-Key", "one"), 202, "")
		r = f.Do("POST", "/exports", alice, map[string]any{"scope": "all"}, "Idempotency-Key", "two")
		want(t, r, 429, "quota_exceeded")
		if s, _ := strconv.Atoi(r.Header.Get("Retry-After")); s < 86000 || s > 86400 {
			t.Fatalf("Retry-After %q, want about a day", r.Header.Get("Retry-After"))
		}
		want(t, f.Do("POST", "/exports", alice, map[string]any{"scope": "all"}, "Idempotency-Key", "one"), 200, "")
		want(t, f.Do("PATCH", "/admin/users/"+aliceID, f.Token, map[string]any{"quota_exports_per_day": 0, "quota_bytes": 0}), 200, "")
		want(t, f.Do("POST", "/exports", alice, map[string]any{"scope": "all"}, "Idempotency-Key", "two"), 202, "")
		want(t, f.Do("POST", "/uploads", alice, map[string]any{"file_name": "huge.bin", "size": 30<<20 + 1}), 201, "")
	})
}

// Issue 14 in a real browser: unmodified Uppy 6 on a host app's page (an
// origin FERRY_CORS_ORIGINS allows) uploads a file over 100 MiB with a
// ticket in its companionEndpoint's path, and Uppy 5 a small one (a POST
// policy) with the ticket in its Authorization header. Both files are the
// ticket's user's, with the ticket's metadata and Uppy's meta as client
// metadata, verified.
func TestBrowserUppyWithTickets(t *testing.T) {
	requireBrowser(t)
	origin := "http://" + testenvFree(t)
	f := Start(t, Options{Env: map[string]string{"FERRY_CORS_ORIGINS": origin, "FERRY_JOB_POLL": "50ms"}})
	key := f.serviceKey("tickets:create")
	aliceID, alice := f.CreateUser("alice", false)
	for _, tc := range []struct {
		scenario string
		size     int
	}{{"uppy6-ticket", 101*mib + 4321}, {"uppy5", 300 << 10}} {
		t.Run(tc.scenario, func(t *testing.T) {
			path, sum := randomFile(t, tc.scenario+".bin", tc.size)
			tk := f.ticket(key, map[string]any{"user_id": aliceID, "metadata": map[string]any{"post_id": "42"}, "max_size": tc.size})
			var res uppyResult
			// Uppy 5 sends cfg.token as its bearer: here, the ticket.
			runBrowser(t, map[string]any{"scenario": tc.scenario, "url": f.URL, "origin": origin, "token": tk, "ticket": tk, "file": path}, &res)
			if len(res.Successful) != 1 || len(res.Failed) != 0 {
				t.Fatalf("uppy = %+v", res)
			}
			// Uppy 6 reports ferry's upload URL; Uppy 5's POST policy
			// upload reports the bucket's, so the upload is looked up.
			var id string
			if loc := res.Successful[0].UploadURL; strings.Contains(loc, "/uploads/upl_") {
				id = loc[strings.LastIndex(loc, "/")+1:]
			} else {
				var ids []string
				if err := ferryDB(t, f).Model(&models.Upload{}).Where("file_name = ?", tc.scenario+".bin").Pluck("id", &ids).Error; err != nil || len(ids) != 1 {
					t.Fatalf("uploads of %s: %v %v (uploadURL %q)", tc.scenario, ids, err, loc)
				}
				id = ids[0]
			}
			up := f.waitVerified(alice, id)
			var file fileView
			f.Do("GET", "/files/"+up.FileID, alice, nil).JSON(t, &file)
			if up.SHA256 != sum || file.Metadata["post_id"] != "42" || file.ClientMetadata["name"] != tc.scenario+".bin" || file.TicketID == "" {
				t.Fatalf("alice's file %+v (upload %+v), want the ticket's metadata and Uppy's meta", file, up)
			}
			want(t, f.Do("POST", "/uploads", tk, map[string]any{"file_name": "more.bin", "size": 10}), 409, "ticket_used")
		})
	}
}
