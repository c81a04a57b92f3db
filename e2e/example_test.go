package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-io/ferry/client"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/notify/receiver"
)

var (
	backendOnce sync.Once
	backendBin  string
	backendErr  error
)

// backendBinary builds examples/backend once per test process, as a team
// copying it would (with the race detector when the tests run with it).
func backendBinary(t testing.TB) string {
	t.Helper()
	backendOnce.Do(func() { backendBin, backendErr = goBuild("./examples/backend", "backend") })
	if backendErr != nil {
		t.Fatal(backendErr)
	}
	return backendBin
}

// backendApp is the example host app, running as its own process.
type backendApp struct {
	t      *testing.T
	URL    string
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr bytes.Buffer
	exited chan struct{}
	err    error
}

// startBackend runs examples/backend on addr against ferry f with a
// service key, and waits until it has registered its webhook at ferry.
func startBackend(t *testing.T, f *Ferry, addr, key string) *backendApp {
	t.Helper()
	b := &backendApp{t: t, URL: "http://" + addr, exited: make(chan struct{})}
	b.cmd = exec.Command(backendBinary(t))
	b.cmd.Env = append(cleanEnv(),
		"BACKEND_ADDR="+addr,
		"BACKEND_FERRY_URL="+f.URL,
		"BACKEND_SERVICE_KEY="+key,
		"BACKEND_KEY_FILE="+filepath.Join(t.TempDir(), "signing.pem"),
		"BACKEND_USERS=alice,bob,carol",
	)
	b.cmd.Stderr = &lockedWriter{mu: &b.mu, w: &b.stderr}
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { b.err = b.cmd.Wait(); close(b.exited) }()
	t.Cleanup(func() {
		select {
		case <-b.exited:
		default:
			b.cmd.Process.Kill()
			<-b.exited
		}
	})
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(b.Stderr(), `msg="webhook registered"`); time.Sleep(50 * time.Millisecond) {
		select {
		case <-b.exited:
			t.Fatalf("backend exited at start-up: %v\n%s", b.err, b.Stderr())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend did not register its webhook within 30s:\n%s", b.Stderr())
		}
	}
	return b
}

func (b *backendApp) Stderr() string { b.mu.Lock(); defer b.mu.Unlock(); return b.stderr.String() }

func (b *backendApp) Do(method, path, token string, body any) Response {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := send(ctx, http.DefaultClient, b.URL, method, path, token, body)
	if err != nil {
		b.t.Fatalf("backend %s %s: %v", method, path, err)
	}
	return r
}

// login signs a user of the app in and returns the JWT the app minted.
func (b *backendApp) login(user string) string {
	b.t.Helper()
	r := b.Do("POST", "/login", "", map[string]string{"user": user})
	if r.Status != 200 {
		b.t.Fatalf("login %s: %d %s", user, r.Status, r.Body)
	}
	var l struct{ Token string }
	r.JSON(b.t, &l)
	return l.Token
}

// Issue 14, done-when 6: examples/backend, built and run as a process,
// against the built ferry. ferry trusts the app's JWTs through its JWK
// Set; the app creates a ticket with trusted metadata for its user, who
// uploads with `ferry upload --ticket`; the signed upload.completed
// reaches the app, which records the file on its post; the uploader
// shares it through the app with a second user, who downloads it with
// Range; the app revokes the grant and the same link answers 410; a
// forged webhook changes nothing; the app shuts down cleanly on SIGTERM.
// It runs on SQLite and on MariaDB.
func TestExampleBackendEndToEnd(t *testing.T) {
	forEachDriver(t, func(t *testing.T, mysql bool) {
		addr := testenv.FreeAddr(t)
		issuer := "http://" + addr
		f := startWithAdmin(t, mysql, map[string]string{
			"FERRY_JWT_ISSUER":            issuer,
			"FERRY_JWT_AUDIENCE":          "ferry",
			"FERRY_JWT_JWKS_URL":          issuer + "/.well-known/jwks.json",
			"FERRY_WEBHOOK_ALLOW_PRIVATE": "true", // the app listens on 127.0.0.1
			"FERRY_JOB_POLL":              "50ms",
		})
		key := f.serviceKey("tickets:create", "grants:create", "webhooks:manage")
		app := startBackend(t, f, addr, key)

		// The app's JWT is a ferry user's credential: (issuer, sub) made on
		// first sight, from the JWK Set ferry fetched from the app.
		alice, bob := app.login("alice"), app.login("bob")
		var me struct{ ID, Issuer, Subject string }
		r := f.Do("GET", "/me", alice, nil)
		want(t, r, 200, "")
		r.JSON(t, &me)
		if me.Issuer != issuer || me.Subject != "alice" {
			t.Fatalf("ferry's user for alice's JWT: %s", r.Body)
		}

		// A ticket for alice's upload to post 42, from the app.
		r = app.Do("POST", "/posts/42/upload-ticket", alice, nil)
		want(t, r, 201, "")
		var tk struct{ Ticket string }
		r.JSON(t, &tk)
		want(t, app.Do("POST", "/posts/42/upload-ticket", "", nil), 401, "")

		dir := t.TempDir()
		path, sum := writeRandomFile(t, dir, "clip.mp4", 9<<20+3)
		data, _ := os.ReadFile(path)
		out, err := cli(t, f, f.URL, "", "upload", "--json", "--ticket", tk.Ticket, path).Output()
		done := last(jsonLines(t, out), "done")
		if err != nil || done == nil || done["file_id"] == nil {
			t.Fatalf("ferry upload --ticket: %v\n%s", err, out)
		}
		fileID := done["file_id"].(string)

		// The webhook reaches the app, which puts the file on the post.
		var post struct {
			Files []struct {
				FileID     string `json:"file_id"`
				Size       int64  `json:"size"`
				SHA256     string `json:"sha256"`
				UploadedBy string `json:"uploaded_by"`
			}
		}
		for deadline := time.Now().Add(60 * time.Second); len(post.Files) == 0; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the app never heard of %s:\n%s", fileID, app.Stderr())
			}
			app.Do("GET", "/posts/42", bob, nil).JSON(t, &post)
		}
		if p := post.Files[0]; len(post.Files) != 1 || p.FileID != fileID || p.SHA256 != sum || p.Size != int64(len(data)) || p.UploadedBy != "alice" {
			t.Fatalf("post 42: %+v", post)
		}
		// A webhook not signed with ferry's secret changes nothing.
		forged := []byte(`{"type":"upload.completed","timestamp":"` + time.Now().UTC().Format(time.RFC3339) + `","data":{"file_id":"fil_forged","metadata":{"post_id":"7","uploaded_by":"mallory"}}}`)
		wrong, _ := receiver.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
		now := time.Now()
		req, _ := http.NewRequest("POST", app.URL+"/webhooks/ferry", bytes.NewReader(forged))
		req.Header.Set(receiver.HeaderID, "evt_forged")
		req.Header.Set(receiver.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
		req.Header.Set(receiver.HeaderSignature, receiver.Sign(wrong, "evt_forged", now, forged))
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
			t.Fatalf("forged webhook: %v %v", resp, err)
		} else {
			resp.Body.Close()
		}
		if app.Do("GET", "/posts/7", bob, nil).JSON(t, &post); len(post.Files) != 0 {
			t.Fatalf("post 7 got files: %+v", post)
		}
		// ferry shows alice the file with the metadata the app put in the ticket.
		var file fileView
		f.Do("GET", "/files/"+fileID, alice, nil).JSON(t, &file)
		if file.Metadata["post_id"] != "42" || file.Metadata["uploaded_by"] != "alice" {
			t.Fatalf("alice's file at ferry: %+v", file)
		}

		// Only the uploader shares; alice shares with bob.
		grants := "/posts/42/files/" + fileID + "/grants"
		want(t, app.Do("POST", grants, bob, map[string]string{"user": "carol"}), 403, "")
		r = app.Do("POST", grants, alice, map[string]string{"user": "bob"})
		want(t, r, 201, "")
		var g struct {
			GrantID     string `json:"grant_id"`
			DownloadURL string `json:"download_url"`
		}
		r.JSON(t, &g)
		var bobMe struct{ ID string }
		f.Do("GET", "/me", bob, nil).JSON(t, &bobMe)
		if !strings.Contains(g.DownloadURL, "u="+bobMe.ID) {
			t.Fatalf("download_url %q is not bob's (%s)", g.DownloadURL, bobMe.ID)
		}
		get := func(link, rng string) (int, []byte) {
			req, _ := http.NewRequest("GET", link, nil)
			if rng != "" {
				req.Header.Set("Range", rng)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, b
		}
		if code, b := get(g.DownloadURL, "bytes=1000-1999"); code != 206 || !bytes.Equal(b, data[1000:2000]) {
			t.Fatalf("bob's range: %d, %d bytes", code, len(b))
		}
		dl, err := client.New(f.URL, bob).Download(context.Background(), g.DownloadURL, filepath.Join(dir, "bob.mp4"), client.DownloadOptions{})
		if err != nil || dl.SHA256 != sum {
			t.Fatalf("bob's download: %+v %v", dl, err)
		}
		// Bob's own JWT reaches the grant at ferry too.
		want(t, f.Do("GET", "/grants/"+g.GrantID, bob, nil), 200, "")

		// Revoked through the app: the same link is 410 on its next request.
		want(t, app.Do("DELETE", grants+"/"+g.GrantID, bob, nil), 403, "")
		want(t, app.Do("DELETE", grants+"/"+g.GrantID, alice, nil), 204, "")
		if code, b := get(g.DownloadURL, "bytes=0-99"); code != 410 || !strings.Contains(string(b), `"code":"download_revoked"`) {
			t.Fatalf("after revoke: %d %.200q", code, b)
		}

		// SIGTERM: a clean stop.
		app.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-app.exited:
		case <-time.After(15 * time.Second):
			t.Fatalf("backend did not stop within 15s of SIGTERM:\n%s", app.Stderr())
		}
		if app.err != nil || !strings.Contains(app.Stderr(), `msg="backend stopped"`) {
			t.Fatalf("backend exit: %v\n%s", app.err, app.Stderr())
		}
	})
}
