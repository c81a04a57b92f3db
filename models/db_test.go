package models_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
)

// A SQLite database keeps every connection of a burst open once it is
// idle, so none is closed just as its query ends (and none is opened
// again for the next burst).
func TestSQLiteKeepsIdleConnections(t *testing.T) {
	ctx := context.Background()
	db, err := models.Open(ctx, models.SQLite, filepath.Join(t.TempDir(), "ferry.db"), testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqlDB.Close() })
	const burst = 8
	for range 3 {
		// Hold burst connections at once, then give them all back.
		var ready, release sync.WaitGroup
		ready.Add(burst)
		release.Add(1)
		errs := make(chan error, burst)
		for range burst {
			go func() {
				conn, err := sqlDB.Conn(ctx)
				ready.Done()
				if err != nil {
					errs <- err
					return
				}
				release.Wait()
				errs <- conn.Close()
			}()
		}
		ready.Wait()
		release.Done()
		for range burst {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	st := sqlDB.Stats()
	if st.MaxIdleClosed != 0 || st.Idle != burst || st.OpenConnections != burst {
		t.Fatalf("after 3 bursts of %d: %d open, %d idle, %d closed as surplus idle; want all %d kept open",
			burst, st.OpenConnections, st.Idle, st.MaxIdleClosed, burst)
	}
}
