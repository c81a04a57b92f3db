package models_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
)

func TestMigrationsRenderForBothDialects(t *testing.T) {
	migs, err := models.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(migs) == 0 || migs[0].Version != 1 {
		t.Fatalf("migrations = %v", migs)
	}
	for _, m := range migs {
		for _, d := range []string{models.SQLite, models.MySQL} {
			stmts, err := m.Render(d)
			if err != nil {
				t.Fatalf("%04d/%s: %v", m.Version, d, err)
			}
			for _, s := range stmts {
				if strings.Contains(s, "{{") {
					t.Fatalf("%04d/%s: unexpanded template in %q", m.Version, d, s)
				}
			}
		}
	}
}

// Migrate applies every migration once, records it, and is a no-op the
// second time; replicas migrating at the same moment do not collide.
func TestMigrateIsIdempotentAndConcurrent(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		ctx := context.Background()
		migs, _ := models.Migrations()
		got, err := models.AppliedVersions(ctx, db.DB)
		if err != nil || len(got) != len(migs) {
			t.Fatalf("applied %v (%v), want %d migrations", got, err, len(migs))
		}
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				again, err := models.Migrate(ctx, db.DB)
				if err != nil || len(again) != 0 {
					t.Errorf("second migrate applied %v (%v), want nothing", again, err)
				}
			}()
		}
		wg.Wait()
		for _, table := range []string{"users", "tokens", "sessions", "jobs", "outbox"} {
			if !db.Migrator().HasTable(table) {
				t.Errorf("table %s missing", table)
			}
		}
	})
}

// A fresh database migrated by several processes at once (replicas
// starting together) ends up migrated exactly once.
func TestConcurrentFirstMigration(t *testing.T) {
	dsn := testenv.MySQLDatabase(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db, err := models.Open(ctx, models.MySQL, dsn, testenv.Logger(t))
			if err != nil {
				t.Error(err)
				return
			}
			defer func() { s, _ := db.DB(); s.Close() }()
			applied, err := models.Migrate(ctx, db)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			total += len(applied)
			mu.Unlock()
		}()
	}
	wg.Wait()
	migs, _ := models.Migrations()
	if total != len(migs) {
		t.Fatalf("migrations applied %d times in total, want %d", total, len(migs))
	}
}

func TestNewIDIsPrefixedAndUnique(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := models.NewID("upl")
		if !strings.HasPrefix(id, "upl_") || len(id) != 28 || seen[id] {
			t.Fatalf("bad or repeated id %q", id)
		}
		seen[id] = true
	}
}
