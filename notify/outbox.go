package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/models"
)

// Event types ferry emits.
const (
	UploadCompleted = "upload.completed"
	UploadFailed    = "upload.failed"
	ExportCompleted = "export.completed"
	ExportFailed    = "export.failed"
	// UserDeleted is emitted once, in the transaction that erases a user
	// (package erasure); its subject and user_id are the erased user's.
	UserDeleted = "user.deleted"
)

// Event is one notification to record.
type Event struct {
	Type    string
	Subject string // the resource the event is about (upload, file or export id)
	UserID  string // the resource's owner
	Data    any    // marshalled as the body's "data" member
}

// Body is the JSON every receiver gets, byte for byte as stored.
type Body struct {
	Type      string          `json:"type"`
	Timestamp string          `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

// Emit writes e to the outbox inside tx and returns its id. The body is
// rendered now, with the event's own time, so every delivery attempt sends
// the same bytes.
func Emit(ctx context.Context, tx *gorm.DB, now time.Time, e Event) (string, error) {
	data, err := json.Marshal(e.Data)
	if err != nil {
		return "", fmt.Errorf("notify: event data: %w", err)
	}
	at := models.Time(now)
	body, err := json.Marshal(Body{Type: e.Type, Timestamp: at.Format(time.RFC3339Nano), Data: data})
	if err != nil {
		return "", err
	}
	row := models.OutboxEvent{
		ID: models.NewID("evt"), Type: e.Type, Subject: e.Subject, UserID: e.UserID,
		Payload: string(body), CreatedAt: at,
	}
	if err := tx.WithContext(ctx).Create(&row).Error; err != nil {
		return "", fmt.Errorf("notify: outbox: %w", err)
	}
	return row.ID, nil
}
