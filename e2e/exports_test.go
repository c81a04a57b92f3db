package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"gorm.io/gorm"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
)

// ferryDB opens the database a running ferry uses, to check what it left.
func ferryDB(t *testing.T, f *Ferry) *gorm.DB {
	t.Helper()
	driver, dsn := models.SQLite, filepath.Join(f.Dir, "ferry-data", "ferry.db")
	for _, kv := range f.Env {
		if v, ok := strings.CutPrefix(kv, "FERRY_DB_DSN="); ok {
			driver, dsn = models.MySQL, v
		}
	}
	db, err := models.Open(context.Background(), driver, dsn, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if s, err := db.DB(); err == nil {
			s.Close()
		}
	})
	return db
}

// ferryObject reads an object from ferry's bucket with an independent
// client.
func ferryObject(t *testing.T, f *Ferry, key string) []byte {
	t.Helper()
	b := ferryBucket(t, f)
	o, err := b.Client.GetObject(context.Background(), b.Name, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	data, err := io.ReadAll(o)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return data
}

func startWithAdmin(t *testing.T, mysql bool, env map[string]string) *Ferry {
	t.Helper()
	f := Start(t, Options{MySQL: mysql, Env: env})
	if mysql {
		f.Token = cliCreateAdmin(t, f)
	}
	return f
}

func want(t *testing.T, r Response, status int, code string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
	if code != "" && !strings.Contains(string(r.Body), `"code":"`+code+`"`) {
		t.Fatalf("want code %s: %s", code, r.Body)
	}
}

// The chat API on the wire: membership, posting, recalls, reading.
func TestChatAPI(t *testing.T) {
	forEachDriver(t, func(t *testing.T, mysql bool) {
		f := startWithAdmin(t, mysql, nil)
		_, alice := f.CreateUser("alice", false)
		bobID, bob := f.CreateUser("bob", false)
		_, carol := f.CreateUser("carol", false)

		var conv struct{ ID string }
		r := f.Do("POST", "/conversations", alice, map[string]any{"title": "team"})
		want(t, r, 201, "")
		r.JSON(t, &conv)
		want(t, f.Do("POST", "/conversations/"+conv.ID+"/members", carol, map[string]any{"user_id": bobID}), 404, "conversation_not_found")
		want(t, f.Do("POST", "/conversations/"+conv.ID+"/members", alice, map[string]any{"user_id": bobID}), 201, "")
		want(t, f.Do("POST", "/conversations/"+conv.ID+"/messages", bob, map[string]any{"body": "hi"}), 201, "")
		r = f.Do("POST", "/conversations/"+conv.ID+"/messages", alice, map[string]any{"body": "hello"})
		want(t, r, 201, "")
		var m struct{ Seq, Gseq int64 }
		r.JSON(t, &m)
		if m.Seq != 2 || m.Gseq == 0 {
			t.Fatalf("second message: %+v", m)
		}
		// Attachments must be the sender's own files.
		want(t, f.Do("POST", "/conversations/"+conv.ID+"/messages", alice, map[string]any{"body": "x", "attachments": []string{"fil_1"}}), 404, "attachment_not_found")
		want(t, f.Do("POST", fmt.Sprintf("/conversations/%s/messages/%d/recall", conv.ID, m.Seq), bob, nil), 403, "not_sender")
		want(t, f.Do("POST", fmt.Sprintf("/conversations/%s/messages/%d/recall", conv.ID, m.Seq), alice, nil), 200, "")
		want(t, f.Do("POST", "/conversations/"+conv.ID+"/messages/x/recall", alice, nil), 400, "invalid_seq")
		want(t, f.Do("DELETE", "/conversations/"+conv.ID+"/members/"+bobID, bob, nil), 200, "")
		want(t, f.Do("POST", "/conversations/"+conv.ID+"/messages", bob, map[string]any{"body": "still here?"}), 403, "not_a_member")

		r = f.Do("GET", "/conversations/"+conv.ID+"/messages?after=0&limit=10", bob, nil)
		want(t, r, 200, "")
		var page struct {
			Messages []struct {
				Seq      int64
				Body     string
				Recalled bool
			}
		}
		r.JSON(t, &page)
		if len(page.Messages) != 2 || page.Messages[0].Body != "hi" || !page.Messages[1].Recalled || page.Messages[1].Body != "" {
			t.Fatalf("bob reads %s", r.Body)
		}
		want(t, f.Do("GET", "/conversations/"+conv.ID+"/messages?limit=-1", bob, nil), 400, "invalid_limit")
		want(t, f.Do("GET", "/conversations/"+conv.ID+"/messages", carol, nil), 404, "conversation_not_found")
		want(t, f.Do("GET", "/conversations", "", nil), 401, "")
	})
}

// X1 on the wire: replays, other bodies, missing keys, bad scopes, no
// token, per-user keys, and 20 racing identical requests; then the export
// runs and is served, and revoked by its owner or an admin.
func TestExportsAPI(t *testing.T) {
	forEachDriver(t, func(t *testing.T, mysql bool) {
		f := startWithAdmin(t, mysql, map[string]string{"FERRY_EXPORT_SHARD_SIZE": "2"})
		aliceID, alice := f.CreateUser("alice", false)
		_, bob := f.CreateUser("bob", false)
		var conv struct{ ID string }
		f.Do("POST", "/conversations", alice, map[string]any{"title": "team"}).JSON(t, &conv)
		for i := range 5 {
			want(t, f.Do("POST", "/conversations/"+conv.ID+"/messages", alice, map[string]any{"body": fmt.Sprintf("m%d", i)}), 201, "")
		}
		create := func(token, key string, body any) Response {
			t.Helper()
			if key == "" {
				return f.Do("POST", "/exports", token, body)
			}
			return f.Do("POST", "/exports", token, body, "Idempotency-Key", key)
		}
		type created struct {
			JobID    string `json:"job_id"`
			State    string
			Replayed bool
		}
		var first, again, theirs created
		r := create(alice, "k1", map[string]any{"scope": "all"})
		want(t, r, 202, "")
		r.JSON(t, &first)
		if first.JobID == "" || first.State != "queued" || first.Replayed {
			t.Fatalf("first: %s", r.Body)
		}
		r = create(alice, `"k1"`, `{ "scope" :  "all" }`)
		want(t, r, 200, "")
		r.JSON(t, &again)
		if again.JobID != first.JobID || !again.Replayed {
			t.Fatalf("replay: %s", r.Body)
		}
		want(t, create(alice, "k1", map[string]any{"scope": "conv:" + conv.ID}), 422, "idempotency_key_reused")
		want(t, create(alice, "", map[string]any{"scope": "all"}), 400, "missing_idempotency_key")
		want(t, create(alice, "k2", map[string]any{"scope": "everything"}), 400, "invalid_scope")
		want(t, create("", "k3", map[string]any{"scope": "all"}), 401, "")
		r = create(bob, "k1", map[string]any{"scope": "all"})
		want(t, r, 202, "")
		r.JSON(t, &theirs)
		if theirs.JobID == first.JobID {
			t.Fatal("two users' exports share a job")
		}

		const n = 20
		results := make([]Response, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i] = create(bob, "race", map[string]any{"scope": "all"})
			}()
		}
		wg.Wait()
		ids, fresh := map[string]bool{}, 0
		for _, r := range results {
			if r.Status != 202 && r.Status != 200 {
				t.Fatalf("racing request: %d %s", r.Status, r.Body)
			}
			var c created
			r.JSON(t, &c)
			ids[c.JobID] = true
			if r.Status == 202 {
				fresh++
			}
		}
		var rows int64
		ferryDB(t, f).Model(&models.Job{}).Where("kind = ?", "export").Count(&rows)
		if len(ids) != 1 || fresh != 1 || rows != 3 {
			t.Fatalf("20 racing requests: %d job ids, %d answered 202, %d export jobs in all (want 1, 1, 3)", len(ids), fresh, rows)
		}

		// The export runs; its owner gets a signed link, others a 404.
		var got struct {
			JobID       string `json:"job_id"`
			State       string
			SHA256      string
			Bytes       int64
			DownloadURL string `json:"download_url"`
		}
		deadline := time.Now().Add(60 * time.Second)
		for got.State != "done" && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			r = f.Do("GET", "/exports/"+first.JobID, alice, nil)
			want(t, r, 200, "")
			r.JSON(t, &got)
		}
		if got.State != "done" {
			t.Fatalf("export not done: %s", r.Body)
		}
		u, err := url.Parse(got.DownloadURL)
		if err != nil || u.Path != "/download/"+first.JobID || u.Query().Get("u") != aliceID || u.Query().Get("sig") == "" {
			t.Fatalf("download_url %q", got.DownloadURL)
		}
		want(t, f.Do("GET", "/exports/"+first.JobID, bob, nil), 404, "export_not_found")
		want(t, f.Do("GET", "/exports/exp_nope", alice, nil), 404, "export_not_found")

		art := ferryObject(t, f, "exports/"+first.JobID+"/export.jsonl.gz")
		sum := sha256.Sum256(art)
		if hex.EncodeToString(sum[:]) != got.SHA256 || int64(len(art)) != got.Bytes {
			t.Fatalf("artifact in the bucket: %x, %d bytes; API says %s, %d", sum, len(art), got.SHA256, got.Bytes)
		}
		zr, err := gzip.NewReader(bytes.NewReader(art))
		if err != nil {
			t.Fatal(err)
		}
		plain, _ := io.ReadAll(zr)
		if lines := strings.Count(string(plain), "\n"); lines != 5 || !strings.HasPrefix(string(plain), `{"attachments":[],"body":"m0","conv":"`+conv.ID+`"`) {
			t.Fatalf("artifact:\n%s", plain)
		}

		// Revoking: the owner with DELETE, an admin with the admin route.
		want(t, f.Do("DELETE", "/exports/"+first.JobID, bob, nil), 404, "export_not_found")
		r = f.Do("DELETE", "/exports/"+first.JobID, alice, nil)
		want(t, r, 200, "")
		if !strings.Contains(string(r.Body), `"state":"revoked"`) || strings.Contains(string(r.Body), "download_url") {
			t.Fatalf("revoked: %s", r.Body)
		}
		want(t, f.Do("POST", "/admin/exports/"+theirs.JobID+"/revoke", bob, nil), 403, "admin_only")
		r = f.Do("POST", "/admin/exports/"+theirs.JobID+"/revoke", f.Token, nil)
		want(t, r, 200, "")
		if !strings.Contains(string(r.Body), `"state":"revoked"`) {
			t.Fatalf("admin revoke: %s", r.Body)
		}
		r = f.Do("GET", "/exports", bob, nil)
		if want(t, r, 200, ""); strings.Count(string(r.Body), `"job_id"`) != 2 {
			t.Fatalf("bob's exports: %s", r.Body)
		}
	})
}

// Bad input is refused with a clear 4xx and leaves no export and no job.
func TestExportBadInput(t *testing.T) {
	forEachDriver(t, func(t *testing.T, mysql bool) {
		f := startWithAdmin(t, mysql, nil)
		_, alice := f.CreateUser("alice", false)
		_, bob := f.CreateUser("bob", false)
		var bobs struct{ ID string }
		f.Do("POST", "/conversations", bob, map[string]any{"title": "bob's"}).JSON(t, &bobs)
		for _, tc := range []struct {
			name   string
			key    string
			ctype  string
			body   string
			status int
			code   string
		}{
			{"malformed JSON", "k", "", `{"scope":`, 400, "invalid_json"},
			{"not an object", "k", "", `["all"]`, 400, "invalid_json"},
			{"unknown field", "k", "", `{"scope":"all","format":"csv"}`, 400, "invalid_json"},
			{"field name in another case", "k", "", `{"SCOPE":"all"}`, 400, "invalid_json"},
			{"field given twice", "k", "", `{"scope":"conv:zzz","scope":"all"}`, 400, "invalid_json"},
			{"lone surrogate", "k", "", `{"scope":"all\ud800"}`, 400, "invalid_json"},
			{"invalid UTF-8", "k", "", "{\"scope\":\"all\xff\"}", 400, "invalid_json"},
			{"scope with fields", "k", "", `{"scope":{"conv":"x","extra":1}}`, 400, "invalid_json"},
			{"unknown scope", "k", "", `{"scope":"users"}`, 400, "invalid_scope"},
			{"empty scope", "k", "", `{}`, 400, "invalid_scope"},
			{"two values", "k", "", `{"scope":"all"} {"scope":"all"}`, 400, "invalid_json"},
			{"key too long", strings.Repeat("k", 256), "", `{"scope":"all"}`, 400, "idempotency_key_too_long"},
			{"quoted key too long", `"` + strings.Repeat("k", 256) + `"`, "", `{"scope":"all"}`, 400, "idempotency_key_too_long"},
			{"malformed key", `"open`, "", `{"scope":"all"}`, 400, "invalid_idempotency_key"},
			{"a list as key", "a,b", "", `{"scope":"all"}`, 400, "invalid_idempotency_key"},
			{"an integer as key", "123", "", `{"scope":"all"}`, 400, "invalid_idempotency_key"},
			{"a byte sequence as key", ":YWJj:", "", `{"scope":"all"}`, 400, "invalid_idempotency_key"},
			{"a bare UUID as key", "8e03978e-40d5-43e8-bc93-6894a57f9324", "", `{"scope":"all"}`, 400, "invalid_idempotency_key"},
			{"the empty string as key", `""`, "", `{"scope":"all"}`, 400, "invalid_idempotency_key"},
			{"oversize body", "k", "", `{"scope":"all"}` + strings.Repeat(" ", 8<<10), 413, "body_too_large"},
			{"huge body", "k", "", `{"scope":"all"}` + strings.Repeat(" ", 2<<20), 413, "body_too_large"},
			{"form body", "k", "application/x-www-form-urlencoded", `scope=all`, 415, "unsupported_media_type"},
			{"someone else's conversation", "k", "", `{"scope":"conv:` + bobs.ID + `"}`, 404, "conversation_not_found"},
			{"no such conversation", "k", "", `{"scope":"conv:cnv_nope"}`, 404, "conversation_not_found"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				hdr := []string{"Idempotency-Key", tc.key}
				if tc.ctype != "" {
					hdr = append(hdr, "Content-Type", tc.ctype)
				}
				r := f.Do("POST", "/exports", alice, tc.body, hdr...)
				want(t, r, tc.status, tc.code)
				if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
					t.Fatalf("content type %q", ct)
				}
			})
		}
		var exports, jobRows int64
		db := ferryDB(t, f)
		db.Model(&models.Export{}).Count(&exports)
		db.Model(&models.Job{}).Where("kind = ?", "export").Count(&jobRows)
		if exports != 0 || jobRows != 0 {
			t.Fatalf("bad requests left %d exports and %d jobs", exports, jobRows)
		}
	})
}

// "ferry demo seed" fills the server's database; the first demo user is
// in every conversation from its start, so their export holds every
// message. The export metrics show on /metrics.
func TestDemoSeedThenExport(t *testing.T) {
	forEachDriver(t, func(t *testing.T, mysql bool) {
		f := startWithAdmin(t, mysql, nil)
		cmd := exec.Command(ferryBinary(t), "demo", "seed", "--users", "4", "--conversations", "3", "--messages", "2500", "--seed", "9")
		cmd.Dir = f.Dir
		cmd.Env = append(cleanEnv(), f.Env...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("demo seed: %v\n%s", err, out)
		}
		m := regexp.MustCompile(`user demo1 \(id \S+\) token: (fry_\S+)`).FindSubmatch(out)
		if m == nil || !strings.Contains(string(out), "seeded 3 conversations, 2500 messages") {
			t.Fatalf("demo seed printed:\n%s", out)
		}
		token := string(m[1])
		var convs struct{ Conversations []struct{ ID string } }
		f.Do("GET", "/conversations", token, nil).JSON(t, &convs)
		if len(convs.Conversations) != 3 {
			t.Fatalf("demo1 is in %d conversations, want 3", len(convs.Conversations))
		}

		r := f.Do("POST", "/exports", token, map[string]any{"scope": "all"}, "Idempotency-Key", "demo")
		want(t, r, 202, "")
		var job struct {
			JobID    string `json:"job_id"`
			State    string
			Messages int64
		}
		r.JSON(t, &job)
		for deadline := time.Now().Add(60 * time.Second); job.State != "done" && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
			f.Do("GET", "/exports/"+job.JobID, token, nil).JSON(t, &job)
		}
		if job.State != "done" || job.Messages != 2500 {
			t.Fatalf("export %s with %d messages, want done with 2500", job.State, job.Messages)
		}
		// The run's own figures are recorded just after the state change.
		for _, m := range []string{`ferry_exports_total\{state="done"\} 1\n`, `ferry_export_shards_total\{result="written"\} [1-9]\d*\n`,
			`ferry_export_run_shards_count\{result="skipped"\} 1\n`, `ferry_export_duration_seconds_count 1\n`} {
			var metrics string
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				if metrics = string(f.Do("GET", "/metrics", "", nil).Body); regexp.MustCompile(m).MatchString(metrics) {
					break
				}
			}
			if !regexp.MustCompile(m).MatchString(metrics) {
				t.Errorf("/metrics lacks %s", m)
			}
		}
	})
}
