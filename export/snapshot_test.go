package export

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-io/ferry/chat"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/notify"
	"github.com/ferry-io/ferry/s3store"
)

// X2: the export holds what the user could see at the snapshot, exactly:
// nothing from before their joins, between a leave and a re-join, from
// conversations they never joined, or written after the snapshot; recalls
// count only when they happened at or before it.
func TestExportIsTheSnapshot(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil, Config{ShardSize: 3})
		ctx := context.Background()
		alice, bob, carol := e.user("alice", false), e.user("bob", false), e.user("carol", false)
		root := e.user("root", true)
		e.files["fil_alice1"], e.files["fil_alice2"], e.files["fil_bob1"] = alice.ID, alice.ID, bob.ID

		want := map[string][]line{} // conversation → the lines alice's export must have
		msgs := map[string]chat.Message{}
		post := func(a chat.Actor, conv, body string, visible bool, files ...string) {
			t.Helper()
			m, err := e.chat.Post(ctx, a, conv, body, files)
			if err != nil {
				t.Fatalf("post %q: %v", body, err)
			}
			msgs[body] = m
			if visible {
				if files == nil {
					files = []string{}
				}
				want[conv] = append(want[conv], line{Attachments: files, Body: body, Conv: conv, Gseq: m.Gseq,
					Sender: a.ID, SentAt: m.SentAt.UTC().Format(sentAtLayout), Seq: m.Seq})
			}
		}
		recalled := func(conv, body string) { // mark an expected line recalled
			for i, l := range want[conv] {
				if l.Body == body {
					want[conv][i].Body, want[conv][i].Recalled, want[conv][i].Attachments = "", true, []string{}
				}
			}
		}
		conv := func(a chat.Actor, title string) string {
			t.Helper()
			c, err := e.chat.CreateConversation(ctx, a, title)
			if err != nil {
				t.Fatal(err)
			}
			return c.ID
		}
		ok := func(_ int64, err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}

		// team: bob talks before alice joins; she sees from her join on.
		team := conv(bob, "team")
		post(bob, team, "team before alice 1", false)
		post(bob, team, "team before alice 2", false)
		ok(e.chat.AddMember(ctx, bob, team, alice.ID))
		post(bob, team, "team t1", true, "fil_bob1")
		post(alice, team, "team t2 <&> \"quoted\" 雪", true, "fil_alice1", "fil_alice2")
		post(bob, team, "team t3", true)
		post(bob, team, "team t4 recalled after the snapshot", true)
		post(bob, team, "team t5 recalled before the snapshot", true)
		ok(e.chat.Recall(ctx, bob, team, msgs["team t5 recalled before the snapshot"].Seq))
		recalled(team, "team t5 recalled before the snapshot")
		ok(e.chat.Recall(ctx, root, team, msgs["team t2 <&> \"quoted\" 雪"].Seq)) // an admin's recall drops the attachments too
		recalled(team, "team t2 <&> \"quoted\" 雪")

		// big: alice leaves and comes back; the gap is invisible.
		big := conv(alice, "big")
		ok(e.chat.AddMember(ctx, alice, big, bob.ID))
		post(alice, big, "big b1", true)
		post(bob, big, "big b2", true)
		ok(e.chat.RemoveMember(ctx, alice, big, alice.ID))
		post(bob, big, "big b3 while alice is away", false)
		post(bob, big, "big b4 while alice is away", false)
		ok(e.chat.AddMember(ctx, bob, big, alice.ID))
		post(bob, big, "big b5 after alice is back", true)

		// private: alice never joined.
		private := conv(carol, "private")
		ok(e.chat.AddMember(ctx, carol, private, bob.ID))
		post(carol, private, "private p1", false)

		all := e.create(alice, "all-1", "all")
		only := e.create(alice, "team-1", "conv:"+team)
		var snap int64
		db.Model(&models.Export{}).Where("id = ?", all.ID).Pluck("snapshot_gseq", &snap)
		if now, _ := chat.Snapshot(ctx, db.DB); snap != now {
			t.Fatalf("snapshot %d, counter %d", snap, now)
		}
		_, _, err := e.svc.Create(ctx, alice.ID, "private-1", Request{Scope: "conv:" + private})
		if !errors.Is(err, chat.ErrConversationNotFound) {
			t.Fatalf("export of a conversation alice never joined: %v, want not found", err)
		}

		// Everything after the snapshot must not show.
		post(bob, team, "team t6 after the snapshot", false)
		ok(e.chat.Recall(ctx, bob, team, msgs["team t4 recalled after the snapshot"].Seq))
		ok(e.chat.RemoveMember(ctx, alice, team, alice.ID))
		ok(e.chat.RemoveMember(ctx, alice, big, alice.ID))
		ok(e.chat.AddMember(ctx, carol, private, alice.ID))
		post(carol, private, "private p2 after alice joined", false)
		post(bob, big, "big b6 after the snapshot", false)

		e.start()
		doneAll := e.wait(all.ID, 30*time.Second, StateDone, StateFailed)
		doneOnly := e.wait(only.ID, 30*time.Second, StateDone, StateFailed)
		if doneAll.State != StateDone || doneOnly.State != StateDone {
			t.Fatalf("states %s (%v), %s (%v)", doneAll.State, doneAll.Error, doneOnly.State, doneOnly.Error)
		}

		convs := []string{team, big}
		sort.Strings(convs)
		var wantAll []line
		for _, c := range convs {
			wantAll = append(wantAll, want[c]...)
		}
		checkLines(t, e, doneAll, wantAll)
		checkLines(t, e, doneOnly, want[team])
		if *doneAll.ShardCount != 3 || *doneAll.MessageCount != int64(len(wantAll)) {
			t.Fatalf("plan: %d shards, %d messages; want 3 (team 5 → 3+2, big 3) and %d", *doneAll.ShardCount, *doneAll.MessageCount, len(wantAll))
		}

		// The owner sees it done with a signed link; others see nothing.
		v, err := e.svc.Get(ctx, alice.ID, all.ID)
		if err != nil {
			t.Fatal(err)
		}
		u, err := url.Parse(v.DownloadURL)
		if err != nil || u.Path != "/download/"+all.ID || v.SHA256 != *doneAll.SHA256 || v.Bytes != *doneAll.Bytes {
			t.Fatalf("view %+v", v)
		}
		if _, err := testSigner.Verify("/download/"+all.ID, all.ID, u.Query()); err != nil || u.Query().Get("u") != alice.ID {
			t.Fatalf("download link %s does not verify for alice: %v", v.DownloadURL, err)
		}
		if _, err := e.svc.Get(ctx, bob.ID, all.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("bob reading alice's export: %v", err)
		}

		// export.completed went out with the state change.
		var ev models.OutboxEvent
		if err := db.Where("subject = ? AND type = ?", all.ID, notify.ExportCompleted).Take(&ev).Error; err != nil {
			t.Fatalf("no export.completed outbox row: %v", err)
		}
		if !strings.Contains(ev.Payload, *doneAll.SHA256) || ev.UserID != alice.ID {
			t.Fatalf("outbox payload %s", ev.Payload)
		}
		// Shard objects stay unless DeleteShards is set.
		if keys := keysUnder(t, e.store.Bucket(), shardPrefix(all.ID)); len(keys) != 3 {
			t.Fatalf("shard objects %v; DeleteShards is off, want 3", keys)
		}
	})
}

var wantKeys = []string{"attachments", "body", "conv", "gseq", "recalled", "sender", "sent_at", "seq"}

// checkLines compares an export's artifact with the expected lines, and
// checks the format: sorted keys, sha256, CRC32C and size as recorded, and
// the digests the download proxy is given.
func checkLines(t *testing.T, e *env, x models.Export, want []line) {
	t.Helper()
	raw, lines := artifactLines(t, e.store.Bucket(), x.ID)
	sum := sha256.Sum256(raw)
	if hex.EncodeToString(sum[:]) != *x.SHA256 || int64(len(raw)) != *x.Bytes {
		t.Fatalf("artifact sha256/size %x/%d, recorded %s/%d", sum, len(raw), *x.SHA256, *x.Bytes)
	}
	if x.CRC32C == nil || *x.CRC32C != s3store.CRC32C(raw) {
		t.Fatalf("artifact crc32c %s, recorded %v", s3store.CRC32C(raw), x.CRC32C)
	}
	res, err := e.svc.Resolve(context.Background(), x.ID, x.UserID)
	if err != nil || res.SHA256 != *x.SHA256 || res.CRC32C != *x.CRC32C || res.Size != *x.Bytes {
		t.Fatalf("resolved %+v, %v; recorded sha256 %s, crc32c %s", res, err, *x.SHA256, *x.CRC32C)
	}
	if raw[3] != 0 || !bytes.Equal(raw[4:8], []byte{0, 0, 0, 0}) || raw[9] != 255 {
		t.Fatalf("gzip header % x: want no name, mtime 0, OS unknown", raw[:10])
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), joinLines(lines))
	}
	for i, l := range lines {
		dec := json.NewDecoder(bytes.NewReader(l))
		dec.Token()
		var keys []string
		for dec.More() {
			k, _ := dec.Token()
			keys = append(keys, k.(string))
			var skip json.RawMessage
			dec.Decode(&skip)
		}
		if fmt.Sprint(keys) != fmt.Sprint(wantKeys) {
			t.Fatalf("line %d keys %v, want %v", i, keys, wantKeys)
		}
		var got line
		if err := json.Unmarshal(l, &got); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want[i]) {
			t.Fatalf("line %d:\n got %+v\nwant %+v", i, got, want[i])
		}
	}
}

func joinLines(ls []json.RawMessage) string {
	var b strings.Builder
	for _, l := range ls {
		b.Write(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// X1 at the service: replays, other bodies, per-user keys, and racing
// identical requests that make one job.
func TestCreateIsIdempotent(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil, Config{})
		ctx := context.Background()
		alice, bob := e.user("alice", false), e.user("bob", false)
		c, _ := e.chat.CreateConversation(ctx, alice, "c")

		first, replayed, err := e.svc.Create(ctx, alice.ID, "k", Request{Scope: "all"})
		if err != nil || replayed || first.State != StateQueued {
			t.Fatalf("first: %+v %v %v", first, replayed, err)
		}
		again, replayed, err := e.svc.Create(ctx, alice.ID, "k", Request{Scope: "all"})
		if err != nil || !replayed || again.ID != first.ID {
			t.Fatalf("replay: %+v %v %v", again, replayed, err)
		}
		if _, _, err := e.svc.Create(ctx, alice.ID, "k", Request{Scope: "conv:" + c.ID}); !errors.Is(err, ErrKeyReused) {
			t.Fatalf("same key, other body: %v", err)
		}
		theirs, replayed, err := e.svc.Create(ctx, bob.ID, "k", Request{Scope: "all"})
		if err != nil || replayed || theirs.ID == first.ID {
			t.Fatalf("bob with alice's key: %+v %v %v", theirs, replayed, err)
		}
		for _, scope := range []string{"", "ALL", "conv:", "conv:a b", "conv:" + strings.Repeat("x", 41), "user:x"} {
			if _, _, err := e.svc.Create(ctx, alice.ID, "bad-"+scope, Request{Scope: scope}); !errors.Is(err, ErrInvalidScope) {
				t.Fatalf("scope %q: %v", scope, err)
			}
		}

		const n = 20
		ids := make([]string, n)
		errs := make([]error, n)
		fresh := 0
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				v, replayed, err := e.svc.Create(ctx, alice.ID, "race", Request{Scope: "all"})
				ids[i], errs[i] = v.ID, err
				if !replayed {
					mu.Lock()
					fresh++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil || ids[i] != ids[0] {
				t.Fatalf("request %d: %s %v (first %s)", i, ids[i], errs[i], ids[0])
			}
		}
		var exports, jobRows int64
		db.Model(&models.Export{}).Where("user_id = ? AND idempotency_key = ?", alice.ID, "race").Count(&exports)
		db.Model(&models.Job{}).Where("kind = ? AND business_key = ?", JobKind, ids[0]).Count(&jobRows)
		if exports != 1 || jobRows != 1 || fresh != 1 {
			t.Fatalf("%d exports, %d jobs, %d fresh answers; want 1, 1, 1", exports, jobRows, fresh)
		}
	})
}

// Two exports of the same snapshot produce the same bytes, whatever their
// ids, and even when they are cut into shards of different sizes.
func TestSameSnapshotSameBytes(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		store := testenv.Store(t)
		small := newEnv(t, db, store, Config{ShardSize: 7})
		large := newEnv(t, db, store, Config{ShardSize: 500})
		ctx := context.Background()
		var ids []string
		for i := range 4 {
			ids = append(ids, small.user(fmt.Sprintf("u%d", i), false).ID)
		}
		if _, err := chat.Seed(ctx, db.DB, chat.SeedOptions{Users: ids, Conversations: 3, Messages: 400, Seed: 3}); err != nil {
			t.Fatal(err)
		}
		a := small.create(chat.Actor{ID: ids[0]}, "a", "all")
		stop := small.start()
		xa := small.wait(a.ID, 60*time.Second, StateDone)
		stop() // or it would take b too, with its own shard size
		b := large.create(chat.Actor{ID: ids[0]}, "b", "all")
		large.start()
		xb := large.wait(b.ID, 60*time.Second, StateDone)
		if xa.SnapshotGseq != xb.SnapshotGseq || *xa.ShardCount == *xb.ShardCount {
			t.Fatalf("snapshots %d/%d, shards %d/%d", xa.SnapshotGseq, xb.SnapshotGseq, *xa.ShardCount, *xb.ShardCount)
		}
		if *xa.SHA256 != *xb.SHA256 || !bytes.Equal(object(t, store.Bucket(), artifactKey(a.ID)), object(t, store.Bucket(), artifactKey(b.ID))) {
			t.Fatalf("same snapshot, different artifacts: %s vs %s", *xa.SHA256, *xb.SHA256)
		}
		var jobsDone int64
		db.Model(&models.Job{}).Where("kind = ? AND state = ?", JobKind, jobs.StateDone).Count(&jobsDone)
		if jobsDone != 2 {
			t.Fatalf("%d export jobs done, want 2", jobsDone)
		}
	})
}
