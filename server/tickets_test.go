package server_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/quota"
	"github.com/ferry-io/ferry/server"
	"github.com/ferry-io/ferry/users"
)

// key makes a service key with scopes.
func (a *api) key(scopes ...string) string {
	a.t.Helper()
	_, secret, err := a.users.CreateServiceKey(context.Background(), "backend-"+testenv.RandomHex(4), scopes)
	if err != nil {
		a.t.Fatal(err)
	}
	return secret
}

// userWithID makes a user and returns its id and token.
func (a *api) userWithID(name string) (string, string) {
	a.t.Helper()
	u, token, err := a.users.Create(context.Background(), name, false)
	if err != nil {
		a.t.Fatal(err)
	}
	return u.ID, token
}

// wantProblem fails unless r is a problem+json with status and code.
func wantProblem(t *testing.T, r reply, status int, code string) map[string]any {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
	m := r.json(t)
	if m["code"] != code {
		t.Fatalf("code %v, want %s: %s", m["code"], code, r.Body)
	}
	return m
}

// POST /tickets: a service key with tickets:create makes a ticket for a
// user; everyone else is refused, and every bad field is a 400 that
// creates nothing.
func TestCreateTicket(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		a := newAPI(t, db)
		aliceID, alice := a.userWithID("alice")
		backend, webhooks := a.key(users.ScopeTicketsCreate), a.key(users.ScopeWebhooksManage)
		ok := map[string]any{"user_id": aliceID, "metadata": map[string]any{"post_id": "42"}, "max_size": 10 * mib,
			"content_types": []string{"video/*"}, "expires_in": 600}

		wantProblem(t, a.do("POST", "/tickets", "", ok), 401, "unauthenticated")
		wantProblem(t, a.do("POST", "/tickets", alice, ok), 403, "service_key_required")
		wantProblem(t, a.do("POST", "/tickets", webhooks, ok), 403, "missing_scope")

		with := func(k string, v any) map[string]any {
			m := map[string]any{}
			for key, val := range ok {
				m[key] = val
			}
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
			return m
		}
		sixteen := map[string]any{}
		for i := range 17 {
			sixteen[string(rune('a'+i))] = "v"
		}
		for _, tc := range []struct {
			name   string
			body   any
			status int
			code   string
		}{
			{"no user", with("user_id", nil), 400, "invalid_user"},
			{"user and subject", with("subject", "u-1"), 400, "invalid_user"},
			{"unknown user", with("user_id", "usr_nobody"), 404, "user_not_found"},
			{"17 metadata keys", with("metadata", sixteen), 400, "invalid_metadata"},
			{"metadata not an object", with("metadata", []string{"a"}), 400, "invalid_metadata"},
			{"a value over 1 KiB", with("metadata", map[string]any{"k": strings.Repeat("x", 1025)}), 400, "invalid_metadata"},
			{"max_size 0", with("max_size", 0), 400, "invalid_max_size"},
			{"max_size a string", with("max_size", "10"), 400, "invalid_json"},
			{"bad media type", with("content_types", []string{"video"}), 400, "invalid_content_types"},
			{"expires_in 0", with("expires_in", 0), 400, "invalid_expires_in"},
			{"expires_in over a week", with("expires_in", 8*24*3600), 400, "invalid_expires_in"},
			{"unknown field", with("owner", "x"), 400, "invalid_json"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				wantProblem(t, a.do("POST", "/tickets", backend, tc.body), tc.status, tc.code)
			})
		}
		var n int64
		db.Table("upload_tickets").Count(&n)
		if n != 0 {
			t.Fatalf("refused requests made %d tickets", n)
		}

		r := a.do("POST", "/tickets", backend, ok)
		if r.Status != 201 || r.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("create: %d %s", r.Status, r.Body)
		}
		m := r.json(t)
		if keys(m) != "[expires_at ticket ticket_id user_id]" || !strings.HasPrefix(m["ticket"].(string), "ftk_") || m["user_id"] != aliceID {
			t.Fatalf("answer %s", r.Body)
		}
		exp, _ := time.Parse(time.RFC3339Nano, m["expires_at"].(string))
		if d := time.Until(exp); d < 9*time.Minute || d > 10*time.Minute {
			t.Fatalf("expires_at %s, want 10 minutes from now", exp)
		}
	})
}

// An upload ticket is a bearer credential for the upload routes of its
// one upload: the upload is its user's, within its limits; every other
// route, and every other upload, is refused; a used or expired ticket
// starts nothing; a deactivated user's ticket stops working.
func TestTicketAsCredential(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		a := newAPI(t, db)
		a.runJobs(t)
		aliceID, alice := a.userWithID("alice")
		backend := a.key(users.ScopeTicketsCreate)
		ticket := func(extra map[string]any) string {
			body := map[string]any{"user_id": aliceID, "metadata": map[string]any{"post_id": "42"}}
			for k, v := range extra {
				body[k] = v
			}
			r := a.do("POST", "/tickets", backend, body)
			if r.Status != 201 {
				t.Fatalf("ticket: %d %s", r.Status, r.Body)
			}
			return r.json(t)["ticket"].(string)
		}
		tk := ticket(map[string]any{"max_size": 6 * mib, "content_types": []string{"application/octet-stream"}})
		data := bytes.Repeat([]byte("t"), 6*mib)

		// Alice's own upload, which the ticket must not reach.
		r := a.do("POST", "/uploads", alice, map[string]any{"file_name": "mine.bin", "size": 5 * mib})
		mine := r.json(t)["upload_id"].(string)

		init := map[string]any{"file_name": "t.bin", "size": len(data), "part_size": 5 * mib, "metadata": map[string]any{"caption": "hi"}}
		wantProblem(t, a.do("POST", "/uploads", tk, map[string]any{"file_name": "t.bin", "size": len(data) + 1}), 413, "ticket_max_size")
		wantProblem(t, a.do("POST", "/uploads", tk, map[string]any{"file_name": "t.png", "size": 10, "content_type": "image/png"}), 400, "content_type_not_allowed")
		wantProblem(t, a.do("POST", "/uploads", tk, map[string]any{"file_name": "t.bin", "size": 10, "metadata": "x"}), 400, "invalid_metadata")
		r = a.do("POST", "/uploads", tk, init)
		if r.Status != 201 {
			t.Fatalf("init with the ticket: %d %s", r.Status, r.Body)
		}
		id := r.json(t)["upload_id"].(string)

		for _, tc := range []struct{ method, path string }{
			{"GET", "/me"}, {"GET", "/files"}, {"GET", "/uploads?sha256=" + hexSHA(data) + "&size=1"},
			{"POST", "/uploads/proofs/chl_x"}, {"GET", "/grants/grt_x"}, {"POST", "/tickets"}, {"GET", "/admin/users"},
		} {
			wantProblem(t, a.do(tc.method, tc.path, tk, nil), 403, "ticket_not_allowed")
		}
		wantProblem(t, a.do("GET", "/uploads/"+mine, tk, nil), 404, "upload_not_found")
		wantProblem(t, a.do("DELETE", "/uploads/"+mine, tk, nil), 404, "upload_not_found")

		a.sendAll(tk, id, data, 5*mib)
		if r := a.do("POST", "/uploads/"+id+"/complete", tk, nil); r.Status != 202 {
			t.Fatalf("complete: %d %s", r.Status, r.Body)
		}
		done := a.waitState(tk, id, "success")
		// The file is alice's, with both metadata; the ticket cannot read it.
		r = a.do("GET", "/files/"+done["file_id"].(string), alice, nil)
		f := r.json(t)
		if meta, _ := f["metadata"].(map[string]any); meta["post_id"] != "42" || f["client_metadata"].(map[string]any)["caption"] != "hi" || f["ticket_id"] == "" {
			t.Fatalf("file %s", r.Body)
		}
		wantProblem(t, a.do("GET", "/files/"+done["file_id"].(string), tk, nil), 403, "ticket_not_allowed")
		wantProblem(t, a.do("POST", "/uploads", tk, init), 409, "ticket_used")

		// Uploads through the Companion routes: by header (Uppy 5) and by
		// path (Uppy 6); another upload id is not the ticket's.
		uppy := ticket(nil)
		r = a.do("POST", "/s3/multipart", uppy, map[string]any{"filename": "u.bin", "type": "application/octet-stream",
			"metadata": map[string]any{"name": "u.bin", "relativePath": nil}})
		if r.Status != 200 {
			t.Fatalf("create with a ticket: %d %s", r.Status, r.Body)
		}
		s3id, key := r.json(t)["uploadId"].(string), r.json(t)["key"].(string)
		r = a.do("POST", "/s3/multipart", uppy, map[string]any{"filename": "u2.bin", "type": "application/octet-stream"})
		if r.Status != 409 || r.json(t)["code"] != "ticket_used" || r.json(t)["error"] == "" {
			t.Fatalf("a second create: %d %s", r.Status, r.Body)
		}
		q := "?key=" + url.QueryEscape(key)
		if r := a.do("GET", "/s3/multipart/"+url.PathEscape(s3id)+q, uppy, nil); r.Status != 200 {
			t.Fatalf("parts by header: %d %s", r.Status, r.Body)
		}
		if r := a.do("GET", "/tickets/"+uppy+"/s3/multipart/"+url.PathEscape(s3id)+q, "", nil); r.Status != 200 {
			t.Fatalf("parts by path: %d %s", r.Status, r.Body)
		}
		if r := a.do("GET", "/tickets/"+tk+"/s3/multipart/"+url.PathEscape(s3id)+q, "", nil); r.Status != 404 {
			t.Fatalf("another ticket's upload: %d %s", r.Status, r.Body)
		}
		if r := a.do("GET", "/tickets/ftk_nonsense/s3/multipart/"+url.PathEscape(s3id)+q, "", nil); r.Status != 401 {
			t.Fatalf("unknown ticket in the path: %d %s", r.Status, r.Body)
		}
		wantProblem(t, a.do("GET", "/uploads/"+id, uppy, nil), 404, "upload_not_found")

		// An unused ticket past its expiry is refused; so is every ticket
		// of a deactivated user.
		short := ticket(map[string]any{"expires_in": 1})
		time.Sleep(1100 * time.Millisecond)
		wantProblem(t, a.do("POST", "/uploads", short, init), 401, "ticket_expired")
		fresh := ticket(nil)
		if _, err := a.users.SetActive(context.Background(), aliceID, false); err != nil {
			t.Fatal(err)
		}
		wantProblem(t, a.do("POST", "/uploads", fresh, init), 401, "unauthenticated")
	})
}

// Uppy 6 carries the ticket in its companionEndpoint's path; the access
// log never shows it.
func TestTicketInPathIsNotLogged(t *testing.T) {
	db := testenv.NewDB(t, "sqlite")
	var logs testenv.SyncBuffer
	a := newAPIWith(t, db, func(d *server.Deps) {
		d.Log = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	aliceID, _ := a.userWithID("alice")
	r := a.do("POST", "/tickets", a.key(users.ScopeTicketsCreate), map[string]any{"user_id": aliceID})
	tk := r.json(t)["ticket"].(string)
	if r := a.do("POST", "/tickets/"+tk+"/s3/multipart", "", map[string]any{"filename": "u.bin", "type": ""}); r.Status != 200 {
		t.Fatalf("create by path: %d %s", r.Status, r.Body)
	}
	if strings.Contains(logs.String(), tk) || !strings.Contains(logs.String(), `"path":"/tickets/REDACTED/s3/multipart"`) {
		t.Fatalf("the log shows the ticket, or not the redacted path:\n%s", logs.String())
	}
}

// GET /me shows usage and quota; PATCH /admin/users/{id} overrides a
// user's quotas (null: back to the setting), refusing bad values.
func TestMeAndQuotaOverrides(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		a := newAPIWith(t, db, func(d *server.Deps) {
			d.Quotas = testenv.Must(quota.New(quota.Config{DB: db.DB, Defaults: quota.Limits{Bytes: 50 * mib, ExportsPerDay: 3}, Now: nil}))
		})
		_, admin, err := a.users.Create(context.Background(), "root", true)
		if err != nil {
			t.Fatal(err)
		}
		aliceID, alice := a.userWithID("alice")
		a.do("POST", "/uploads", alice, map[string]any{"file_name": "a.bin", "size": 7 * mib})
		me := a.do("GET", "/me", alice, nil).json(t)
		u, q := me["usage"].(map[string]any), me["quota"].(map[string]any)
		if me["id"] != aliceID || u["bytes"] != 0.0 || u["reserved_bytes"] != float64(7*mib) || u["open_uploads"] != 1.0 ||
			q["bytes"] != float64(50*mib) || q["exports_per_day"] != 3.0 || q["open_uploads"] != 100.0 || q["max_file_size"] == nil {
			t.Fatalf("me %v", me)
		}
		for _, body := range []string{`{"quota_bytes":-1}`, `{"quota_bytes":1.5}`, `{"quota_bytes":"1"}`, `{"quota_exports_per_day":99999999999}`, `{"quota":1}`} {
			r := a.do("PATCH", "/admin/users/"+aliceID, admin, body)
			if r.Status != 400 {
				t.Fatalf("%s: %d %s", body, r.Status, r.Body)
			}
		}
		wantProblem(t, a.do("PATCH", "/admin/users/"+aliceID, alice, `{"quota_bytes":0}`), 403, "admin_only")
		wantProblem(t, a.do("PATCH", "/admin/users/usr_nobody", admin, `{"quota_bytes":0}`), 404, "user_not_found")
		r := a.do("PATCH", "/admin/users/"+aliceID, admin, `{"quota_bytes":0,"quota_exports_per_day":1}`)
		if r.Status != 200 || !strings.Contains(string(r.Body), `"quota_overrides":{"bytes":0,"exports_per_day":1}`) {
			t.Fatalf("patch: %d %s", r.Status, r.Body)
		}
		if q := a.do("GET", "/me", alice, nil).json(t)["quota"].(map[string]any); q["bytes"] != 0.0 || q["exports_per_day"] != 1.0 {
			t.Fatalf("quota after the override %v", q)
		}
		r = a.do("PATCH", "/admin/users/"+aliceID, admin, `{"quota_bytes":null}`)
		if r.Status != 200 || !strings.Contains(string(r.Body), `"quota_overrides":{"bytes":null,"exports_per_day":1}`) ||
			!strings.Contains(string(r.Body), `"bytes":52428800`) {
			t.Fatalf("back to the setting: %d %s", r.Status, r.Body)
		}
	})
}

// A backend names its users by their own id, the sub of its JWTs: a
// ticket (or a grant) for a subject ferry has not seen makes the user its
// JWTs will be, and one ferry knows is used as it is. Without
// FERRY_JWT_ISSUER a subject is refused.
func TestTicketsAndGrantsBySubject(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		iss := testenv.NewIssuer(t)
		v, err := users.NewJWTVerifier(t.Context(), users.JWTConfig{Issuer: iss.Issuer, Audience: iss.Audience, JWKSURL: iss.JWKSURL, Log: testenv.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		a := newAPIWith(t, db, func(d *server.Deps) { d.JWT = v })
		backend := a.key(users.ScopeTicketsCreate, users.ScopeGrantsCreate)

		// Known first by its JWT (with a name), then named by subject.
		una := iss.Mint(t, "rsa1", testenv.With(iss.Claims("u-1"), "name", "Una"))
		me := a.do("GET", "/me", una, nil).json(t)
		r := a.do("POST", "/tickets", backend, map[string]any{"subject": "u-1"})
		if r.Status != 201 || r.json(t)["user_id"] != me["id"] {
			t.Fatalf("ticket for a known subject: %d %s, want user %v", r.Status, r.Body, me["id"])
		}
		if again := a.do("GET", "/me", una, nil).json(t); again["name"] != me["name"] {
			t.Fatalf("naming the user by subject renamed them: %v -> %v", me["name"], again["name"])
		}

		// Unknown to ferry: made now, and the same user their JWT is later.
		r = a.do("POST", "/tickets", backend, map[string]any{"subject": "u-2"})
		if r.Status != 201 {
			t.Fatalf("ticket for a new subject: %d %s", r.Status, r.Body)
		}
		newID := r.json(t)["user_id"]
		if got := a.do("GET", "/me", iss.Mint(t, "ec1", iss.Claims("u-2")), nil).json(t); got["id"] != newID || got["subject"] != "u-2" {
			t.Fatalf("the JWT of u-2 is %v, the ticket's user %v", got, newID)
		}
		wantProblem(t, a.do("POST", "/tickets", backend, map[string]any{"subject": strings.Repeat("s", 256)}), 400, "invalid_user")

		// A deactivated user gets no ticket; grants name users the same way.
		if _, err := a.users.SetActive(context.Background(), newID.(string), false); err != nil {
			t.Fatal(err)
		}
		wantProblem(t, a.do("POST", "/tickets", backend, map[string]any{"subject": "u-2"}), 409, "user_inactive")

		plain := newAPI(t, db)
		wantProblem(t, plain.do("POST", "/tickets", plain.key(users.ScopeTicketsCreate), map[string]any{"subject": "u-1"}), 400, "invalid_user")
	})
}
