package export

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/s3store"
)

// Child process settings for TestKilledExportResumes.
const (
	killShardSize   = 200
	killMaxAttempts = 30
)

// X3 with real crashes: the worker process SIGKILLs itself after each
// shard in turn, then twice while assembling the artifact (once with a
// multipart upload in flight), and a last process finishes. The artifact
// is byte-identical to an uninterrupted export of the same snapshot, and
// every shard was written exactly once across all the processes.
func TestKilledExportResumes(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		store := testenv.Store(t)
		e := newEnv(t, db, store, Config{ShardSize: killShardSize, MaxAttempts: killMaxAttempts, PartSize: s3store.MinPartSize})
		ctx := context.Background()
		alice, bob := e.user("alice", false), e.user("bob", false)
		// Incompressible bodies, so the artifact passes S3's 5 MiB part
		// size and the assembly kill leaves a real multipart upload.
		for _, title := range []string{"one", "two"} {
			c, err := e.chat.CreateConversation(ctx, alice, title)
			if err != nil {
				t.Fatal(err)
			}
			e.chat.AddMember(ctx, alice, c.ID, bob.ID)
			for i := range 525 {
				b := make([]byte, 6<<10)
				rand.Read(b)
				sender := alice
				if i%3 == 0 {
					sender = bob
				}
				if _, err := e.chat.Post(ctx, sender, c.ID, base64.StdEncoding.EncodeToString(b), nil); err != nil {
					t.Fatal(err)
				}
			}
		}

		ref := e.create(alice, "reference", "all")
		stop := e.start()
		xr := e.wait(ref.ID, 2*time.Minute, StateDone)
		stop()
		victim := e.create(alice, "victim", "all")
		var snap int64
		db.Model(&models.Export{}).Where("id = ?", victim.ID).Pluck("snapshot_gseq", &snap)
		if snap != xr.SnapshotGseq {
			t.Fatalf("snapshots differ: %d vs %d", snap, xr.SnapshotGseq)
		}

		srv := testenv.S3(t)
		child := func(kill string) (writes []int) {
			t.Helper()
			cmd := testenv.Child("TestExportChild", "FERRY_EXPORT_CHILD=1", "FERRY_EXPORT_CHILD_KILL="+kill,
				"FERRY_EXPORT_CHILD_DIALECT="+db.Dialect, "FERRY_EXPORT_CHILD_DSN="+db.DSN, "FERRY_EXPORT_CHILD_BUCKET="+store.Bucket(),
				"FERRY_EXPORT_CHILD_ID="+victim.ID,
				"FERRY_TEST_S3_ENDPOINT="+srv.Endpoint, "FERRY_TEST_S3_ACCESS_KEY="+srv.AccessKey, "FERRY_TEST_S3_SECRET_KEY="+srv.SecretKey)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			timer := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() })
			cmd.Wait()
			timer.Stop()
			ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
			killed := ws.Signaled() && ws.Signal() == syscall.SIGKILL
			if (kill != "") != killed || (kill == "" && ws.ExitStatus() != 0) {
				t.Fatalf("child (kill %q) ended with %v, killed=%v:\n%s", kill, cmd.ProcessState, killed, out.String())
			}
			sc := bufio.NewScanner(&out)
			for sc.Scan() {
				if n, ok := strings.CutPrefix(sc.Text(), "WROTE "); ok {
					i, _ := strconv.Atoi(n)
					writes = append(writes, i)
				}
			}
			return writes
		}

		// Each run is killed after the first shard no earlier run wrote.
		// Shards are put a window at a time, so a run writes that shard's
		// window (from it on) before the kill; the next run must verify
		// all of them and start writing right after.
		var all []int
		runs := 0
		for k := 0; ; {
			w := child(fmt.Sprintf("shard:%d", k))
			runs++
			if len(w) == 0 || w[0] != k {
				t.Fatalf("run killed after shard %d wrote %v; want shard %d first", k, w, k)
			}
			for i, n := range w {
				if n != k+i {
					t.Fatalf("run killed after shard %d wrote %v: not a consecutive run from %d", k, w, k)
				}
			}
			all = append(all, w...)
			k += len(w)
			var x models.Export
			db.Where("id = ?", victim.ID).Take(&x)
			if x.ShardCount == nil || k == *x.ShardCount {
				break
			}
		}
		if runs < 2 {
			t.Fatalf("the shards were written by %d runs; the test wants kills between windows", runs)
		}
		var x models.Export
		db.Where("id = ?", victim.ID).Take(&x)
		count := *x.ShardCount
		if count < 4 {
			t.Fatalf("only %d shards; the test wants several", count)
		}
		for _, a := range []int{0, count - 1} {
			if w := child(fmt.Sprintf("asm:%d", a)); len(w) != 0 {
				t.Fatalf("run killed while assembling rewrote shards %v", w)
			}
			runs++
		}
		mc := minioClient(t)
		inflight := 0
		for u := range mc.ListIncompleteUploads(ctx, store.Bucket(), prefix(victim.ID), true) {
			if u.Err != nil {
				t.Fatal(u.Err)
			}
			inflight++
		}
		if inflight == 0 {
			t.Fatal("the kill late in assembly left no multipart upload: the artifact is too small to test that case")
		}
		all = append(all, child("")...)
		runs++

		done := e.wait(victim.ID, time.Second, StateDone)
		// A child may run twice if a loaded machine delays its heartbeat
		// past the short lease; every run still counts, never fewer.
		if len(all) != count || done.Runs < runs {
			t.Fatalf("%d shard writes for %d shards over %d runs (recorded %d)", len(all), count, runs, done.Runs)
		}
		if *done.SHA256 != *xr.SHA256 || *done.Bytes != *xr.Bytes || done.CRC32C == nil || xr.CRC32C == nil || *done.CRC32C != *xr.CRC32C ||
			!bytes.Equal(object(t, store.Bucket(), artifactKey(victim.ID)), object(t, store.Bucket(), artifactKey(ref.ID))) {
			t.Fatalf("artifact after %d crashes differs from the uninterrupted one: %s vs %s", runs-1, *done.SHA256, *xr.SHA256)
		}
		for u := range mc.ListIncompleteUploads(ctx, store.Bucket(), prefix(victim.ID), true) {
			t.Fatalf("multipart upload left behind: %+v", u)
		}
		t.Logf("%d shards, %d runs (%d SIGKILLs), artifact %d bytes", count, runs, runs-1, *done.Bytes)
	})
}

// TestExportChild is the worker process of TestKilledExportResumes. It
// runs the export worker with hooks that SIGKILL the process at the point
// FERRY_EXPORT_CHILD_KILL names ("shard:N" after shard N is stored,
// "asm:N" after shard N is streamed into the artifact), and otherwise
// waits for the export to finish.
func TestExportChild(t *testing.T) {
	if os.Getenv("FERRY_EXPORT_CHILD") != "1" {
		t.Skip("helper process for TestKilledExportResumes")
	}
	db, err := models.Open(context.Background(), os.Getenv("FERRY_EXPORT_CHILD_DIALECT"), os.Getenv("FERRY_EXPORT_CHILD_DSN"), testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	store := testenv.StoreFor(t, testenv.S3(t), os.Getenv("FERRY_EXPORT_CHILD_BUCKET"))
	where, at, _ := strings.Cut(os.Getenv("FERRY_EXPORT_CHILD_KILL"), ":")
	n, _ := strconv.Atoi(at)
	killAt := func(point string) func(string, int) error {
		return func(_ string, i int) error {
			if where == point && i == n {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
			return nil
		}
	}
	q := testenv.Must(jobs.NewQueue(jobs.QueueConfig{DB: db, Now: time.Now}))
	svc := testenv.Must(New(withDeps(Config{ShardSize: killShardSize, MaxAttempts: killMaxAttempts, PartSize: s3store.MinPartSize, Log: testenv.Logger(t)}, db, store, q),
		WithHooks(Hooks{
			ShardWritten: func(_ string, i int) { fmt.Printf("WROTE %d\n", i) },
			AfterShard:   killAt("shard"),
			Assembled:    killAt("asm"),
		})))
	r := jobs.NewRunner(q, jobs.RunnerConfig{Lease: 2 * time.Second, Poll: 50 * time.Millisecond, Owner: fmt.Sprintf("child-%d", os.Getpid())})
	svc.Register(r)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx, time.Second)
	id := os.Getenv("FERRY_EXPORT_CHILD_ID")
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		var state string
		db.Model(&models.Export{}).Where("id = ?", id).Pluck("state", &state)
		if state == StateDone || state == StateFailed {
			if state != StateDone {
				t.Fatalf("export %s", state)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("export not done in time")
}
