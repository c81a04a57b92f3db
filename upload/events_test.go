package upload_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/notify"
	"github.com/ferry-io/ferry/upload"
)

// eventTimes is what a receiver reads from an upload event's data.
type eventTimes struct {
	UploadID        string    `json:"upload_id"`
	UploadCreatedAt time.Time `json:"upload_created_at"`
	CompletedAt     time.Time `json:"completed_at"`
	VerifiedAt      time.Time `json:"verified_at"`
	CreatedAt       time.Time `json:"created_at"`
	FailedAt        time.Time `json:"failed_at"`
	SHA256          string    `json:"sha256"`
}

func (e *env) eventData(subject, typ string) eventTimes {
	return outboxData[eventTimes](e, subject, typ)
}

// outboxData decodes the data of the typ event about subject.
func outboxData[T any](e *env, subject, typ string) T {
	e.t.Helper()
	var ev models.OutboxEvent
	if err := e.db.Where("subject = ? AND type = ?", subject, typ).Take(&ev).Error; err != nil {
		e.t.Fatalf("no %s outbox row for %s: %v", typ, subject, err)
	}
	var body struct{ Data T }
	if err := json.Unmarshal([]byte(ev.Payload), &body); err != nil {
		e.t.Fatal(err)
	}
	return body.Data
}

// upload.completed and upload.failed carry the times of the changes they
// report, equal to what the rows record: when the upload began, and when
// it was verified (with the file's creation) or failed.
func TestEventsCarryTheirTimes(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil)
		e.run(t, 5*time.Second)
		ctx := context.Background()
		c := newClient(t, e, "usr_a")

		st := c.uploadAll("times.bin", randomBytes(5*mib+10), true)
		done := e.waitVerified("usr_a", st.UploadID, 30*time.Second)
		u := e.upload(st.UploadID)
		var f models.File
		if err := e.db.Where("id = ?", done.FileID).Take(&f).Error; err != nil {
			t.Fatal(err)
		}
		got := e.eventData(st.UploadID, notify.UploadCompleted)
		if !got.UploadCreatedAt.Equal(u.CreatedAt) || u.FinishedAt == nil || !got.CompletedAt.Equal(*u.FinishedAt) ||
			!got.CreatedAt.Equal(f.CreatedAt) || got.CompletedAt.Before(got.UploadCreatedAt) || got.VerifiedAt.Before(got.CompletedAt) {
			t.Fatalf("upload.completed times %+v; the rows have upload created %s, finished %v, file created %s",
				got, u.CreatedAt, u.FinishedAt, f.CreatedAt)
		}

		// A part S3 holds other than the client reported fails the merge.
		// (Reported wrong, rather than replaced after its report: a store
		// that keeps every PUT of a part, SeaweedFS, would still hold the
		// reported one and merge it.)
		data := randomBytes(5*mib + 10)
		res, err := e.svc.Init(ctx, "usr_a", upload.InitRequest{FileName: "changed.bin", Size: int64(len(data))})
		if err != nil {
			t.Fatal(err)
		}
		c.send(res.Upload, data, allParts(res.Upload), true)
		elsewhere := md5.Sum(randomBytes(10))
		if _, err := e.svc.ReportPart(ctx, "usr_a", res.Upload.UploadID, 1, hex.EncodeToString(elsewhere[:]), int64(len(partBytes(res.Upload, data, 1)))); err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.Complete(ctx, "usr_a", res.Upload.UploadID, upload.CompleteRequest{}); err != nil {
			t.Fatal(err)
		}
		if done := e.waitVerified("usr_a", res.Upload.UploadID, 30*time.Second); done.State != upload.StateFailed {
			t.Fatalf("upload with a part replaced after its report: %s", done.State)
		}
		u = e.upload(res.Upload.UploadID)
		got = e.eventData(res.Upload.UploadID, notify.UploadFailed)
		if !got.UploadCreatedAt.Equal(u.CreatedAt) || u.FinishedAt == nil || !got.FailedAt.Equal(*u.FinishedAt) || got.FailedAt.Before(got.UploadCreatedAt) {
			t.Fatalf("upload.failed times %+v; the row has created %s, finished %v", got, u.CreatedAt, u.FinishedAt)
		}
	})
}
