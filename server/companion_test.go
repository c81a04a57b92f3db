package server_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
)

// companionPut PUTs body to a Companion-style presigned URL, with a
// Content-Type the signature does not cover (Uppy sends the file's).
func companionPut(t *testing.T, u string, body []byte) string {
	t.Helper()
	return putPart(t, map[string]any{"method": "PUT", "url": u, "headers": map[string]any{"Content-Type": "application/x-whatever"}}, body)
}

func wantKeys(t *testing.T, what string, m map[string]any, want string) {
	t.Helper()
	if got := keys(m); got != want {
		t.Fatalf("%s has fields %s, want %s", what, got, want)
	}
}

func companionError(t *testing.T, r reply, status int) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
	m := r.json(t)
	if e, ok := m["error"].(string); !ok || e == "" {
		t.Fatalf("error body %s has no error string", r.Body)
	}
}

// Done-when 7: the Companion routes answer with Companion 6.2.2's field
// names, types and status codes; an upload made through them goes through
// the upload service (verified, a file, an upload.completed event).
func TestCompanionRoutes(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		a := newAPI(t, db)
		a.runJobs(t)
		tok := a.user("alice")
		other := a.user("mallory")

		r := a.do("POST", "/s3/multipart", tok, map[string]any{"filename": "movie.bin", "type": "video/mp4",
			"metadata": map[string]any{"name": "movie.bin", "caption": nil}})
		if r.Status != 200 {
			t.Fatalf("create: %d %s", r.Status, r.Body)
		}
		created := r.json(t)
		wantKeys(t, "create", created, "[bucket key uploadId]")
		for _, f := range []string{"bucket", "key", "uploadId"} {
			if s, ok := created[f].(string); !ok || s == "" {
				t.Fatalf("%s = %#v, want a string", f, created[f])
			}
		}
		key, s3id := created["key"].(string), created["uploadId"].(string)
		base := "/s3/multipart/" + url.PathEscape(s3id)
		q := "?key=" + url.QueryEscape(key)

		r = a.do("GET", base+q, tok, nil)
		if r.Status != 200 || strings.TrimSpace(string(r.Body)) != "[]" {
			t.Fatalf("parts of a new upload: %d %s, want []", r.Status, r.Body)
		}

		data := make([]byte, 2*5*mib+1234)
		rand.Read(data)
		parts := [][]byte{data[:5*mib], data[5*mib : 10*mib], data[10*mib:]}

		r = a.do("GET", base+"/1"+q, tok, nil)
		if r.Status != 200 {
			t.Fatalf("sign part: %d %s", r.Status, r.Body)
		}
		signed := r.json(t)
		wantKeys(t, "sign", signed, "[expires url]")
		if _, ok := signed["expires"].(float64); !ok {
			t.Fatalf("expires = %#v, want a number", signed["expires"])
		}
		etag1 := companionPut(t, signed["url"].(string), parts[0])

		r = a.do("GET", base+"/batch"+q+"&partNumbers=2,3", tok, nil)
		if r.Status != 200 {
			t.Fatalf("batch: %d %s", r.Status, r.Body)
		}
		batch := r.json(t)
		wantKeys(t, "batch", batch, "[presignedUrls]")
		urls := batch["presignedUrls"].(map[string]any)
		wantKeys(t, "presignedUrls", urls, "[2 3]")
		etag2 := companionPut(t, urls["2"].(string), parts[1])
		etag3 := companionPut(t, urls["3"].(string), parts[2])

		r = a.do("GET", base+q, tok, nil)
		var listed []map[string]any
		if err := jsonUnmarshal(r.Body, &listed); err != nil || r.Status != 200 || len(listed) != 3 {
			t.Fatalf("parts: %d %s", r.Status, r.Body)
		}
		for i, p := range listed {
			wantKeys(t, "part", p, "[ETag LastModified PartNumber Size]")
			if n, ok := p["PartNumber"].(float64); !ok || int(n) != i+1 {
				t.Fatalf("PartNumber = %#v, want the number %d", p["PartNumber"], i+1)
			}
			if n, ok := p["Size"].(float64); !ok || int(n) != len(parts[i]) {
				t.Fatalf("Size = %#v, want %d", p["Size"], len(parts[i]))
			}
			if s, ok := p["LastModified"].(string); !ok {
				t.Fatalf("LastModified = %#v", p["LastModified"])
			} else if _, err := time.Parse(time.RFC3339, s); err != nil {
				t.Fatalf("LastModified %q: %v", s, err)
			}
			if _, ok := p["ETag"].(string); !ok {
				t.Fatalf("ETag = %#v", p["ETag"])
			}
		}

		// Another user's uploadId is 404 on every route.
		for _, c := range []struct{ method, path string }{
			{"GET", base + q}, {"GET", base + "/1" + q}, {"GET", base + "/batch" + q + "&partNumbers=1"},
			{"POST", base + "/complete" + q}, {"DELETE", base + q},
		} {
			var body any
			if c.method == "POST" {
				body = map[string]any{"parts": []map[string]any{{"PartNumber": 1, "ETag": etag1}}}
			}
			companionError(t, a.do(c.method, c.path, other, body), 404)
		}

		// ETags quoted and not, in any order.
		r = a.do("POST", base+"/complete"+q, tok, map[string]any{"parts": []map[string]any{
			{"PartNumber": 3, "ETag": etag3}, {"PartNumber": 1, "ETag": strings.Trim(etag1, `"`)}, {"PartNumber": 2, "ETag": etag2},
		}})
		if r.Status != 200 {
			t.Fatalf("complete: %d %s", r.Status, r.Body)
		}
		done := r.json(t)
		wantKeys(t, "complete", done, "[bucket key location]")
		if done["key"] != key || done["bucket"] != created["bucket"] {
			t.Fatalf("complete = %s", r.Body)
		}
		loc := done["location"].(string)
		id := loc[strings.LastIndex(loc, "/")+1:]
		if !strings.HasSuffix(loc, "/uploads/"+id) || !strings.HasPrefix(id, "upl_") {
			t.Fatalf("location = %q", loc)
		}
		st := a.waitState(tok, id, "success")
		if st["sha256"] != hexSHA(data) || st["size"].(float64) != float64(len(data)) {
			t.Fatalf("verified upload = %v", st)
		}
		var events int64
		db.DB.Model(&models.OutboxEvent{}).Where("type = ? AND subject = ?", "upload.completed", id).Count(&events)
		if events != 1 {
			t.Fatalf("upload.completed events = %d", events)
		}
		obj, err := a.store.Get(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(obj)
		obj.Close()
		if !bytes.Equal(got, data) {
			t.Fatal("the object is not the file")
		}
		// Completing again answers the same.
		if r := a.do("POST", base+"/complete"+q, tok, map[string]any{"parts": []map[string]any{{"PartNumber": 1, "ETag": etag1}}}); r.Status != 200 {
			t.Fatalf("complete again: %d %s", r.Status, r.Body)
		}

		// Abort.
		r = a.do("POST", "/s3/multipart", tok, map[string]any{"filename": "x.bin", "type": ""})
		s3id2 := r.json(t)["uploadId"].(string)
		r = a.do("DELETE", "/s3/multipart/"+url.PathEscape(s3id2)+"?key=whatever", tok, nil)
		if r.Status != 200 || strings.TrimSpace(string(r.Body)) != "{}" {
			t.Fatalf("abort: %d %s", r.Status, r.Body)
		}
		var aborted models.Upload
		db.DB.Where("s3_upload_id = ?", s3id2).Take(&aborted)
		if aborted.State != "aborted" {
			t.Fatalf("aborted upload is %s", aborted.State)
		}
	})
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// The 400 answers Companion gives, in its {"error"} shape, and nothing
// created by them.
func TestCompanionBadRequests(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		a := newAPI(t, db)
		tok := a.user("alice")
		r := a.do("POST", "/s3/multipart", tok, map[string]any{"filename": "a.bin", "type": "text/plain"})
		s3id := url.PathEscape(r.json(t)["uploadId"].(string))
		base := "/s3/multipart/" + s3id
		tests := []struct {
			name, method, path string
			body               any
		}{
			{"empty filename", "POST", "/s3/multipart", map[string]any{"filename": "", "type": "text/plain"}},
			{"no filename", "POST", "/s3/multipart", map[string]any{"type": "text/plain"}},
			{"filename not a string", "POST", "/s3/multipart", map[string]any{"filename": 7, "type": "text/plain"}},
			{"type a number", "POST", "/s3/multipart", map[string]any{"filename": "a", "type": 5}},
			{"type null", "POST", "/s3/multipart", map[string]any{"filename": "a", "type": nil}},
			{"no type", "POST", "/s3/multipart", map[string]any{"filename": "a"}},
			{"metadata a string", "POST", "/s3/multipart", map[string]any{"filename": "a", "type": "", "metadata": "x"}},
			{"path in filename", "POST", "/s3/multipart", map[string]any{"filename": "../a", "type": ""}},
			{"malformed JSON", "POST", "/s3/multipart", `{"filename":`},
			{"parts without key", "GET", base, nil},
			{"sign without key", "GET", base + "/1", nil},
			{"part number not a number", "GET", base + "/abc?key=k", nil},
			{"part number 0", "GET", base + "/0?key=k", nil},
			{"part number 10001", "GET", base + "/10001?key=k", nil},
			{"batch without part numbers", "GET", base + "/batch?key=k", nil},
			{"batch without key", "GET", base + "/batch?partNumbers=1", nil},
			{"batch with a bad number", "GET", base + "/batch?key=k&partNumbers=1,x", nil},
			{"complete without key", "POST", base + "/complete", map[string]any{"parts": []any{}}},
			{"complete without parts", "POST", base + "/complete?key=k", map[string]any{}},
			{"parts not an array", "POST", base + "/complete?key=k", map[string]any{"parts": "1"}},
			{"PartNumber a string", "POST", base + "/complete?key=k", map[string]any{"parts": []any{map[string]any{"PartNumber": "1", "ETag": "x"}}}},
			{"ETag missing", "POST", base + "/complete?key=k", map[string]any{"parts": []any{map[string]any{"PartNumber": 1}}}},
			{"ETag a number", "POST", base + "/complete?key=k", map[string]any{"parts": []any{map[string]any{"PartNumber": 1, "ETag": 5}}}},
			{"part not an object", "POST", base + "/complete?key=k", map[string]any{"parts": []any{1}}},
			{"part never uploaded", "POST", base + "/complete?key=k", map[string]any{"parts": []any{map[string]any{"PartNumber": 1, "ETag": "abc"}}}},
			{"empty parts", "POST", base + "/complete?key=k", map[string]any{"parts": []any{}}},
			{"abort without key", "DELETE", base, nil},
			{"params without filename", "GET", "/s3/params?type=text/plain", nil},
			{"params with control characters in metadata", "GET", "/s3/params?filename=a&metadata[x]=%01", nil},
		}
		var before int64
		db.DB.Model(&models.Upload{}).Count(&before)
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				companionError(t, a.do(tc.method, tc.path, tok, tc.body), 400)
			})
		}
		var after int64
		db.DB.Model(&models.Upload{}).Count(&after)
		var st models.Upload
		db.DB.Where("user_id <> ''").Order("created_at").Take(&st)
		if after != before || st.State != "uploading" {
			t.Fatalf("bad requests changed uploads: %d → %d, state %s", before, after, st.State)
		}
		if r := a.do("GET", base+"?key=k", "", nil); r.Status != 401 {
			t.Fatalf("anonymous: %d %s", r.Status, r.Body)
		}
		companionError(t, a.do("GET", "/s3/multipart/nope?key=k", tok, nil), 404)
	})
}

// Issue 11, item 6: GET /s3/params opens an upload, so a page elsewhere
// must not make the browser call it. A navigation from another site (or a
// sibling subdomain) carries the SameSite=Lax cookie and Sec-Fetch-Site
// cross-site (same-site) but no Origin, and is refused with nothing
// created; ferry's own pages (same-origin), typed URLs (none), CORS
// fetches from ferry's origins and non-browser clients get their policy.
func TestCompanionParamsRefusesCrossSite(t *testing.T) {
	db := testenv.NewDB(t, "sqlite")
	a := newAPI(t, db)
	tok := a.user("alice")
	r := a.do("POST", "/session", "", map[string]any{"token": tok})
	cookie := r.Header.Get("Set-Cookie")
	cookie = cookie[:strings.Index(cookie, ";")]
	count := func() (n int64) { db.DB.Model(&models.Upload{}).Count(&n); return n }
	const params = "/s3/params?filename=a.txt&type=text/plain"
	for _, tc := range []struct {
		name   string
		token  string
		header []string
		status int
	}{
		{"navigation from another site", "", []string{"Cookie", cookie, "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "navigate"}, 403},
		{"navigation from a sibling subdomain", "", []string{"Cookie", cookie, "Sec-Fetch-Site", "same-site", "Sec-Fetch-Mode", "navigate"}, 403},
		{"fetch from another site", "", []string{"Cookie", cookie, "Sec-Fetch-Site", "cross-site", "Origin", "http://evil.example"}, 403},
		{"bearer token from another site", tok, []string{"Sec-Fetch-Site", "cross-site", "Origin", "http://evil.example"}, 403},
		{"ferry's own page (Uppy 6)", "", []string{"Cookie", cookie, "Sec-Fetch-Site", "same-origin", "Sec-Fetch-Mode", "cors"}, 200},
		{"typed into the address bar", "", []string{"Cookie", cookie, "Sec-Fetch-Site", "none", "Sec-Fetch-Mode", "navigate"}, 200},
		{"CORS fetch from ferry's origin (Uppy 5)", tok, []string{"Sec-Fetch-Site", "cross-site", "Origin", "http://localhost"}, 200},
		{"no browser", tok, nil, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := count()
			r := a.do("GET", params, tc.token, nil, tc.header...)
			if tc.status != 200 {
				companionError(t, r, tc.status)
			} else if r.Status != 200 {
				t.Fatalf("%d %s", r.Status, r.Body)
			}
			want := int64(0)
			if tc.status == 200 {
				want = 1
			}
			if opened := count() - before; opened != want {
				t.Fatalf("answered %d and opened %d uploads", r.Status, opened)
			}
		})
	}
}

// Browsers on ferry's origins may call the Companion routes with cookies
// or an Authorization header; others get no CORS grant. Companion's i-am
// header is never sent.
func TestCompanionCORSAndCookie(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		a := newAPI(t, db)
		tok := a.user("alice")
		for _, tc := range []struct {
			origin string
			status int
			allow  string
		}{{"http://localhost", 204, "http://localhost"}, {"http://evil.example", 403, ""}} {
			r := a.do("OPTIONS", "/s3/multipart", "", nil, "Origin", tc.origin,
				"Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization,content-type")
			if r.Status != tc.status || r.Header.Get("Access-Control-Allow-Origin") != tc.allow {
				t.Fatalf("preflight from %s: %d %v", tc.origin, r.Status, r.Header)
			}
			if tc.allow != "" && (!strings.Contains(strings.ToLower(r.Header.Get("Access-Control-Allow-Headers")), "authorization") ||
				r.Header.Get("Access-Control-Allow-Credentials") != "true") {
				t.Fatalf("preflight grants %v", r.Header)
			}
		}
		r := a.do("POST", "/session", "", map[string]any{"token": tok})
		cookie := r.Header.Get("Set-Cookie")
		cookie = cookie[:strings.Index(cookie, ";")]
		r = a.do("POST", "/s3/multipart", "", map[string]any{"filename": "c.bin", "type": "text/plain"}, "Cookie", cookie, "Origin", "http://localhost")
		if r.Status != 200 || r.Header.Get("Access-Control-Allow-Origin") != "http://localhost" || r.Header.Get("i-am") != "" {
			t.Fatalf("cookie create: %d %v %s", r.Status, r.Header, r.Body)
		}
		// A cookie from another origin is refused (CSRF), in Companion's shape.
		companionError(t, a.do("POST", "/s3/multipart", "", map[string]any{"filename": "c.bin", "type": "text/plain"},
			"Cookie", cookie, "Origin", "http://evil.example"), 403)
	})
}

// GET /s3/params answers a POST policy; a browser-style form POST with it
// lands the object, which ferry then adopts and verifies like any upload.
func TestCompanionParams(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		a := newAPI(t, db)
		a.runJobs(t)
		tok := a.user("alice")
		r := a.do("GET", "/s3/params?filename=photo.jpg&type=image/jpeg&metadata[name]=photo.jpg&metadata[caption]=hi", tok, nil)
		if r.Status != 200 {
			t.Fatalf("params: %d %s", r.Status, r.Body)
		}
		m := r.json(t)
		wantKeys(t, "params", m, "[expires fields method url]")
		fields := m["fields"].(map[string]any)
		if m["method"] != "POST" || fields["key"] == nil || fields["Content-Type"] != "image/jpeg" || fields["x-amz-meta-caption"] != "hi" {
			t.Fatalf("params = %s", r.Body)
		}
		if _, ok := m["expires"].(float64); !ok {
			t.Fatalf("expires = %#v", m["expires"])
		}
		data := make([]byte, 700<<10)
		rand.Read(data)
		form := map[string]string{}
		for k, v := range fields {
			form[k] = v.(string)
		}
		if code, body := testenv.PostForm(t, m["url"].(string), form, data); code != 201 {
			t.Fatalf("form POST: %d %s", code, body)
		}
		id := strings.TrimPrefix(fields["key"].(string), "posts/")
		st := a.waitState(tok, id, "success")
		if st["sha256"] != hexSHA(data) || st["file_name"] != "photo.jpg" {
			t.Fatalf("adopted upload = %v", st)
		}
		var events int64
		db.DB.Model(&models.OutboxEvent{}).Where("type = ? AND subject = ?", "upload.completed", id).Count(&events)
		if events != 1 {
			t.Fatalf("upload.completed events = %d", events)
		}
	})
}
