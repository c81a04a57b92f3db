package upload_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/notify"
	"github.com/ferry-io/ferry/s3store"
	"github.com/ferry-io/ferry/upload"
)

// childEnv is what a worker child process needs to reach the parent's
// database and bucket.
func childEnv(t testing.TB, db *testenv.DB, bucket string, extra ...string) []string {
	srv := testenv.S3(t)
	return append([]string{
		"FERRY_UPLOAD_CHILD_DIALECT=" + db.Dialect, "FERRY_UPLOAD_CHILD_DSN=" + db.DSN, "FERRY_UPLOAD_CHILD_BUCKET=" + bucket,
		"FERRY_TEST_S3_ENDPOINT=" + srv.Endpoint, "FERRY_TEST_S3_ACCESS_KEY=" + srv.AccessKey, "FERRY_TEST_S3_SECRET_KEY=" + srv.SecretKey,
	}, extra...)
}

// childService builds the child's service from childEnv.
func childService(t *testing.T, hooks upload.Hooks) (*upload.Service, *jobs.Queue) {
	t.Helper()
	db, err := models.Open(context.Background(), os.Getenv("FERRY_UPLOAD_CHILD_DIALECT"), os.Getenv("FERRY_UPLOAD_CHILD_DSN"), testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	store := testenv.StoreFor(t, testenv.S3(t), os.Getenv("FERRY_UPLOAD_CHILD_BUCKET"))
	q := testenv.Must(jobs.NewQueue(jobs.QueueConfig{DB: db, Now: time.Now}))
	svc, err := upload.New(upload.Config{DB: db, Store: store, Queue: q, Links: newLinks(t), Log: testenv.Logger(t)}, upload.WithHooks(hooks))
	if err != nil {
		t.Fatal(err)
	}
	return svc, q
}

// Done-when 5: a worker (a real process) merges an upload and is SIGKILLed
// half-way through the background verification. After its lease lapses
// another worker takes the verify job over, hashes the object again and
// records exactly one verified file, one blob and one upload.completed
// event; the merge's own outcome (the file, unverified) was already safe.
func TestMergeWorkerKilledDuringVerification(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil)
		ctx := context.Background()
		c := newClient(t, e, "usr_a")
		data := randomBytes(3*5*mib + 1234)
		st := c.uploadAll("crash.bin", data, true)

		cmd := testenv.Child("TestMergeWorkerProcess", childEnv(t, db, e.store.Bucket(), "FERRY_UPLOAD_CHILD=kill")...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		seen := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "VERIFYING ") {
					seen <- sc.Text()
				}
			}
			close(seen)
		}()
		select {
		case line, ok := <-seen:
			if !ok {
				t.Fatal("the child exited without starting verification")
			}
			t.Logf("child: %s", line)
		case <-time.After(60 * time.Second):
			t.Fatal("the child did not reach verification")
		}
		err = cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("child exit: %v, want death by SIGKILL", err)
		}

		// The crash left: the upload merged (success, its file there but
		// unverified, its blob out of the dedup index), the verify job
		// owned by the dead child, and no upload.completed yet.
		u := e.upload(st.UploadID)
		j, _ := e.queue.Get(ctx, upload.KindVerify, st.UploadID)
		if u.State != upload.StateSuccess || j.State != jobs.StateRunning || j.LeaseOwner == nil || *j.LeaseOwner != "child" {
			t.Fatalf("after the kill: upload %s, verify job %s owned by %v", u.State, j.State, j.LeaseOwner)
		}
		if n := e.count("files", "upload_id = ? AND sha256_verified = ?", st.UploadID, false); n != 1 {
			t.Fatalf("unverified files after the kill = %d, want 1", n)
		}
		if e.count("outbox", "1 = 1")+e.count("blobs", "sha256 IS NOT NULL") != 0 {
			t.Fatal("the dead worker recorded a verification")
		}

		start := time.Now()
		e.run(t, 2*time.Second)
		done := e.waitVerified("usr_a", st.UploadID, 60*time.Second)
		t.Logf("verified by the survivor %.1fs after it started (lease 2s)", time.Since(start).Seconds())
		if done.State != upload.StateSuccess || done.SHA256 != sha(data) {
			t.Fatalf("final = %+v", done)
		}
		time.Sleep(300 * time.Millisecond) // room for a wrong second outcome
		if n := e.count("files", "upload_id = ?", st.UploadID); n != 1 {
			t.Fatalf("files = %d, want 1", n)
		}
		if n := e.count("outbox", "subject = ?", st.UploadID); n != 1 {
			t.Fatalf("outbox rows = %d, want 1", n)
		}
		if n := e.count("outbox", "subject = ? AND type = ?", st.UploadID, notify.UploadCompleted); n != 1 {
			t.Fatalf("upload.completed rows = %d, want 1", n)
		}
		if n := e.count("blobs", "refs = 1 AND sha256 = ?", sha(data)); n != 1 {
			t.Fatalf("blobs = %d, want 1", n)
		}
		j, _ = e.queue.Get(ctx, upload.KindVerify, st.UploadID)
		if j.State != jobs.StateDone || j.Attempts != 2 {
			t.Fatalf("verify job %s after %d attempts, want done after 2", j.State, j.Attempts)
		}
		if m, _ := e.queue.Get(ctx, upload.KindMerge, st.UploadID); m.State != jobs.StateDone || m.Attempts != 1 {
			t.Fatalf("merge job %s after %d attempts, want done after 1", m.State, m.Attempts)
		}
	})
}

// TestMergeWorkerProcess is the child of the kill test: it runs merge
// workers with a hook that SIGKILLs the process once verification has
// read its first chunk.
func TestMergeWorkerProcess(t *testing.T) {
	if os.Getenv("FERRY_UPLOAD_CHILD") != "kill" {
		t.Skip("helper process for TestMergeWorkerKilledDuringVerification")
	}
	var once atomic.Bool
	svc, q := childService(t, upload.Hooks{VerifyProgress: func(id string, read int64) {
		if once.CompareAndSwap(false, true) {
			fmt.Printf("VERIFYING %s %d\n", id, read)
			os.Stdout.Sync()
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}})
	r := jobs.NewRunner(q, jobs.RunnerConfig{Lease: 2 * time.Second, Poll: 50 * time.Millisecond, Owner: "child", Log: testenv.Logger(t)})
	svc.Register(r)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r.Run(ctx, time.Second)
	t.Fatal("the hook never fired")
}

// A verification longer than the lease stays with its worker: the runner
// heartbeats the lease while the object streams, so a second worker never
// takes the job over and the verification runs once.
func TestLongVerificationKeepsItsLease(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		var chunks atomic.Int32
		e := newEnv(t, db, func(c *testConfig) {
			c.Hooks.VerifyProgress = func(string, int64) {
				chunks.Add(1)
				time.Sleep(550 * time.Millisecond) // 11 chunks: about three leases
			}
		})
		c := newClient(t, e, "usr_a")
		data := randomBytes(10*upload.VerifyChunk + 1) // 11 chunks
		st := c.uploadAll("slow.bin", data, true)
		// A lease of 2s with a heartbeat every 2/3s leaves room for a busy
		// machine (SQLite write waits, -race) without losing the lease.
		e.run(t, 2*time.Second)
		e.run(t, 2*time.Second) // a second worker, waiting for a lapse
		done := e.waitVerified("usr_a", st.UploadID, 60*time.Second)
		if done.State != upload.StateSuccess {
			t.Fatalf("final = %+v", done)
		}
		j, _ := e.queue.Get(context.Background(), upload.KindVerify, st.UploadID)
		if j.Attempts != 1 || chunks.Load() != 11 {
			t.Fatalf("attempts = %d, chunks verified = %d; want 1 and 11", j.Attempts, chunks.Load())
		}
	})
}

// Storage errors retry. An unreachable store is an outage: the job waits
// and tries again without using up its attempts, the upload stays merging,
// and a worker that reaches S3 finishes it. A store that refuses ferry
// (wrong credentials) uses up the attempts, and then the upload fails with
// the reason and an event.
func TestTransientStorageErrorsRetry(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil)
		ctx := context.Background()
		down, err := s3store.New(ctx, s3store.Config{Endpoint: "http://127.0.0.1:1", Region: "us-east-1", Bucket: e.store.Bucket(),
			AccessKey: "a", SecretKey: "b", PathStyle: true, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		srv := testenv.S3(t)
		refusing, err := s3store.New(ctx, s3store.Config{Endpoint: srv.Endpoint, Region: "us-east-1", Bucket: e.store.Bucket(),
			AccessKey: srv.AccessKey, SecretKey: "not-the-secret", PathStyle: true, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		broken := func(store *s3store.Store, attempts int) *env {
			return newEnv(t, db, func(c *testConfig) {
				c.Store, c.Queue, c.MergeAttempts = store, e.queue, attempts
				c.MergeBackoff = func(int) time.Duration { return 50 * time.Millisecond }
			})
		}
		c := newClient(t, e, "usr_a")

		st := c.uploadAll("retry.bin", randomBytes(1000), true)
		t.Run("unreachable", func(t *testing.T) {
			broken(down, 1).run(t, 5*time.Second)
			deadline := time.Now().Add(30 * time.Second)
			for {
				j, _ := e.queue.Get(ctx, upload.KindMerge, st.UploadID)
				if j.OutageWaits >= 2 && j.LastError != nil {
					if !strings.Contains(*j.LastError, "unreachable") || j.Attempts > 1 || j.State == jobs.StateFailed {
						t.Fatalf("after %d outage waits: attempts %d, state %s, last error %q; want the attempt kept",
							j.OutageWaits, j.Attempts, j.State, *j.LastError)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("job %+v did not wait for the store", j)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
		if u := e.upload(st.UploadID); u.State != upload.StateMerging {
			t.Fatalf("after an outage the upload is %s, want still merging", u.State)
		}
		t.Run("reachable", func(t *testing.T) {
			e.run(t, 5*time.Second)
			if done := e.waitVerified("usr_a", st.UploadID, 60*time.Second); done.State != upload.StateSuccess {
				t.Fatalf("final = %+v", done)
			}
		})

		gaveUp := c.uploadAll("never.bin", randomBytes(1000), true)
		t.Run("out of attempts", func(t *testing.T) {
			broken(refusing, 2).run(t, 5*time.Second)
			done := e.waitVerified("usr_a", gaveUp.UploadID, 30*time.Second)
			if done.State != upload.StateFailed || !strings.Contains(done.Error, "gave up after 2 attempts") {
				t.Fatalf("final = %s %q", done.State, done.Error)
			}
		})
		if n := e.count("outbox", "type = ? AND subject = ?", notify.UploadFailed, gaveUp.UploadID); n != 1 {
			t.Fatalf("upload.failed events = %d", n)
		}
	})
}
