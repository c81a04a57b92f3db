package server_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ferry-io/ferry/internal/ratelimit"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/notify"
	"github.com/ferry-io/ferry/server"
	"github.com/ferry-io/ferry/users"
)

func bearerOf(tok string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + tok, "Content-Type": "application/json"}
}

// problemOf decodes a problem+json answer, failing unless it has status
// and code.
func problemOf(t *testing.T, r *http.Response, status int, code string) map[string]any {
	t.Helper()
	var p map[string]any
	json.NewDecoder(r.Body).Decode(&p)
	if r.StatusCode != status || p["code"] != code || r.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%d %v; want %d problem+json with code %s", r.StatusCode, p, status, code)
	}
	return p
}

type serviceKeyAnswer struct {
	ID         string
	Key        string
	Scopes     []string
	LastUsedAt *time.Time `json:"last_used_at"`
}

func (f *fixture) createServiceKey(t *testing.T, name string, scopes ...string) serviceKeyAnswer {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"name": name, "scopes": scopes})
	r := f.do(t, "POST", "/admin/service-keys", string(body), bearerOf(f.admin))
	if r.StatusCode != 201 || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("create service key: %d", r.StatusCode)
	}
	var k serviceKeyAnswer
	json.NewDecoder(r.Body).Decode(&k)
	if !strings.HasPrefix(k.Key, users.ServiceKeyPrefix) {
		t.Fatalf("key %q", k.Key)
	}
	return k
}

func (f *fixture) listServiceKeys(t *testing.T) []serviceKeyAnswer {
	t.Helper()
	r := f.do(t, "GET", "/admin/service-keys", "", bearerOf(f.admin))
	var out struct {
		ServiceKeys []serviceKeyAnswer `json:"service_keys"`
	}
	if err := json.NewDecoder(r.Body).Decode(&out); err != nil || r.StatusCode != 200 {
		t.Fatalf("list service keys: %d %v", r.StatusCode, err)
	}
	return out.ServiceKeys
}

// Issue 14: an admin creates a service key (shown once), lists it with its
// last use and revokes it, after which it is refused at once. A key calls
// only what its scopes open: webhooks:manage opens /admin/webhooks, and
// nothing opens the user or admin routes to a key.
func TestServiceKeyScopesAndRevocation(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		f := newFixtureWith(t, db, func(d *server.Deps) {
			d.Webhooks = testenv.Must(notify.New(notify.Config{DB: db.DB, Queue: testenv.Must(jobs.NewQueue(jobs.QueueConfig{DB: db.DB})), AllowPrivate: true, Log: d.Log}))
		})
		_, userToken, err := f.users.Create(t.Context(), "alice", false)
		if err != nil {
			t.Fatal(err)
		}
		hooks := f.createServiceKey(t, "hooks", users.ScopeWebhooksManage)
		tickets := f.createServiceKey(t, "tickets", users.ScopeTicketsCreate, users.ScopeGrantsCreate)

		// Bad input is a 400 that creates nothing.
		for body, code := range map[string]string{
			`{"name":"x","scopes":["tickets:create","admin"]}`: "unknown_scope",
			`{"name":"x","scopes":[]}`:                         "missing_scopes",
			`{"name":"x y","scopes":["files:read"]}`:           "invalid_name",
			`{"name":"x","scopes":"files:read"}`:               "invalid_json",
		} {
			problemOf(t, f.do(t, "POST", "/admin/service-keys", body, bearerOf(f.admin)), 400, code)
		}
		if n := len(f.listServiceKeys(t)); n != 2 {
			t.Fatalf("%d keys after bad requests, want 2", n)
		}

		for _, c := range []struct {
			name, method, path, token string
			status                    int
			code                      string
		}{
			{"key with the scope lists webhooks", "GET", "/admin/webhooks", hooks.Key, 200, ""},
			{"key without the scope", "GET", "/admin/webhooks", tickets.Key, 403, "missing_scope"},
			{"a user who is no admin", "GET", "/admin/webhooks", userToken, 403, "admin_only"},
			{"an admin", "GET", "/admin/webhooks", f.admin, 200, ""},
			{"no credentials", "GET", "/admin/webhooks", "", 401, "unauthenticated"},
			{"a key is no user", "GET", "/me", hooks.Key, 403, "user_required"},
			{"a key is no admin", "GET", "/admin/users", hooks.Key, 403, "admin_only"},
			{"a key cannot mint keys", "POST", "/admin/service-keys", hooks.Key, 403, "admin_only"},
			{"a user cannot mint keys", "GET", "/admin/service-keys", userToken, 403, "admin_only"},
			{"an unknown key", "GET", "/admin/webhooks", users.ServiceKeyPrefix + "guess", 401, "unauthenticated"},
		} {
			t.Run(c.name, func(t *testing.T) {
				hdr := map[string]string{"Content-Type": "application/json"}
				if c.token != "" {
					hdr = bearerOf(c.token)
				}
				r := f.do(t, c.method, c.path, `{"name":"k","scopes":["files:read"]}`, hdr)
				if c.code == "" {
					if r.StatusCode != c.status {
						t.Fatalf("%d, want %d", r.StatusCode, c.status)
					}
					return
				}
				p := problemOf(t, r, c.status, c.code)
				if c.code == "missing_scope" && (p["scope"] != users.ScopeWebhooksManage || !strings.Contains(p["detail"].(string), users.ScopeWebhooksManage)) {
					t.Fatalf("missing_scope does not name the scope: %v", p)
				}
			})
		}
		// A key with the scope manages webhooks, not only reads them. (An
		// address literal: the URL check resolves names.)
		r := f.do(t, "POST", "/admin/webhooks", `{"url":"http://127.0.0.1:9/ferry","events":["upload.completed"]}`, bearerOf(hooks.Key))
		if r.StatusCode != 201 {
			t.Fatalf("create webhook with a service key: %d", r.StatusCode)
		}

		// The list shows who was used; the secret is never shown again.
		for _, k := range f.listServiceKeys(t) {
			if k.Key != "" {
				t.Fatalf("list shows a secret: %+v", k)
			}
			if k.ID == hooks.ID && k.LastUsedAt == nil {
				t.Fatalf("used key without last_used_at: %+v", k)
			}
		}

		if r := f.do(t, "DELETE", "/admin/service-keys/"+hooks.ID, "", bearerOf(f.admin)); r.StatusCode != 204 {
			t.Fatalf("revoke: %d", r.StatusCode)
		}
		problemOf(t, f.do(t, "GET", "/admin/webhooks", "", bearerOf(hooks.Key)), 401, "unauthenticated")
		problemOf(t, f.do(t, "DELETE", "/admin/service-keys/"+hooks.ID, "", bearerOf(f.admin)), 404, "service_key_not_found")
		if list := f.listServiceKeys(t); len(list) != 1 || list[0].ID != tickets.ID {
			t.Fatalf("after revoking: %+v", list)
		}
	})
}

// Refused service keys count against the client address's failed-
// authentication limit like refused tokens.
func TestFailedServiceKeysAreRateLimited(t *testing.T) {
	db := testenv.NewDB(t, "sqlite")
	f := newFixtureWith(t, db, func(d *server.Deps) { d.AuthFailureLimit = ratelimit.Limit{Events: 2, Per: time.Hour} })
	k := f.createServiceKey(t, "backend", users.ScopeFilesRead)
	f.do(t, "DELETE", "/admin/service-keys/"+k.ID, "", bearerOf(f.admin))
	from := func(tok string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + tok, "X-Forwarded-For": "203.0.113.9"}
	}
	for _, bad := range []string{users.ServiceKeyPrefix + "guess", k.Key} {
		problemOf(t, f.do(t, "GET", "/me", "", from(bad)), 401, "unauthenticated")
	}
	r := f.do(t, "GET", "/me", "", from(f.admin))
	tooMany(t, r.StatusCode, r.Header, 3600)
}
