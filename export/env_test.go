package export

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/url"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"gorm.io/gorm"

	"github.com/ferry-io/ferry/chat"
	"github.com/ferry-io/ferry/download"
	"github.com/ferry-io/ferry/internal/chattest"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/presign"
	"github.com/ferry-io/ferry/s3store"
	"github.com/ferry-io/ferry/users"
)

// env is an export service on a real database and a real S3 bucket.
type env struct {
	t     *testing.T
	db    *testenv.DB
	store *s3store.Store
	queue *jobs.Queue
	svc   *Service
	chat  *chat.Service
	users *users.Service
	files chattest.Files
}

var (
	testSigner, _ = presign.NewSigner([]presign.Key{{ID: "t1", Secret: []byte("0123456789abcdef0123456789abcdef")}}, time.Now)
	testLinks, _  = download.NewLinks(download.LinksConfig{Signer: testSigner, PublicURL: "http://ferry.test", TTL: 300 * time.Second})
)

func newEnv(t *testing.T, db *testenv.DB, store *s3store.Store, o Config, opts ...Option) *env {
	t.Helper()
	if store == nil {
		store = testenv.Store(t)
	}
	if o.Backoff == nil {
		o.Backoff = func(int) time.Duration { return 20 * time.Millisecond }
	}
	o.Log = testenv.Logger(t)
	q := testenv.Must(jobs.NewQueue(jobs.QueueConfig{DB: db.DB, Now: time.Now}))
	files := chattest.Files{}
	return &env{
		t: t, db: db, store: store, queue: q, files: files,
		svc:   testenv.Must(New(withDeps(o, db.DB, store, q), opts...)),
		chat:  testenv.Must(chat.New(chat.Config{DB: db.DB, Files: files})),
		users: testenv.Must(users.New(users.Config{DB: db.DB, Now: time.Now, SessionTTL: time.Hour})),
	}
}

// withStageBytes bounds the shard bytes in a run's stages at n instead
// of stageBytes.
func withStageBytes(n int64) Option { return func(s *Service) { s.stageBytes = n } }

// withDeps is o with the dependencies every test service shares.
func withDeps(o Config, db *gorm.DB, store Storage, q *jobs.Queue) Config {
	o.DB, o.Store, o.Queue, o.Links = db, store, q, testLinks
	return o
}

// start runs a job runner with the export handlers until the test ends
// or the returned stop is called.
func (e *env) start() (stop func()) {
	e.t.Helper()
	r := jobs.NewRunner(e.queue, jobs.RunnerConfig{Lease: 10 * time.Second, Poll: 20 * time.Millisecond, Owner: "test", Log: testenv.Logger(e.t)})
	e.svc.Register(r)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx, 5*time.Second); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	e.t.Cleanup(stop)
	return stop
}

func (e *env) user(name string, admin bool) chat.Actor {
	e.t.Helper()
	u, _, err := e.users.Create(context.Background(), name, admin)
	if err != nil {
		e.t.Fatal(err)
	}
	return chat.Actor{ID: u.ID, Admin: admin}
}

// wait polls export id until it is in one of states.
func (e *env) wait(id string, within time.Duration, states ...string) models.Export {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		var x models.Export
		err := e.db.Where("id = ?", id).Take(&x).Error
		if err == nil {
			for _, s := range states {
				if x.State == s {
					return x
				}
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("export %s: want %v within %s, have %s (err %v, error %v)", id, states, within, x.State, err, x.Error)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *env) create(u chat.Actor, key, scope string) View {
	e.t.Helper()
	v, _, err := e.svc.Create(context.Background(), u.ID, key, Request{Scope: scope})
	if err != nil {
		e.t.Fatalf("create export %s %s: %v", key, scope, err)
	}
	return v
}

// minioClient is an S3 client independent of ferry's own adapter.
func minioClient(t testing.TB) *minio.Client {
	t.Helper()
	srv := testenv.S3(t)
	u, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	c, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, ""), Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// object reads key from bucket with the independent client; nil when it
// does not exist.
func object(t testing.TB, bucket, key string) []byte {
	t.Helper()
	o, err := minioClient(t).GetObject(context.Background(), bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	b, err := io.ReadAll(o)
	var er minio.ErrorResponse
	if errors.As(err, &er) && er.Code == "NoSuchKey" {
		return nil
	}
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return b
}

func putObject(t testing.TB, bucket, key string, b []byte) {
	t.Helper()
	_, err := minioClient(t).PutObject(context.Background(), bucket, key, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// keysUnder lists the object keys under prefix, sorted.
func keysUnder(t testing.TB, bucket, prefix string) []string {
	t.Helper()
	var out []string
	for o := range minioClient(t).ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		out = append(out, o.Key)
	}
	sort.Strings(out)
	return out
}

// artifactLines downloads and gunzips export id's artifact and returns
// its lines, each as raw JSON.
func artifactLines(t testing.TB, bucket, id string) (raw []byte, lines []json.RawMessage) {
	t.Helper()
	raw = object(t, bucket, artifactKey(id))
	if raw == nil {
		t.Fatalf("export %s has no artifact", id)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, json.RawMessage(append([]byte(nil), sc.Bytes()...)))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return raw, lines
}
