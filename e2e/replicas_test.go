package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/notify/receiver"
)

// The multi-replica suite (see cluster_test.go): three `ferry serve`
// replicas on one MariaDB database and one S3 server, every flow spread
// over them, replicas killed in the middle of work.

// Uploads spread over the replicas (init on one, part URLs from another,
// complete on a third) all end verified, each file's bytes hashing to its
// SHA-256 through another replica's download proxy and in the bucket.
func TestReplicasUploadsSpread(t *testing.T) {
	requireReplicas(t)
	c := startCluster(t, clusterOptions{})
	_, tok := c.R[0].CreateUser("alice", false)
	var ids []string
	var data [][]byte
	for i, size := range []int{100<<10 + 1, 5 * mib, 5*mib + 1, 2*5*mib + 333, 3*5*mib - 7, 7 * mib} {
		d := randomData(size)
		r := func(k int) *Ferry { return c.R[(i+k)%len(c.R)] }
		ids = append(ids, spreadUpload(t, tok, d, r(0), []*Ferry{r(1)}, r(2)))
		data = append(data, d)
	}
	c.allVerified(tok, ids, data, c.R, 120*time.Second)
	t.Logf("%d uploads, each started, signed and completed on three different replicas: all verified, lost 0, duplicated 0", len(ids))
}

// completesMultipart tells S3's CompleteMultipartUpload apart from the
// other calls (CreateMultipartUpload is POST ?uploads).
func completesMultipart(r *http.Request) bool {
	return r.Method == http.MethodPost && r.URL.Query().Has("uploadId")
}

// A replica is SIGKILLed while the merges it claimed wait for S3's
// CompleteMultipartUpload. The other replicas take them over once the
// lease lapses and finish every one: two whose completion reached S3
// after the replica died (the next worker finds the object) and two whose
// completion never did (it completes them itself).
func TestReplicasKillDuringMerges(t *testing.T) {
	requireReplicas(t)
	c := startCluster(t, clusterOptions{Gated: true, Env: map[string]string{"FERRY_MERGE_CONCURRENCY": "4"}})
	_, tok := c.R[0].CreateUser("alice", false)
	const n = 4
	var ids []string
	var data [][]byte
	for i := range n {
		d := randomData(5*mib + 1000*i + 1)
		ids = append(ids, spreadParts(t, tok, d, c.R[i%2], []*Ferry{c.R[(i+1)%2]}))
		data = append(data, d)
	}
	// The merges fall to replica 2, which completes them: the others are
	// frozen (SIGSTOP) until it has claimed every one.
	c.Holds.Hold(func(_ int, r *http.Request) bool { return completesMultipart(r) })
	for _, f := range c.R[:2] {
		f.Signal(syscall.SIGSTOP)
	}
	for i, id := range ids {
		completeUpload(t, c.R[2], tok, id, data[i])
	}
	held := c.Holds.WaitHeld(t, n, 60*time.Second)
	for _, f := range c.R[:2] {
		f.Signal(syscall.SIGCONT)
	}

	// Replica 2 alone holds the merges: its CompleteMultipartUpload
	// calls are the ones held, and the job table names it.
	claimed := map[int]bool{}
	for _, hr := range held {
		claimed[hr.Replica] = true
	}
	db := ferryDB(t, c.R[0])
	var merges []models.Job
	db.Where("kind = ? AND business_key IN ?", "upload.merge", ids).Find(&merges)
	for _, j := range merges {
		if j.State != "running" || !claimed[c.replicaOf(j.LeaseOwner)] {
			t.Fatalf("merge of %s is %s, leased by %v; want running on a replica whose completion is held (%v)", j.BusinessKey, j.State, j.LeaseOwner, held)
		}
	}
	if len(merges) != n || len(claimed) != 1 || !claimed[2] {
		t.Fatalf("%d merge jobs claimed by replicas %v: want %d, all on replica 2", len(merges), claimed, n)
	}
	killed := []int{2}
	c.R[2].Kill()
	killedAt := time.Now()
	for k, hr := range held {
		if k%2 == 0 {
			if status := c.Holds.Forward(hr); status != 200 {
				t.Fatalf("%s, forwarded after its replica died: S3 answered %d", hr, status)
			}
		} else {
			c.Holds.Drop(hr)
		}
	}
	c.Holds.Open()
	// From here on, count the completions the survivors send.
	completes := map[string]int{}
	c.Holds.Hold(func(_ int, r *http.Request) bool {
		if completesMultipart(r) {
			completes[r.URL.Path]++
		}
		return false
	})

	survivors := c.others(killed...)
	c.allVerified(tok, ids, data, survivors, 120*time.Second)
	took := time.Since(killedAt)
	c.Holds.Locked(func() {
		for k, hr := range held {
			first := map[bool]string{true: "reached S3", false: "was dropped"}[k%2 == 0]
			if sent := completes[hr.Path]; sent != k%2 {
				t.Errorf("%s: the survivors sent CompleteMultipartUpload %d times, want %d: the killed replica's %s", hr.Path, sent, k%2, first)
			}
		}
	})
	db.Where("kind = ? AND business_key IN ?", "upload.merge", ids).Find(&merges)
	for _, j := range merges {
		if j.State != "done" || j.Attempts != 2 {
			t.Fatalf("merge of %s: %s after %d attempts; want done on the second, the killed replica's run being the first", j.BusinessKey, j.State, j.Attempts)
		}
	}
	finished := map[string]int{}
	for _, f := range survivors {
		for _, l := range f.LogLines("upload completed") {
			if id, _ := l["upload_id"].(string); id != "" {
				finished[id]++
			}
		}
	}
	for _, id := range ids {
		if finished[id] != 1 {
			t.Fatalf("the surviving replicas merged %s %d times, want once", id, finished[id])
		}
	}
	t.Logf("SIGKILL of the replica holding %d merges; the other two finished all of them %s later (lease 4s), lost 0, duplicated 0",
		n, took.Round(100*time.Millisecond))
}

type exportJSON struct {
	JobID       string `json:"job_id"`
	State       string `json:"state"`
	Messages    int64  `json:"messages"`
	SHA256      string `json:"sha256"`
	Bytes       int64  `json:"bytes"`
	DownloadURL string `json:"download_url"`
	Replayed    bool   `json:"replayed"`
}

// waitExport polls an export until it is done.
func waitExport(t *testing.T, f *Ferry, tok, id string, within time.Duration) exportJSON {
	t.Helper()
	var e exportJSON
	for deadline := time.Now().Add(within); e.State != "done"; time.Sleep(100 * time.Millisecond) {
		r := f.Do("GET", "/exports/"+id, tok, nil)
		want(t, r, 200, "")
		r.JSON(t, &e)
		if e.State == "failed" || e.State == "revoked" || time.Now().After(deadline) {
			t.Fatalf("export %s: %s", id, r.Body)
		}
	}
	return e
}

// chatter makes a conversation of n messages, posted through every
// replica in turn.
func (c *cluster) chatter(tok string, n int) string {
	t := c.t
	t.Helper()
	var conv struct{ ID string }
	c.R[0].Do("POST", "/conversations", tok, map[string]any{"title": "replicas"}).JSON(t, &conv)
	for i := range n {
		want(t, c.R[i%len(c.R)].Do("POST", "/conversations/"+conv.ID+"/messages", tok, map[string]any{"body": fmt.Sprintf("message %d", i)}), 201, "")
	}
	return conv.ID
}

// A replica is SIGKILLed in the middle of an export, with three of its
// eight shards written and the fourth on its way to S3. Another replica
// takes the export over after the lease, skips the shards that landed
// whole (the three, and any other put that was in flight), writes the
// rest, and the export ends done with an artifact byte-identical to that
// of a run without the kill.
func TestReplicasKillDuringExport(t *testing.T) {
	requireReplicas(t)
	c := startCluster(t, clusterOptions{Gated: true, Env: map[string]string{"FERRY_EXPORT_SHARD_SIZE": "5"}})
	_, tok := c.R[0].CreateUser("alice", false)
	c.chatter(tok, 40)
	const before = 3
	shards := 0
	c.Holds.Hold(func(_ int, r *http.Request) bool {
		if r.Method != http.MethodPut || !strings.Contains(r.URL.Path, "/shards/") {
			return false
		}
		shards++
		return shards > before
	})
	r := c.R[1].Do("POST", "/exports", tok, map[string]any{"scope": "all"}, "Idempotency-Key", "killed")
	want(t, r, 202, "")
	var created exportJSON
	r.JSON(t, &created)
	held := c.Holds.WaitHeld(t, 1, 60*time.Second)
	victim := held[0].Replica
	var j models.Job
	db := ferryDB(t, c.R[0])
	db.Where("kind = ? AND business_key = ?", "export", created.JobID).Take(&j)
	if j.State != "running" || c.replicaOf(j.LeaseOwner) != victim {
		t.Fatalf("export job %s leased by %v; want running on replica %d, whose shard is held", j.State, j.LeaseOwner, victim)
	}
	c.R[victim].Kill()
	killedAt := time.Now()
	c.Holds.Drop(held[0])
	c.Holds.Open()

	survivors := c.others(victim)
	got := waitExport(t, survivors[0], tok, created.JobID, 120*time.Second)
	took := time.Since(killedAt)
	// A run without the kill: the same snapshot under another key.
	r = survivors[1].Do("POST", "/exports", tok, map[string]any{"scope": "all"}, "Idempotency-Key", "reference")
	want(t, r, 202, "")
	var again exportJSON
	r.JSON(t, &again)
	ref := waitExport(t, survivors[1], tok, again.JobID, 60*time.Second)
	if got.Messages != 40 || got.SHA256 != ref.SHA256 || got.Bytes != ref.Bytes {
		t.Fatalf("export after the kill: %d messages, %s, %d bytes; the run without it: %s, %d bytes", got.Messages, got.SHA256, got.Bytes, ref.SHA256, ref.Bytes)
	}
	art := ferryObject(t, survivors[0], "exports/"+got.JobID+"/export.jsonl.gz")
	if !bytes.Equal(art, ferryObject(t, survivors[0], "exports/"+ref.JobID+"/export.jsonl.gz")) {
		t.Fatal("the artifacts of the killed run and of the run without the kill differ in the bucket")
	}
	for _, f := range survivors {
		body, _ := download(t, f.URL+linkPath(t, got.DownloadURL))
		if !bytes.Equal(body, art) {
			t.Fatalf("the export downloaded through %s is not its artifact", f.URL)
		}
	}
	resumed := false
	for _, f := range survivors {
		for _, l := range f.LogLines("export run ended") {
			if l["export_id"] == created.JobID {
				// The killed run had puts in flight beyond the held one
				// (an export puts shards concurrently); those the proxy let
				// through after the kill landed whole, and are skipped too.
				// The dropped one, at least, is written again.
				skipped, _ := l["shards_skipped"].(float64)
				written, _ := l["shards_written"].(float64)
				if skipped < before || written < 1 || skipped+written != 8 || l["shards_rewritten"] != float64(0) {
					t.Fatalf("the run that took over: %v; want at least the %d shards the killed run wrote skipped, the dropped one written, 8 in all", l, before)
				}
				resumed = true
			}
		}
	}
	db.Where("kind = ? AND business_key = ?", "export", created.JobID).Take(&j)
	if !resumed || j.State != "done" || j.Attempts != 2 {
		t.Fatalf("export job %s after %d attempts, resumed by a survivor: %v", j.State, j.Attempts, resumed)
	}
	t.Logf("SIGKILL of replica %d mid-export (%d of 8 shards written); another replica took over and finished %s later, artifact %s identical to a run without the kill",
		victim, before, took.Round(100*time.Millisecond), got.SHA256[:12])
}

// hookCounter is a business backend with one endpoint per subscription,
// each a notify/receiver Handler, counting what arrives per webhook-id
// before the receiver looks at it.
type hookCounter struct {
	srv       *httptest.Server
	mu        sync.Mutex
	handlers  map[string]*receiver.Handler
	arrived   map[string]map[string]int // path → webhook-id → requests
	processed map[string]map[string]int // path → webhook-id → Process calls
}

func newHookCounter(t *testing.T) *hookCounter {
	h := &hookCounter{handlers: map[string]*receiver.Handler{}, arrived: map[string]map[string]int{}, processed: map[string]map[string]int{}}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		rh := h.handlers[r.URL.Path]
		if rh != nil {
			h.arrived[r.URL.Path][r.Header.Get("webhook-id")]++
		}
		h.mu.Unlock()
		if rh == nil {
			http.NotFound(w, r)
			return
		}
		rh.ServeHTTP(w, r)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// subscribe creates a webhook for events on f whose target is path, and
// verifies its messages with the secret ferry shows once.
func (h *hookCounter) subscribe(t *testing.T, f *Ferry, path string, events ...string) string {
	t.Helper()
	r := f.Do("POST", "/admin/webhooks", f.Token, map[string]any{"url": h.srv.URL + path, "events": events})
	want(t, r, 201, "")
	var wh struct{ ID, Secret string }
	r.JSON(t, &wh)
	v, err := receiver.NewVerifier(wh.Secret)
	if err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.arrived[path], h.processed[path] = map[string]int{}, map[string]int{}
	h.handlers[path] = &receiver.Handler{Verifier: v, Store: receiver.NewMemoryStore(time.Hour, nil),
		Process: func(ctx context.Context, m *receiver.Message) error {
			h.mu.Lock()
			h.processed[path][m.ID]++
			h.mu.Unlock()
			return nil
		}}
	return wh.ID
}

// ids lists the webhook-ids that arrived at path.
func (h *hookCounter) ids(path string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for id := range h.arrived[path] {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Every event reaches every subscription exactly once although three
// replicas dispatch the outbox and deliver, each polling every 50 ms: the
// receiver counts one request per webhook-id and subscription, and
// notify/receiver processes each once.
func TestReplicasWebhookOncePerEvent(t *testing.T) {
	requireReplicas(t)
	c := startCluster(t, clusterOptions{Env: map[string]string{"FERRY_JOB_POLL": "50ms", "FERRY_WEBHOOK_RETRY_SCHEDULE": "1s"}})
	hooks := newHookCounter(t)
	hooks.subscribe(t, c.R[0], "/all", "upload.completed", "export.completed")
	hooks.subscribe(t, c.R[1], "/uploads", "upload.completed")
	_, tok := c.R[2].CreateUser("alice", false)
	var uploads []string
	for i := range 6 {
		r := func(k int) *Ferry { return c.R[(i+k)%len(c.R)] }
		uploads = append(uploads, spreadUpload(t, tok, randomData(64<<10+i), r(0), []*Ferry{r(1)}, r(2)))
	}
	c.chatter(tok, 3)
	for i, f := range c.R[:2] {
		want(t, f.Do("POST", "/exports", tok, map[string]any{"scope": "all"}, "Idempotency-Key", fmt.Sprintf("hook-%d", i)), 202, "")
	}

	// The events ferry wrote: one per upload and export.
	db := ferryDB(t, c.R[0])
	var events []models.OutboxEvent
	deadline := time.Now().Add(120 * time.Second)
	for {
		db.Order("id").Find(&events)
		all, ups := 0, 0
		for _, e := range events {
			all++
			if e.Type == "upload.completed" {
				ups++
			}
		}
		if all == len(uploads)+2 && len(hooks.ids("/all")) == all && len(hooks.ids("/uploads")) == ups {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events; /all got %d, /uploads %d", all, len(hooks.ids("/all")), len(hooks.ids("/uploads")))
		}
		time.Sleep(200 * time.Millisecond)
	}
	// A second delivery would come from another replica's claim, within
	// a poll, or after a lease: wait longer than both.
	time.Sleep(5 * time.Second)
	wantIDs := map[string][]string{}
	for _, e := range events {
		wantIDs["/all"] = append(wantIDs["/all"], e.ID)
		if e.Type == "upload.completed" {
			wantIDs["/uploads"] = append(wantIDs["/uploads"], e.ID)
		}
	}
	hooks.mu.Lock()
	defer hooks.mu.Unlock()
	deliveries := 0
	for path, ids := range wantIDs {
		if len(hooks.arrived[path]) != len(ids) {
			t.Fatalf("%s: %d webhook-ids arrived, %d events were written", path, len(hooks.arrived[path]), len(ids))
		}
		for _, id := range ids {
			if hooks.arrived[path][id] != 1 || hooks.processed[path][id] != 1 {
				t.Fatalf("%s: event %s arrived %d times, processed %d; want once", path, id, hooks.arrived[path][id], hooks.processed[path][id])
			}
			deliveries++
		}
	}
	t.Logf("%d events, 2 subscriptions, 3 replicas delivering: %d deliveries, each webhook-id once per subscription", len(events), deliveries)
}

// The same Idempotency-Key and body, sent 18 times at once to three
// replicas, make one export: one 202, the rest 200 with the same job id,
// one export row and one job. Another body under the key is refused on
// any replica, and once done every replica replays it.
func TestReplicasExportIdempotency(t *testing.T) {
	requireReplicas(t)
	c := startCluster(t, clusterOptions{})
	aliceID, tok := c.R[0].CreateUser("alice", false)
	conv := c.chatter(tok, 4)
	const perReplica = 6
	results := make([]Response, perReplica*len(c.R))
	errs := make([]error, len(results))
	start := make(chan struct{})
	var wg sync.WaitGroup
	hc := &http.Client{Timeout: 30 * time.Second}
	for i := range results {
		f := c.R[i%len(c.R)]
		wg.Go(func() {
			<-start
			results[i], errs[i] = send(context.Background(), hc, f.URL, "POST", "/exports", tok, map[string]any{"scope": "all"}, "Idempotency-Key", "across")
		})
	}
	close(start)
	wg.Wait()
	jobIDs, fresh := map[string]bool{}, 0
	for i, r := range results {
		if errs[i] != nil || (r.Status != 202 && r.Status != 200) {
			t.Fatalf("request %d to replica %d: %d %s %v", i, i%len(c.R), r.Status, r.Body, errs[i])
		}
		var e exportJSON
		r.JSON(t, &e)
		jobIDs[e.JobID] = true
		if r.Status == 202 {
			fresh++
		} else if !e.Replayed {
			t.Fatalf("a 200 that is not a replay: %s", r.Body)
		}
	}
	db := ferryDB(t, c.R[0])
	var exports, jobRows int64
	db.Model(&models.Export{}).Where("user_id = ?", aliceID).Count(&exports)
	db.Model(&models.Job{}).Where("kind = ?", "export").Count(&jobRows)
	if len(jobIDs) != 1 || fresh != 1 || exports != 1 || jobRows != 1 {
		t.Fatalf("%d racing requests over %d replicas: %d job ids, %d answered 202, %d exports, %d export jobs; want 1 of each",
			len(results), len(c.R), len(jobIDs), fresh, exports, jobRows)
	}
	var id string
	for id = range jobIDs {
	}
	for _, f := range c.R {
		want(t, f.Do("POST", "/exports", tok, map[string]any{"scope": "conv:" + conv}, "Idempotency-Key", "across"), 422, "idempotency_key_reused")
	}
	waitExport(t, c.R[2], tok, id, 60*time.Second)
	for _, f := range c.R {
		r := f.Do("POST", "/exports", tok, map[string]any{"scope": "all"}, "Idempotency-Key", `"across"`)
		want(t, r, 200, "")
		var e exportJSON
		r.JSON(t, &e)
		if e.JobID != id || e.State != "done" || !e.Replayed {
			t.Fatalf("replay on %s after the export ran: %s", f.URL, r.Body)
		}
	}
	t.Logf("%d identical requests over %d replicas: 1 export, 1 job", len(results), len(c.R))
}

// wantDownload is want for a download, whose body is cut short in the
// failure message.
func wantDownload(t *testing.T, r Response, status int, code string) {
	t.Helper()
	if len(r.Body) > 300 {
		r.Body = append(r.Body[:300:300], "…"...)
	}
	want(t, r, status, code)
}

// Links signed by one replica work on every replica (they share
// FERRY_LINK_KEYS), and a revocation or a deactivation made through one
// replica is seen by the very next download on each of the others: 410
// for a revoked export, 403 for a deactivated owner; reactivation is seen
// as quickly.
func TestReplicasRevocationSeenEverywhere(t *testing.T) {
	requireReplicas(t)
	c := startCluster(t, clusterOptions{})
	aliceID, alice := c.R[0].CreateUser("alice", false)
	d := randomData(2*mib + 5)
	id := spreadUpload(t, alice, d, c.R[0], []*Ferry{c.R[1]}, c.R[2])
	up := c.R[1].waitVerified(alice, id)
	var file struct {
		DownloadURL string `json:"download_url"`
	}
	c.R[0].Do("GET", "/files/"+up.FileID, alice, nil).JSON(t, &file)
	filePath := linkPath(t, file.DownloadURL)
	c.chatter(alice, 5)
	r := c.R[1].Do("POST", "/exports", alice, map[string]any{"scope": "all"}, "Idempotency-Key", "revoke-me")
	want(t, r, 202, "")
	var created exportJSON
	r.JSON(t, &created)
	exp := waitExport(t, c.R[2], alice, created.JobID, 60*time.Second)
	exportPath := linkPath(t, exp.DownloadURL)

	sum := sha256.Sum256(d)
	for _, f := range c.R {
		if got, _ := download(t, f.URL+filePath); sha256.Sum256(got) != sum {
			t.Fatalf("the file through %s is not the upload", f.URL)
		}
		got, _ := download(t, f.URL+exportPath)
		if g := sha256.Sum256(got); hex.EncodeToString(g[:]) != exp.SHA256 {
			t.Fatalf("the export through %s is not its artifact", f.URL)
		}
	}

	want(t, c.R[1].Do("POST", "/admin/exports/"+exp.JobID+"/revoke", c.Admin, nil), 200, "")
	for _, f := range c.R {
		wantDownload(t, f.Do("GET", exportPath, "", nil), 410, "download_revoked")
	}
	want(t, c.R[2].Do("POST", "/admin/users/"+aliceID+"/deactivate", c.Admin, nil), 200, "")
	for _, f := range c.R {
		wantDownload(t, f.Do("GET", filePath, "", nil), 403, "user_inactive")
		want(t, f.Do("GET", "/me", alice, nil), 401, "")
	}
	want(t, c.R[0].Do("POST", "/admin/users/"+aliceID+"/activate", c.Admin, nil), 200, "")
	for _, f := range c.R {
		wantDownload(t, f.Do("GET", filePath, "", nil), 200, "")
	}
	t.Logf("revocation on replica 1 and deactivation on replica 2 answered 410 and 403 on the next download on all %d replicas", len(c.R))
}

// A replica SIGKILLed and started again serves again: the others carry on
// while it is down; back, it accepts links the others signed, takes API
// calls, and with the others stopped runs the jobs on its own.
func TestReplicasRestartedReplicaServes(t *testing.T) {
	requireReplicas(t)
	c := startCluster(t, clusterOptions{})
	_, tok := c.R[0].CreateUser("alice", false)
	var ids []string
	var data [][]byte
	add := func(d []byte, init, presign, complete *Ferry) {
		ids = append(ids, spreadUpload(t, tok, d, init, []*Ferry{presign}, complete))
		data = append(data, d)
	}
	add(randomData(5*mib+17), c.R[0], c.R[1], c.R[2])
	c.allVerified(tok, ids, data, c.R, 60*time.Second)

	c.R[1].Kill()
	add(randomData(3*mib+1), c.R[2], c.R[0], c.R[2])
	c.allVerified(tok, ids, data, c.others(1), 60*time.Second)
	start := time.Now()
	c.R[1].Restart()
	back := time.Since(start)
	add(randomData(6*mib+3), c.R[1], c.R[2], c.R[1])
	c.allVerified(tok, ids, data, c.R, 60*time.Second)

	for _, i := range []int{0, 2} {
		c.R[i].Signal(syscall.SIGTERM)
		if code := c.R[i].Wait(60 * time.Second); code != 0 {
			t.Fatalf("replica %d exited %d after SIGTERM", i, code)
		}
	}
	add(randomData(5*mib+2), c.R[1], c.R[1], c.R[1])
	alone := []*Ferry{c.R[1]}
	c.allVerified(tok, ids, data, alone, 60*time.Second)
	last := ids[len(ids)-1]
	merged := false
	for _, l := range c.R[1].LogLines("upload completed") {
		merged = merged || l["upload_id"] == last
	}
	if !merged {
		t.Fatalf("the restarted replica did not merge %s itself", last)
	}
	t.Logf("replica 1 SIGKILLed, ready again %s after its restart; %d uploads verified across the outage, the last merged by it alone", back.Round(100*time.Millisecond), len(ids))
}
