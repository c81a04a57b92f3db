package export

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
)

// A done export is expired the moment its retention runs out, before any
// sweep: Get shows it expired with no link, List too, the download proxy's
// Artifact answers expired (410), and revoking it changes nothing. It
// used to say done, hand out a fresh link and serve 200 until the sweep.
func TestExpiryNeedsNoSweep(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		clk := &clock{now: time.Now()}
		e := newEnv(t, db, nil, Config{Retention: 75 * time.Second, Now: clk.Now})
		ctx := context.Background()
		alice := e.user("alice", false)
		c, _ := e.chat.CreateConversation(ctx, alice, "c")
		e.chat.Post(ctx, alice, c.ID, "hello", nil)
		x := e.create(alice, "x", "all")
		stop := e.start()
		done := e.wait(x.ID, 30*time.Second, StateDone)
		stop()

		clk.Advance(74 * time.Second)
		if v, _ := e.svc.Get(ctx, alice.ID, x.ID); v.State != StateDone || v.DownloadURL == "" {
			t.Fatalf("a second before expiry: %+v", v)
		}
		clk.Advance(30 * time.Second) // 29 s past expires_at; no sweep ran
		v, err := e.svc.Get(ctx, alice.ID, x.ID)
		if err != nil || v.State != StateExpired || v.DownloadURL != "" || v.SHA256 != "" {
			t.Fatalf("past expires_at: %+v %v", v, err)
		}
		if a, _ := e.svc.Artifact(ctx, x.ID); a.State != StateExpired || a.Key != "" {
			t.Fatalf("artifact past expires_at: %+v", a)
		}
		list, _, _ := e.svc.List(ctx, alice.ID, "", 0)
		if len(list) != 1 || list[0].State != StateExpired {
			t.Fatalf("list past expires_at: %+v", list)
		}
		if v, err := e.svc.Revoke(ctx, alice.ID, x.ID); err != nil || v.State != StateExpired {
			t.Fatalf("revoke past expires_at: %+v %v", v, err)
		}
		var row models.Export
		db.Where("id = ?", x.ID).Take(&row)
		if row.State != StateDone || !row.ExpiresAt.Equal(*done.ExpiresAt) {
			t.Fatalf("stored %s (expires %v): nothing but the sweep should write", row.State, row.ExpiresAt)
		}
		if err := e.svc.SweepNow(ctx); err != nil {
			t.Fatal(err)
		}
		db.Where("id = ?", x.ID).Take(&row)
		if row.State != StateExpired || row.PurgedAt == nil {
			t.Fatalf("after the sweep: %s, purged %v", row.State, row.PurgedAt)
		}
	})
}

// One sweep records every export that is due, not the first 100.
func TestSweepExpiresEveryDueExport(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil, Config{})
		now := models.Time(time.Now())
		past, purged := now.Add(-time.Minute), now
		sum, size := "0000000000000000000000000000000000000000000000000000000000000000", int64(1)
		var rows []models.Export
		for i := range 250 {
			rows = append(rows, models.Export{ID: fmt.Sprintf("exp_due%03d", i), UserID: "usr_a", IdempotencyKey: fmt.Sprint(i), Fingerprint: "f",
				Scope: "all", State: StateDone, SHA256: &sum, Bytes: &size, CreatedAt: past, UpdatedAt: past, FinishedAt: &past, ExpiresAt: &past,
				PurgedAt: &purged}) // nothing in the bucket to delete
		}
		if err := db.CreateInBatches(rows, 100).Error; err != nil {
			t.Fatal(err)
		}
		if err := e.svc.SweepNow(context.Background()); err != nil {
			t.Fatal(err)
		}
		var left int64
		db.Model(&models.Export{}).Where("state = ?", StateDone).Count(&left)
		if left != 0 {
			t.Fatalf("%d of 250 due exports still done after one sweep", left)
		}
	})
}
