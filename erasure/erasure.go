package erasure

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/export"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/notify"
	"github.com/ferry-io/ferry/quota"
	"github.com/ferry-io/ferry/upload"
	"github.com/ferry-io/ferry/users"
)

// ErrSelf refuses an admin erasing their own account: it would lock them
// out halfway through an administrative task, as deactivation would.
var ErrSelf = errkind.New(errkind.Conflict, "self_erasure", "an admin cannot erase their own account")

// Config is what a Service erases through. The domains' erase steps need
// only the database and the job queue, so `ferry user delete` erases
// without reaching S3; the jobs it writes run on a serving ferry.
type Config struct {
	DB    *gorm.DB
	Queue *jobs.Queue
	Users *users.Service
	Log   *slog.Logger
	Now   func() time.Time
}

// Service erases users.
type Service struct{ c Config }

// New returns a Service.
func New(c Config) (*Service, error) {
	if c.DB == nil || c.Queue == nil || c.Users == nil {
		return nil, errors.New("erasure: DB, Queue and Users are required")
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return &Service{c: c}, nil
}

// Report says what an erasure removed. It is also the user.deleted
// event's data.
type Report struct {
	UserID  string `json:"user_id"`
	Name    string `json:"name"`
	Files   int    `json:"files"`
	Uploads int    `json:"uploads"`
	Exports int    `json:"exports"`
	// Objects is how many objects and open multipart uploads are queued
	// for deletion from S3 (shared blobs other users hold are not).
	Objects int `json:"objects"`
	// DeletedAt is when the erasure committed (RFC 3339, UTC).
	DeletedAt time.Time `json:"deleted_at"`
}

// Erase deletes userID and everything of theirs (see the package doc) on
// behalf of actorID. A user that does not exist (or was erased already)
// is a not-found error; erasing oneself is ErrSelf.
func (s *Service) Erase(ctx context.Context, actorID, userID string) (Report, error) {
	if actorID != "" && actorID == userID {
		return Report{}, ErrSelf
	}
	var rep Report
	now := models.Time(s.c.Now())
	err := s.c.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		u, err := s.c.Users.Erase(ctx, tx, userID)
		if err != nil {
			return err
		}
		up, err := upload.EraseUser(ctx, tx, s.c.Queue, now, userID)
		if err != nil {
			return err
		}
		n, err := export.EraseUser(ctx, tx, s.c.Queue, userID)
		if err != nil {
			return err
		}
		if err := quota.EraseUser(ctx, tx, userID); err != nil {
			return err
		}
		rep = Report{UserID: u.ID, Name: u.Name, Files: up.Files, Uploads: up.Uploads, Exports: n, Objects: up.Objects + up.Live + n,
			DeletedAt: now}
		_, err = notify.Emit(ctx, tx, now, notify.Event{Type: notify.UserDeleted, Subject: u.ID, UserID: u.ID, Data: rep})
		return err
	})
	if err != nil {
		if errkind.KindOf(err) != nil {
			return Report{}, err
		}
		return Report{}, fmt.Errorf("erasure: erase %s: %w", userID, err)
	}
	s.c.Queue.Wake(upload.KindPurge)
	s.c.Queue.Wake(export.EraseKind)
	s.c.Queue.Wake(notify.WakeDispatch)
	s.c.Log.InfoContext(ctx, "user erased", "user_id", rep.UserID, "by", actorID, "files", rep.Files, "uploads", rep.Uploads,
		"exports", rep.Exports, "objects", rep.Objects)
	return rep, nil
}
