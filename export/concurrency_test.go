package export

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/chat"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
)

// dataSignature hashes every chat write at or below snap: messages,
// recalls, joins and leaves. It must never change once snap was read.
func dataSignature(t *testing.T, db *testenv.DB, snap int64) string {
	t.Helper()
	h := sha256.New()
	for _, q := range []string{
		"SELECT conversation_id, seq, gseq FROM messages WHERE gseq <= ? ORDER BY gseq",
		"SELECT conversation_id, seq, recall_gseq FROM recalls WHERE recall_gseq <= ? ORDER BY recall_gseq",
		"SELECT conversation_id, user_id, join_gseq FROM memberships WHERE join_gseq <= ? ORDER BY join_gseq, user_id",
		"SELECT conversation_id, user_id, leave_gseq FROM memberships WHERE leave_gseq <= ? ORDER BY leave_gseq",
	} {
		rows, err := db.Raw(q, snap).Rows()
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var a, b string
			var g int64
			rows.Scan(&a, &b, &g)
			fmt.Fprintf(h, "%s|%s|%d\n", a, b, g)
		}
		rows.Close()
	}
	return hex.EncodeToString(h.Sum(nil))
}

// visibleSignature hashes what export x must contain, from its permission
// snapshot: (conversation, seq, gseq, recalled) of every visible message.
func visibleSignature(t *testing.T, e *env, x View) string {
	t.Helper()
	ctx := context.Background()
	var snap int64
	e.db.Model(&models.Export{}).Where("id = ?", x.ID).Pluck("snapshot_gseq", &snap)
	convs, err := e.svc.conversations(ctx, x.ID)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	for _, c := range convs {
		msgs, err := chat.ReadMessages(ctx, e.db.DB, chat.Range{Conversation: c, Reader: snapshotReader(x.ID), AsOf: snap})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			fmt.Fprintf(h, "%s|%d|%d|%t\n", m.Conversation, m.Seq, m.Gseq, m.Recalled)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// X2 on MariaDB (the snapshot of package chat's "The global sequence"):
// writers keep committing transactions of random length (posts, recalls,
// leaves and re-joins) while exports are created.
// For every export, what lies at or below its snapshot is the same when
// read at once and when read again after all writers stopped, and the
// exports that run contain exactly that. The control subtest shows the
// same check catching the anomaly of an AUTO_INCREMENT sequence.
func TestSnapshotUnderConcurrentWriters(t *testing.T) {
	db := testenv.NewDB(t, models.MySQL)
	e := newEnv(t, db, nil, Config{ShardSize: 50})
	e.chat = testenv.Must(chat.New(chat.Config{DB: db.DB, Files: e.files}, chat.WithBeforeCommit(func() {
		time.Sleep(time.Duration(rand.IntN(6000)) * time.Microsecond)
	})))
	ctx := context.Background()
	reader, root := e.user("reader", false), e.user("root", true)
	var writers []chat.Actor
	for i := range 4 {
		writers = append(writers, e.user(fmt.Sprintf("w%d", i), false))
	}
	room, _ := e.chat.CreateConversation(ctx, reader, "room")
	side, _ := e.chat.CreateConversation(ctx, writers[0], "side")
	for _, w := range writers {
		e.chat.AddMember(ctx, reader, room.ID, w.ID)
	}
	e.chat.AddMember(ctx, writers[0], side.ID, reader.ID)

	var stop atomic.Bool
	var wg sync.WaitGroup
	var writes, failures atomic.Int64
	loop := func(fn func(i int) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load() && i < 100000; i++ {
				if err := fn(i); err != nil {
					failures.Add(1)
					t.Errorf("writer: %v", err)
					return
				}
				writes.Add(1)
			}
		}()
	}
	for _, w := range writers {
		loop(func(i int) error {
			_, err := e.chat.Post(ctx, w, room.ID, fmt.Sprintf("%s %d", w.ID, i), nil)
			return err
		})
	}
	loop(func(i int) error { // side talk while the reader comes and goes
		_, err := e.chat.Post(ctx, writers[0], side.ID, fmt.Sprintf("side %d", i), nil)
		if err == nil && i%5 == 0 {
			_, err = e.chat.RemoveMember(ctx, reader, side.ID, reader.ID)
			if err == nil {
				_, err = e.chat.AddMember(ctx, writers[0], side.ID, reader.ID)
			}
		}
		return err
	})
	loop(func(i int) error { // an admin recalls messages here and there
		_, err := e.chat.Recall(ctx, root, room.ID, int64(1+rand.IntN(i+1)))
		if err != nil && !errors.Is(err, chat.ErrMessageNotFound) {
			return err
		}
		return nil
	})

	type taken struct {
		v             View
		snap          int64
		data, visible string
	}
	var exports []taken
	// At least 4 s, and on a loaded machine longer (up to 40 s) until
	// there is enough to compare.
	deadline, hardDeadline := time.Now().Add(4*time.Second), time.Now().Add(40*time.Second)
	enough := func() bool { return len(exports) >= 10 && writes.Load() >= 100 }
	for i := 0; i < 200 && time.Now().Before(hardDeadline) && (time.Now().Before(deadline) || !enough()); i++ {
		v := e.create(reader, fmt.Sprintf("k%d", i), "all")
		var snap int64
		db.Model(&models.Export{}).Where("id = ?", v.ID).Pluck("snapshot_gseq", &snap)
		exports = append(exports, taken{v: v, snap: snap, data: dataSignature(t, db, snap), visible: visibleSignature(t, e, v)})
		time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	if failures.Load() > 0 {
		t.FailNow()
	}
	if !enough() {
		t.Fatalf("only %d exports and %d writes: the machine is too slow for this test to mean much", len(exports), writes.Load())
	}
	// Within a conversation seq and gseq grow together, which lets a
	// whole-conversation scan walk the gseq index (package chat).
	var disorder int64
	err := db.Raw(`SELECT COUNT(*) FROM (SELECT gseq, LAG(gseq) OVER (PARTITION BY conversation_id ORDER BY seq) AS prev FROM messages) x
		WHERE x.prev > x.gseq`).Scan(&disorder).Error
	if err != nil || disorder != 0 {
		t.Fatalf("%d messages whose gseq is below their predecessor's in seq order (%v)", disorder, err)
	}
	for _, x := range exports {
		if got := dataSignature(t, db, x.snap); got != x.data {
			t.Fatalf("export %s (snapshot %d): the data at or below the snapshot changed after it was taken", x.v.ID, x.snap)
		}
		if got := visibleSignature(t, e, x.v); got != x.visible {
			t.Fatalf("export %s (snapshot %d): the visible messages changed after the snapshot", x.v.ID, x.snap)
		}
	}

	// Run a sample of the exports: each contains exactly what its
	// snapshot showed when it was taken.
	var sample []taken
	for i := 0; i < len(exports); i += max(1, len(exports)/4) {
		sample = append(sample, exports[i])
	}
	e.start()
	for _, x := range sample {
		done := e.wait(x.v.ID, 2*time.Minute, StateDone)
		_, lines := artifactLines(t, e.store.Bucket(), done.ID)
		h := sha256.New()
		for _, l := range lines {
			var m line
			if err := json.Unmarshal(l, &m); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(h, "%s|%d|%d|%t\n", m.Conv, m.Seq, m.Gseq, m.Recalled)
		}
		if hex.EncodeToString(h.Sum(nil)) != x.visible {
			t.Fatalf("export %s: the artifact differs from what its snapshot showed at creation", done.ID)
		}
	}
	t.Logf("%d writes, %d exports checked, %d run", writes.Load(), len(exports), len(sample))

	t.Run("control: AUTO_INCREMENT gseq", func(t *testing.T) {
		// The source's PostgreSQL anomaly, on MariaDB: a sequence taken
		// at insert time, a snapshot of max(gseq). A transaction holding a
		// smaller number commits after a larger one was read.
		if err := db.Exec("CREATE TABLE naive (gseq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, body VARCHAR(64) NOT NULL) ENGINE=InnoDB").Error; err != nil {
			t.Fatal(err)
		}
		var stop atomic.Bool
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; !stop.Load() && i < 100000; i++ {
					db.Transaction(func(tx *gorm.DB) error {
						tx.Exec("INSERT INTO naive (body) VALUES ('x')")
						time.Sleep(time.Duration(rand.IntN(6000)) * time.Microsecond)
						return nil
					})
				}
			}()
		}
		type read struct{ snap, n int64 }
		var reads []read
		anomalies := 0
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) && anomalies == 0 {
			var r read
			db.Raw("SELECT COALESCE(MAX(gseq), 0) FROM naive").Scan(&r.snap)
			db.Raw("SELECT COUNT(*) FROM naive WHERE gseq <= ?", r.snap).Scan(&r.n)
			reads = append(reads, r)
			time.Sleep(2 * time.Millisecond)
			// Re-read the oldest reads once their in-flight writers are
			// surely done.
			for len(reads) > 0 && len(reads) > 20 {
				var again int64
				db.Raw("SELECT COUNT(*) FROM naive WHERE gseq <= ?", reads[0].snap).Scan(&again)
				if again != reads[0].n {
					anomalies++
				}
				reads = reads[1:]
			}
		}
		stop.Store(true)
		wg.Wait()
		if anomalies == 0 {
			t.Fatal("the check never caught the AUTO_INCREMENT anomaly; it would not catch a broken gseq either")
		}
	})
}
