package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/ferry-io/ferry/internal/testenv"

	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/s3store"
)

// eventCounter is a webhook receiver that counts the deliveries of each
// event type by webhook-id, answering 204.
type eventCounter struct {
	srv *httptest.Server
	mu  sync.Mutex
	ids map[string]map[string]int // type -> webhook-id -> deliveries
}

func newEventCounter(t *testing.T) *eventCounter {
	h := &eventCounter{ids: map[string]map[string]int{}}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Type string }
		b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		json.Unmarshal(b, &body)
		h.mu.Lock()
		if h.ids[body.Type] == nil {
			h.ids[body.Type] = map[string]int{}
		}
		h.ids[body.Type][r.Header.Get("webhook-id")]++
		h.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *eventCounter) events(typ string) map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.ids[typ])
}

// bucketKeys lists every object in ferry's bucket (ferry's own probe
// objects aside) and the keys of its unfinished multipart uploads, with
// minio-go.
func bucketKeys(t *testing.T, f *Ferry) (objects, multipart []string) {
	t.Helper()
	return listBucket(t, ferryBucket(t, f))
}

// listBucket is bucketKeys for any bucket.
func listBucket(t *testing.T, b bucketView) (objects, multipart []string) {
	t.Helper()
	ctx := context.Background()
	for o := range b.Client.ListObjects(ctx, b.Name, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if !strings.HasPrefix(o.Key, s3store.ScratchPrefix) {
			objects = append(objects, o.Key)
		}
	}
	for u := range b.ListIncompleteUploads(ctx, b.Name, "", true) {
		if u.Err != nil {
			t.Fatal(u.Err)
		}
		if !strings.HasPrefix(u.Key, s3store.ScratchPrefix) {
			multipart = append(multipart, u.Key)
		}
	}
	slices.Sort(objects)
	slices.Sort(multipart)
	return objects, multipart
}

// uploadWithCLI uploads path as the user with tok through `ferry upload`
// (which answers a proof-of-possession challenge itself), waits until
// ferry has verified the file (grants and deduplication need that) and
// returns the file id.
func uploadWithCLI(t *testing.T, f *Ferry, tok, path string) string {
	t.Helper()
	out, err := cli(t, f, f.URL, tok, "upload", "--json", path).Output()
	if err != nil {
		t.Fatalf("ferry upload %s: %v\n%s%s", path, err, out, stderrOf(err))
	}
	done := last(jsonLines(t, out), "done")
	id, _ := done["file_id"].(string)
	if id == "" {
		t.Fatalf("ferry upload %s: no file_id in %v", path, done)
	}
	if up, _ := done["upload_id"].(string); up != "" {
		f.waitVerified(tok, up)
	}
	return id
}

// Issue 16: erasing a user removes what ferry keeps of theirs. Alice and
// Bob hold the same content (one blob, deduplicated); Alice also has a
// file of her own, an upload in progress and a finished export. After
// DELETE /admin/users/{alice} the bucket (listed with minio-go) holds
// exactly the one object Bob's file needs and no multipart upload; Bob's
// file still downloads; Alice's token gets 401; the receiver gets one
// user.deleted event, and the outbox holds one.
func TestEraseUser(t *testing.T) {
	forEachDriver(t, func(t *testing.T, mysql bool) {
		t.Parallel()
		hooks := newEventCounter(t)
		// Shards are kept after success, so the erasure must find them.
		f := Start(t, Options{MySQL: mysql, Env: map[string]string{"FERRY_WEBHOOK_ALLOW_PRIVATE": "true", "FERRY_EXPORT_DELETE_SHARDS": "false"}})
		if mysql {
			f.Token = cliCreateAdmin(t, f) // MySQL prints no first admin
		}
		admin := f.Token
		want(t, f.Do("POST", "/admin/webhooks", admin, map[string]any{"url": hooks.srv.URL + "/hooks", "events": []string{"user.deleted"}}), 201, "")
		aliceID, alice := f.CreateUser("alice", false)
		_, bob := f.CreateUser("bob", false)

		shared, _ := randomFile(t, "shared.bin", 300<<10)
		own, _ := randomFile(t, "own.bin", 200<<10)
		uploadWithCLI(t, f, alice, shared)
		uploadWithCLI(t, f, alice, own)
		bobFile := uploadWithCLI(t, f, bob, shared)
		sharedBytes, err := os.ReadFile(shared)
		if err != nil {
			t.Fatal(err)
		}

		// An upload in progress: S3 holds its multipart upload.
		want(t, f.Do("POST", "/uploads", alice, map[string]any{"file_name": "half.bin", "size": 12 << 20}), 201, "")

		// A finished export of a conversation with messages: an artifact
		// and shards in the bucket.
		var conv struct{ ID string }
		f.Do("POST", "/conversations", alice, map[string]any{"title": "mine"}).JSON(t, &conv)
		for i := range 5 {
			want(t, f.Do("POST", "/conversations/"+conv.ID+"/messages", alice, map[string]any{"body": fmt.Sprintf("message %d", i)}), 201, "")
		}
		r := f.Do("POST", "/exports", alice, map[string]any{"scope": "all"}, "Idempotency-Key", "erase")
		want(t, r, 202, "")
		var job struct {
			JobID string `json:"job_id"`
			State string
		}
		r.JSON(t, &job)
		for deadline := time.Now().Add(60 * time.Second); job.State != "done" && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
			f.Do("GET", "/exports/"+job.JobID, alice, nil).JSON(t, &job)
		}
		if job.State != "done" {
			t.Fatalf("export %s is %s, want done", job.JobID, job.State)
		}

		before, mpBefore := bucketKeys(t, f)
		exportObjects := 0
		for _, k := range before {
			if strings.HasPrefix(k, "exports/"+job.JobID+"/") {
				exportObjects++
			}
		}
		if exportObjects < 2 || len(mpBefore) != 1 {
			t.Fatalf("before the erasure the bucket holds %v and multipart uploads %v; want an export artifact and shards, and one upload", before, mpBefore)
		}

		r = f.Do("DELETE", "/admin/users/"+aliceID, admin, nil)
		want(t, r, 200, "")
		var rep struct{ Files, Uploads, Exports int }
		r.JSON(t, &rep)
		if rep.Files != 2 || rep.Exports != 1 || rep.Uploads < 3 {
			t.Errorf("DELETE answered %s; want 2 files, 1 export and at least 3 uploads", r.Body)
		}

		// The S3 deletions are jobs; they run at once (woken).
		var after, mpAfter []string
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			after, mpAfter = bucketKeys(t, f)
			if len(after) == 1 && len(mpAfter) == 0 || time.Now().After(deadline) {
				break
			}
		}
		if len(after) != 1 || len(mpAfter) != 0 {
			t.Fatalf("after the erasure the bucket holds %v and multipart uploads %v; want only Bob's blob", after, mpAfter)
		}
		if !slices.Contains(before, after[0]) {
			t.Fatalf("the object left, %s, was not in the bucket before", after[0])
		}

		// Bob's file still downloads, with its bytes.
		var file struct {
			DownloadURL string `json:"download_url"`
		}
		f.Do("GET", "/files/"+bobFile, bob, nil).JSON(t, &file)
		dl := f.Do("GET", linkPath(t, file.DownloadURL), bob, nil)
		if dl.Status != 200 || !bytes.Equal(dl.Body, sharedBytes) {
			t.Fatalf("Bob's download: %d, %d bytes (want 200 and %d bytes)", dl.Status, len(dl.Body), len(sharedBytes))
		}
		if got := objectSHA256(t, f, after[0]); got == "" {
			t.Fatal("the shared object does not read back")
		}

		want(t, f.Do("GET", "/me", alice, nil), 401, "")
		want(t, f.Do("DELETE", "/admin/users/"+aliceID, admin, nil), 404, "user_not_found")
		var me struct{ ID string }
		f.Do("GET", "/me", admin, nil).JSON(t, &me)
		want(t, f.Do("DELETE", "/admin/users/"+me.ID, admin, nil), 409, "self_erasure")

		// One user.deleted event, delivered once.
		var got map[string]int
		for deadline := time.Now().Add(20 * time.Second); len(got) == 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			got = hooks.events("user.deleted")
		}
		time.Sleep(500 * time.Millisecond) // a duplicate would arrive by now
		got = hooks.events("user.deleted")
		if len(got) != 1 {
			t.Fatalf("user.deleted deliveries by webhook-id: %v, want one event", got)
		}
		var n int64
		openFerryDB(t, f, mysql).Model(&models.OutboxEvent{}).Where("type = ? AND subject = ?", "user.deleted", aliceID).Count(&n)
		if n != 1 {
			t.Fatalf("outbox user.deleted events for alice: %d, want 1", n)
		}
	})
}

// Issue 16: `ferry user delete ID` erases through the same code as the
// admin API, run against the database while no ferry serves; the S3
// deletions it queued run when ferry starts again.
func TestUserDeleteCommand(t *testing.T) {
	t.Parallel()
	f := Start(t, Options{})
	aliceID, alice := f.CreateUser("alice", false)
	path, _ := randomFile(t, "a.bin", 100<<10)
	uploadWithCLI(t, f, alice, path)
	objects, _ := bucketKeys(t, f)
	if len(objects) != 1 {
		t.Fatalf("bucket holds %v, want alice's one file", objects)
	}
	f.Signal(os.Interrupt)
	if code := f.Wait(30 * time.Second); code != 0 {
		t.Fatalf("ferry exited %d", code)
	}
	code, out := runFerry(t, f.Dir, f.Env, "user", "delete", aliceID)
	if code != 0 || !strings.Contains(out, "erased user alice") || !strings.Contains(out, "1 files") {
		t.Fatalf("ferry user delete exited %d:\n%s", code, out)
	}
	if code, out := runFerry(t, f.Dir, f.Env, "user", "delete", aliceID); code == 0 || !strings.Contains(out, "no such user") {
		t.Fatalf("a second ferry user delete exited %d:\n%s", code, out)
	}
	f.Restart()
	want(t, f.Do("GET", "/me", alice, nil), 401, "")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if objects, _ = bucketKeys(t, f); len(objects) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(objects) != 0 {
		t.Fatalf("after the erasure and a restart the bucket holds %v", objects)
	}
}

// Issue 16: the erasure's S3 deletions are jobs that survive an outage.
// With S3 unreachable from ferry, DELETE /admin/users/{id} still commits
// (it calls no S3), Alice's object stays while S3 is down, and it is
// deleted once S3 answers again, without another call.
func TestEraseUserDuringS3Outage(t *testing.T) {
	t.Parallel()
	f, proxy := faultyS3(t, Options{Env: map[string]string{"FERRY_JOB_OUTAGE_BACKOFF": "1s"}})
	aliceID, alice := f.CreateUser("alice", false)
	path, _ := randomFile(t, "a.bin", 100<<10)
	uploadWithCLI(t, f, alice, path)
	direct := testenv.S3(t)
	u, err := url.Parse(direct.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	mc, err := minio.NewCore(u.Host, &minio.Options{Creds: credentials.NewStaticV4(direct.AccessKey, direct.SecretKey, ""), Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	bucket := bucketView{Core: mc, Name: f.Bucket}
	if objects, _ := listBucket(t, bucket); len(objects) != 1 {
		t.Fatalf("bucket holds %v, want alice's one file", objects)
	}

	proxy.Refuse()
	proxy.ResetAll()
	want(t, f.Do("DELETE", "/admin/users/"+aliceID, f.Token, nil), 200, "")
	time.Sleep(3 * time.Second) // several outage backoffs of the purge job
	if objects, _ := listBucket(t, bucket); len(objects) != 1 {
		t.Fatalf("with S3 unreachable from ferry the bucket holds %v; want the object still there", objects)
	}

	if err := proxy.Accept(); err != nil {
		t.Fatal(err)
	}
	var objects []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if objects, _ = listBucket(t, bucket); len(objects) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(objects) != 0 {
		t.Fatalf("after S3 came back the bucket holds %v; the purge job did not resume", objects)
	}
}

// Erasing a user removes the download grants in both directions: a grant
// on one of their files (the grantee's link stops working, because the
// file is gone) and a grant to them on someone else's file (the owner's
// list no longer shows it, and the owner's file and other grants stay).
func TestEraseUserGrantsBothDirections(t *testing.T) {
	forEachDriver(t, func(t *testing.T, mysql bool) {
		t.Parallel()
		f := startWithAdmin(t, mysql, map[string]string{"FERRY_JOB_POLL": "50ms"})
		aliceID, alice := f.CreateUser("alice", false)
		bobID, bob := f.CreateUser("bob", false)
		carolID, _ := f.CreateUser("carol", false)
		aPath, _ := randomFile(t, "alice.bin", 100<<10)
		bPath, bSum := randomFile(t, "bob.bin", 120<<10)
		aliceFile, bobFile := uploadWithCLI(t, f, alice, aPath), uploadWithCLI(t, f, bob, bPath)
		grant := func(owner, file, to string) string {
			t.Helper()
			r := f.Do("POST", "/files/"+file+"/grants", owner, map[string]any{"user_id": to})
			want(t, r, 201, "")
			var g struct {
				DownloadURL string `json:"download_url"`
			}
			r.JSON(t, &g)
			return g.DownloadURL
		}
		toBob := grant(alice, aliceFile, bobID) // on alice's file
		toAlice := grant(bob, bobFile, aliceID) // to alice
		toCarol := grant(bob, bobFile, carolID) // neither side alice
		status := func(link string) int {
			t.Helper()
			resp, err := f.HTTP.Get(link)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		for _, link := range []string{toBob, toAlice, toCarol} {
			if code := status(link); code != 200 {
				t.Fatalf("before the erasure a grant link answered %d", code)
			}
		}

		want(t, f.Do("DELETE", "/admin/users/"+aliceID, f.Token, nil), 200, "")

		if code := status(toBob); code != 404 && code != 410 {
			t.Fatalf("bob's grant on alice's erased file answered %d, want 404 or 410", code)
		}
		if code := status(toAlice); code != 403 && code != 404 && code != 410 {
			t.Fatalf("the grant to erased alice answered %d", code)
		}
		var list struct {
			Grants []struct {
				UserID string `json:"user_id"`
			} `json:"grants"`
		}
		f.Do("GET", "/files/"+bobFile+"/grants", bob, nil).JSON(t, &list)
		if len(list.Grants) != 1 || list.Grants[0].UserID != carolID {
			t.Fatalf("bob's file lists grants %+v after alice's erasure, want carol's alone", list.Grants)
		}
		if code := status(toCarol); code != 200 {
			t.Fatalf("carol's grant on bob's file answered %d after alice's erasure", code)
		}
		var bf struct{ SHA256 string }
		f.Do("GET", "/files/"+bobFile, bob, nil).JSON(t, &bf)
		if bf.SHA256 != bSum {
			t.Fatalf("bob's file after alice's erasure: %+v", bf)
		}
	})
}
