package upload

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/random"
	"github.com/ferry-io/ferry/models"
)

// TicketPrefix starts every upload ticket, so that ferry (and secret
// scanners) tell one from an API token.
const TicketPrefix = "ftk_"

// Ticket lifetimes: how long a ticket may wait for its upload to start.
const (
	DefaultTicketTTL = time.Hour
	MaxTicketTTL     = 7 * 24 * time.Hour
	maxContentTypes  = 32
)

// TicketRequest is what a backend asks a ticket for.
type TicketRequest struct {
	// UserID is the user the upload will belong to; the caller has checked
	// that the user exists.
	UserID string
	// CreatedBy names who asked (a service key's id), for the record.
	CreatedBy string
	// Metadata is the trusted metadata every file of the ticket carries.
	Metadata Metadata
	// MaxSize bounds the file's size in bytes; 0 leaves the server's limit.
	MaxSize int64
	// ContentTypes, when not empty, are the media types the file may
	// declare: exact ("video/mp4") or a whole type ("image/*").
	ContentTypes []string
	// TTL is how long the ticket may wait for its upload to start; 0 is
	// DefaultTicketTTL.
	TTL time.Duration
}

// Ticket is an upload ticket: the right to make one upload as UserID,
// within its limits. Its secret is shown once, when it is created.
type Ticket struct {
	ID           string
	UserID       string
	Metadata     Metadata
	MaxSize      int64
	ContentTypes []string
	// UploadID is the upload the ticket made, or "" while it is unused.
	UploadID  string
	CreatedAt time.Time
	ExpiresAt time.Time
}

var (
	// ErrTicketUnknown answers a ticket ferry does not know (or no longer
	// keeps), like any other bad credential.
	ErrTicketUnknown = &errkind.Error{Kind: errkind.Unauthenticated, Code: "unauthenticated", Detail: "missing, invalid or revoked credentials"}
	// ErrTicketExpired answers a ticket whose upload never started in time.
	ErrTicketExpired = errkind.New(errkind.Unauthenticated, "ticket_expired", "the upload ticket expired before its upload started; ask for a new one")
	errTicketUsed    = errkind.New(errkind.Conflict, "ticket_used", "the upload ticket was used already: a ticket makes one upload")
)

// CreateTicket records a ticket for r.UserID and returns its secret (shown
// only this once) and the ticket.
func (s *Service) CreateTicket(ctx context.Context, r TicketRequest) (string, Ticket, error) {
	if r.UserID == "" {
		return "", Ticket{}, errkind.Invalidf("invalid_user", "name the user the upload is for")
	}
	if err := r.Metadata.check("metadata"); err != nil {
		return "", Ticket{}, err
	}
	if r.MaxSize < 0 || r.MaxSize > s.cfg.MaxSize {
		return "", Ticket{}, errkind.Invalidf("invalid_max_size", "max_size must be 1-%d bytes, or absent", s.cfg.MaxSize)
	}
	types, err := checkContentTypes(r.ContentTypes)
	if err != nil {
		return "", Ticket{}, err
	}
	ttl := r.TTL
	switch {
	case ttl == 0:
		ttl = DefaultTicketTTL
	case ttl < time.Second || ttl > MaxTicketTTL:
		return "", Ticket{}, errkind.Invalidf("invalid_expires_in", "expires_in must be 1-%d seconds", int(MaxTicketTTL.Seconds()))
	}
	secret := TicketPrefix + randomToken()
	now := s.nowUTC()
	row := models.UploadTicket{
		ID: models.NewID("tkt"), Hash: ticketHash(secret), UserID: r.UserID, CreatedBy: r.CreatedBy,
		Metadata: r.Metadata.encode(), MaxSize: r.MaxSize, CreatedAt: now, ExpiresAt: now.Add(ttl),
	}
	if len(types) > 0 {
		b, _ := json.Marshal(types)
		ct := string(b)
		row.ContentTypes = &ct
	}
	if err := s.db.WithContext(ctx).Create(&row).Error; err != nil {
		return "", Ticket{}, fmt.Errorf("upload: create ticket: %w", err)
	}
	s.log.InfoContext(ctx, "upload ticket created", "ticket_id", row.ID, "user_id", r.UserID, "created_by", r.CreatedBy,
		"max_size", r.MaxSize, "expires_at", row.ExpiresAt)
	return secret, toTicket(&row), nil
}

// checkContentTypes validates a ticket's media types and normalises them
// to lower case without parameters.
func checkContentTypes(types []string) ([]string, error) {
	if len(types) > maxContentTypes {
		return nil, errkind.Invalidf("invalid_content_types", "content_types may list at most %d media types", maxContentTypes)
	}
	out := make([]string, 0, len(types))
	for _, t := range types {
		mt, _, err := mime.ParseMediaType(t)
		main, sub, ok := strings.Cut(mt, "/")
		if err != nil || !ok || main == "*" || sub == "" || len(t) > 255 {
			return nil, errkind.Invalidf("invalid_content_types", "content_types must be media types such as video/mp4 or image/*, not %q", truncate(t, 80))
		}
		out = append(out, mt)
	}
	return out, nil
}

// allows reports whether the ticket lets a file declare contentType.
func (t *Ticket) allows(contentType string) bool {
	if len(t.ContentTypes) == 0 {
		return true
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	main, _, _ := strings.Cut(mt, "/")
	for _, want := range t.ContentTypes {
		if want == mt || want == main+"/*" {
			return true
		}
	}
	return false
}

// checkType refuses a content type the ticket does not allow.
func (t *Ticket) checkType(contentType string) error {
	if t.allows(contentType) {
		return nil
	}
	return errkind.Invalidf("content_type_not_allowed", "the upload ticket does not allow content type %q", contentType).
		With("content_types", t.ContentTypes)
}

// checkSize refuses a file over the ticket's size limit.
func (t *Ticket) checkSize(size int64) error {
	if t.MaxSize == 0 || size <= t.MaxSize {
		return nil
	}
	return errkind.New(errkind.TooLarge, "ticket_max_size", "the file has %d bytes; the upload ticket allows at most %d", size, t.MaxSize).
		With("max_size", t.MaxSize).With("size", size)
}

// TicketBySecret resolves a ticket's secret. An unused ticket past its
// expiry is ErrTicketExpired; once a ticket has started its upload it
// keeps working for that upload, whatever the expiry says, so that a
// large upload is not cut off half-way (cleanup forgets it once the
// upload has ended and the ticket expired).
func (s *Service) TicketBySecret(ctx context.Context, secret string) (Ticket, error) {
	if !strings.HasPrefix(secret, TicketPrefix) || len(secret) > 128 {
		return Ticket{}, ErrTicketUnknown
	}
	var row models.UploadTicket
	err := s.db.WithContext(ctx).Where("hash = ?", ticketHash(secret)).Take(&row).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Ticket{}, ErrTicketUnknown
	}
	if err != nil {
		return Ticket{}, fmt.Errorf("upload: ticket: %w", err)
	}
	if row.UploadID == nil && !s.now().Before(row.ExpiresAt) {
		return Ticket{}, ErrTicketExpired
	}
	return toTicket(&row), nil
}

func toTicket(r *models.UploadTicket) Ticket {
	t := Ticket{ID: r.ID, UserID: r.UserID, Metadata: decodeMetadata(r.Metadata), MaxSize: r.MaxSize,
		CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt}
	if r.UploadID != nil {
		t.UploadID = *r.UploadID
	}
	if r.ContentTypes != nil {
		_ = json.Unmarshal([]byte(*r.ContentTypes), &t.ContentTypes)
	}
	return t
}

// claimTicket binds the ticket to uploadID inside tx, the transaction that
// inserts the upload: the conditional update lets exactly one of any
// number of racing inits through, and a rolled-back insert frees the
// ticket again.
func (s *Service) claimTicket(tx *gorm.DB, t *Ticket, uploadID string, now time.Time) error {
	res := tx.Model(&models.UploadTicket{}).Where("id = ? AND upload_id IS NULL AND expires_at > ?", t.ID, now).
		Updates(map[string]any{"upload_id": uploadID, "used_at": now})
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected == 0 {
		return errTicketUsed
	}
	return nil
}

// ticketUpload answers an init with a ticket that already made its
// upload: the same upload, when it is still under way and the client
// describes the same file (it lost its state and starts again), and
// ticket_used otherwise.
func (s *Service) ticketUpload(ctx context.Context, ticketID string, p plan) (InitResult, error) {
	var row models.UploadTicket
	if err := s.db.WithContext(ctx).Where("id = ?", ticketID).Take(&row).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return InitResult{}, ErrTicketUnknown
		}
		return InitResult{}, fmt.Errorf("upload: ticket: %w", err)
	}
	if row.UploadID == nil {
		if !s.now().Before(row.ExpiresAt) {
			return InitResult{}, ErrTicketExpired
		}
		return InitResult{}, errTicketUsed // the claim lost a race it should have won; let the client retry
	}
	u, err := s.load(ctx, row.UserID, *row.UploadID)
	if err != nil {
		return InitResult{}, errTicketUsed
	}
	if !liveStates[u.State] || s.expired(u) || u.Size != p.size || u.FileName != p.name || u.PartSize != p.partSize {
		return InitResult{}, errTicketUsed.With("upload_id", u.ID)
	}
	st, err := s.status(ctx, u)
	if err != nil {
		return InitResult{}, err
	}
	return InitResult{Outcome: Resumed, Upload: st}, nil
}

// ticketOf loads the ticket that started u, or nil when none did (or it
// is no longer kept).
func (s *Service) ticketOf(ctx context.Context, u *models.Upload) (*Ticket, error) {
	if u.TicketID == nil {
		return nil, nil
	}
	var row models.UploadTicket
	err := s.db.WithContext(ctx).Where("id = ?", *u.TicketID).Take(&row).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("upload: ticket of %s: %w", u.ID, err)
	}
	t := toTicket(&row)
	return &t, nil
}

// Covers reports whether t may act on the upload with this id: only the
// one upload it made.
func (t Ticket) Covers(uploadID string) bool { return t.UploadID != "" && t.UploadID == uploadID }

func ticketHash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

func randomToken() string { return random.URLSafe(32) }
