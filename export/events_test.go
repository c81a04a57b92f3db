package export

import (
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-io/ferry/chat"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/notify"
)

// eventTimes is what a receiver reads from an export event's data.
type eventTimes struct {
	ExportID   string     `json:"export_id"`
	CreatedAt  time.Time  `json:"created_at"`
	StartedAt  *time.Time `json:"started_at"`
	FinishedAt time.Time  `json:"finished_at"`
	ExpiresAt  time.Time  `json:"expires_at"`
	FailedAt   time.Time  `json:"failed_at"`
}

func outboxData(t *testing.T, e *env, subject, typ string) eventTimes {
	t.Helper()
	var ev models.OutboxEvent
	if err := e.db.Where("subject = ? AND type = ?", subject, typ).Take(&ev).Error; err != nil {
		t.Fatalf("no %s outbox row for %s: %v", typ, subject, err)
	}
	var body struct{ Data eventTimes }
	if err := json.Unmarshal([]byte(ev.Payload), &body); err != nil {
		t.Fatal(err)
	}
	return body.Data
}

// export.completed and export.failed carry the times of the changes they
// report, equal to what the export's row records: requested, started,
// finished (or failed) and, once done, when the artifact goes.
func TestEventsCarryTheirTimes(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		var failing atomic.Value
		e := newEnv(t, db, nil, Config{ShardSize: 5, MaxAttempts: 1, Retention: 48 * time.Hour}, WithHooks(Hooks{AfterShard: func(id string, n int) error {
			if failing.Load() == id {
				return errors.New("storage hiccup")
			}
			return nil
		}}))
		users := seedUsers(t, e, 2, 6)
		done := e.create(chat.Actor{ID: users[0]}, "ok", "all")
		stop := e.start()
		x := e.wait(done.ID, 60*time.Second, StateDone, StateFailed)
		got := outboxData(t, e, done.ID, notify.ExportCompleted)
		if x.State != StateDone || got.ExportID != x.ID || !got.CreatedAt.Equal(x.CreatedAt) || got.StartedAt == nil || !got.StartedAt.Equal(*x.StartedAt) ||
			!got.FinishedAt.Equal(*x.FinishedAt) || !got.ExpiresAt.Equal(*x.ExpiresAt) || got.StartedAt.Before(got.CreatedAt) || got.FinishedAt.Before(*got.StartedAt) {
			t.Fatalf("export.completed times %+v; the row has created %s, started %v, finished %v, expires %v",
				got, x.CreatedAt, x.StartedAt, x.FinishedAt, x.ExpiresAt)
		}

		stop() // so that the next export waits until its failure is armed
		bad := e.create(chat.Actor{ID: users[1]}, "bad", "all")
		failing.Store(bad.ID)
		e.start()
		y := e.wait(bad.ID, 60*time.Second, StateDone, StateFailed)
		got = outboxData(t, e, bad.ID, notify.ExportFailed)
		if y.State != StateFailed || !got.CreatedAt.Equal(y.CreatedAt) || got.StartedAt == nil || !got.StartedAt.Equal(*y.StartedAt) ||
			!got.FailedAt.Equal(*y.FinishedAt) || got.FailedAt.Before(*got.StartedAt) {
			t.Fatalf("export.failed times %+v; the row has created %s, started %v, finished %v", got, y.CreatedAt, y.StartedAt, y.FinishedAt)
		}
	})
}
