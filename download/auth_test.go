package download_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
)

// tamper returns link with query field f set to v ("" deletes it).
func tamper(t *testing.T, link, f, v string) string {
	t.Helper()
	u, err := url.Parse(link)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	if v == "" {
		q.Del(f)
	} else {
		q.Set(f, v)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// TestLinkChecks covers the link checks docs/downloads.md lists ("What
// each request is checked for"): every refusal, its status and code,
// on SQLite and MariaDB.
func TestLinkChecks(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db)
		alice, _ := e.user("alice")
		bob, bobToken := e.user("bob")
		data := randomData(t, 4096)
		e.put("exp_alice", alice, data, "a.jsonl.gz")
		e.put("exp_bob", bob, data, "b.jsonl.gz")
		e.put("fil_revoked", alice, data, "r.bin")
		e.res.setState("fil_revoked", "revoked")
		e.put("exp_expired", alice, data, "e.bin")
		e.res.setState("exp_expired", "expired")
		good := e.link(e.svc, e.srv, "exp_alice", alice)
		sig := url.Values{}
		if u, _ := url.Parse(good); u != nil {
			sig = u.Query()
		}
		flipped := []byte(sig.Get("sig"))
		flipped[3] ^= 1
		if flipped[3] == '-' || flipped[3] == '_' { // keep it base64url
			flipped[3] = 'A'
		}

		for _, c := range []struct {
			name   string
			url    string
			hdr    []string
			status int
			code   string
		}{
			{"valid", good, nil, 200, ""},
			{"tampered u", tamper(t, good, "u", bob), nil, 403, "invalid_link"},
			{"tampered exp", tamper(t, good, "exp", "4102444800"), nil, 403, "invalid_link"},
			{"tampered kid", tamper(t, good, "kid", "k2"), nil, 403, "invalid_link"},
			{"tampered sig", tamper(t, good, "sig", string(flipped)), nil, 403, "invalid_link"},
			{"missing sig", tamper(t, good, "sig", ""), nil, 403, "invalid_link"},
			{"other id in the path", strings.Replace(good, "exp_alice", "exp_bob", 1), nil, 403, "invalid_link"},
			{"link signed for alice to bob's export", e.link(e.svc, e.srv, "exp_bob", alice), nil, 403, "download_forbidden"},
			{"alice's link used by signed-in bob", good, []string{"Authorization", "Bearer " + bobToken}, 403, "link_user_mismatch"},
			{"unknown resource", e.link(e.svc, e.srv, "exp_nothing", alice), nil, 404, "download_not_found"},
			{"unknown prefix", e.link(e.svc, e.srv, "xyz_1", alice), nil, 404, "download_not_found"},
			{"revoked", e.link(e.svc, e.srv, "fil_revoked", alice), nil, 410, "download_revoked"},
			{"expired resource", e.link(e.svc, e.srv, "exp_expired", alice), nil, 410, "download_expired"},
		} {
			t.Run(c.name, func(t *testing.T) {
				for _, m := range []string{"GET", "HEAD"} {
					r := do(t, m, c.url, c.hdr...)
					if r.status != c.status {
						t.Fatalf("%s: %d, want %d: %s", m, r.status, c.status, r.body)
					}
					if c.code != "" && m == "GET" {
						if got := problemCode(t, r); got != c.code {
							t.Fatalf("code %q, want %q", got, c.code)
						}
						if r.header.Get("ETag") != "" || r.header.Get("Content-Disposition") != "" {
							t.Fatalf("refusal carries resource headers: %v", r.header)
						}
					}
				}
			})
		}

		t.Run("expired link", func(t *testing.T) {
			e.clock.Add(300 * time.Second)
			defer e.clock.Add(-300 * time.Second)
			r := do(t, "GET", good)
			if r.status != 403 || problemCode(t, r) != "link_expired" {
				t.Fatalf("%d %s", r.status, r.body)
			}
		})

		t.Run("deactivated user", func(t *testing.T) {
			if _, err := e.users.SetActive(context.Background(), alice, false); err != nil {
				t.Fatal(err)
			}
			defer e.users.SetActive(context.Background(), alice, true)
			r := do(t, "GET", good)
			if r.status != 403 || problemCode(t, r) != "user_inactive" {
				t.Fatalf("%d %s", r.status, r.body)
			}
		})

		t.Run("download log", func(t *testing.T) {
			var rows []models.DownloadLog
			if err := db.Where("resource_id = ?", "exp_alice").Order("id").Find(&rows).Error; err != nil {
				t.Fatal(err)
			}
			var ok, refused int
			for _, r := range rows {
				switch {
				case r.Status == 200 && r.Method == "GET":
					ok++
					if r.BytesSent != int64(len(data)) || r.UserID != alice || r.LinkHash == nil || r.RemoteAddr != "127.0.0.1" || r.UserAgent == "" {
						t.Fatalf("served row %+v", r)
					}
				case r.Status == 403:
					refused++
					if r.BytesSent != 0 || r.Code == "" || r.UserID != alice || r.LinkHash == nil {
						t.Fatalf("refused row %+v", r)
					}
				}
			}
			// Refused: signed-in bob (GET and HEAD) and the deactivated
			// user. Tampered and expired links leave no row.
			if ok != 1 || refused != 3 {
				t.Fatalf("%d served and %d refused rows for exp_alice, want 1 and 3: %+v", ok, refused, rows)
			}
		})
	})
}

// A link issued a moment before a revocation, a deactivation or the end of
// the user's right to the resource stops working at its very next request,
// including a resumed range request of a download in progress.
func TestRevocationTakesEffectAtOnce(t *testing.T) {
	e := newEnv(t, testenv.NewDB(t, models.SQLite))
	alice, _ := e.user("alice")
	data := randomData(t, 64<<10)
	etag := `"` + e.put("exp_r", alice, data, "r.gz") + `"`
	link := e.link(e.svc, e.srv, "exp_r", alice)

	first := do(t, "GET", link, "Range", "bytes=0-999")
	check(t, first, data, single(0, 999, len(data)))
	resume := func() reply { return do(t, "GET", link, "Range", "bytes=1000-", "If-Range", etag) }

	e.res.setState("exp_r", "revoked")
	if r := resume(); r.status != 410 {
		t.Fatalf("resume after revocation: %d", r.status)
	}
	e.res.setState("exp_r", "done")
	check(t, resume(), data, single(1000, int64(len(data))-1, len(data)))

	if _, err := e.users.SetActive(context.Background(), alice, false); err != nil {
		t.Fatal(err)
	}
	if r := resume(); r.status != 403 {
		t.Fatalf("resume after deactivation: %d", r.status)
	}
	if r := do(t, "HEAD", link); r.status != 403 {
		t.Fatalf("HEAD after deactivation: %d", r.status)
	}
	if _, err := e.users.SetActive(context.Background(), alice, true); err != nil {
		t.Fatal(err)
	}
	e.res.mu.Lock()
	e.res.items["exp_r"].owner = "usr_someone_else"
	e.res.mu.Unlock()
	if r := resume(); r.status != 403 {
		t.Fatalf("resume after losing the right: %d", r.status)
	}
	e.res.mu.Lock()
	calls := e.res.calls
	e.res.mu.Unlock()
	if calls != 4 { // every request past the user check asked the resolver
		t.Fatalf("resolver called %d times, want 4", calls)
	}
}

// After a key rotation, links signed with a key still listed keep working;
// links whose key was dropped are refused.
func TestKeyRotation(t *testing.T) {
	e := newEnv(t, testenv.NewDB(t, models.SQLite))
	alice, _ := e.user("alice")
	data := randomData(t, 1000)
	e.put("exp_k", alice, data, "k.gz")
	oldLink := e.link(e.svc, e.srv, "exp_k", alice) // signed with k1

	rotated, _, rotatedSrv := e.serve(keyK2 + "," + keyK1)
	if r := do(t, "GET", rotatedSrv.URL+strings.TrimPrefix(oldLink, e.srv.URL)); r.status != 200 {
		t.Fatalf("k1 link after rotation to k2,k1: %d", r.status)
	}
	newLink := e.link(rotated, rotatedSrv, "exp_k", alice)
	if !strings.Contains(newLink, "kid=k2") {
		t.Fatalf("rotated signer signs with %s", newLink)
	}
	_, _, droppedSrv := e.serve(keyK2)
	if r := do(t, "GET", droppedSrv.URL+strings.TrimPrefix(oldLink, e.srv.URL)); r.status != 403 {
		t.Fatalf("k1 link after k1 was dropped: %d", r.status)
	}
	if r := do(t, "GET", droppedSrv.URL+strings.TrimPrefix(newLink, rotatedSrv.URL)); r.status != 200 {
		t.Fatalf("k2 link on a k2-only server: %d", r.status)
	}
}

// One link used from more distinct addresses than FERRY_DOWNLOAD_LINK_MAX_ADDRS
// (2 here) is logged as forwarded and counted once; downloads are counted
// by status.
func TestForwardedLinkAndMetrics(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db)
		alice, _ := e.user("alice")
		data := randomData(t, 1000)
		e.put("exp_f", alice, data, "f.gz")
		link := e.link(e.svc, e.srv, "exp_f", alice)
		from := func(addr string) reply { return do(t, "GET", link, "X-Forwarded-For", addr, "Range", "bytes=0-9") }

		for _, a := range []string{"203.0.113.1", "203.0.113.1", "203.0.113.2"} {
			from(a)
		}
		if got := testenv.Counter(t, e.reg, "ferry_download_forwarded_links_total"); got != 0 || strings.Contains(e.logs.warnings(), "forwarded") {
			t.Fatalf("two addresses reported as forwarded (%v): %s", got, e.logs.warnings())
		}
		from("198.51.100.7")
		from("198.51.100.8")
		from("198.51.100.8")
		if got := testenv.Counter(t, e.reg, "ferry_download_forwarded_links_total"); got != 1 {
			t.Fatalf("forwarded links = %v, want 1", got)
		}
		if n := strings.Count(e.logs.warnings(), "forwarded"); n != 2 {
			t.Fatalf("%d forwarding warnings, want one per new address past the limit:\n%s", n, e.logs.warnings())
		}
		// Another link to the same resource starts its own count.
		e.clock.Add(time.Second)
		other := e.link(e.svc, e.srv, "exp_f", alice)
		do(t, "GET", other, "X-Forwarded-For", "192.0.2.1")
		if got := testenv.Counter(t, e.reg, "ferry_download_forwarded_links_total"); got != 1 {
			t.Fatalf("forwarded links = %v after a fresh link", got)
		}

		do(t, "GET", link, "Range", "bytes=5000-")
		do(t, "GET", link, "If-None-Match", `"`+strings.Repeat("0", 64)+`"`)
		do(t, "GET", tamper(t, link, "u", "x"))
		for st, want := range map[string]float64{"206": 6, "200": 2, "416": 1, "403": 1, "410": 0} {
			if got := testenv.Counter(t, e.reg, "ferry_downloads_total", "status", st); got != want {
				t.Errorf("ferry_downloads_total{status=%s} = %v, want %v", st, got, want)
			}
		}
		if got := testenv.Counter(t, e.reg, "ferry_download_bytes_total"); got != 6*10+1000+1000 {
			t.Errorf("bytes counted %v", got)
		}
	})
}
