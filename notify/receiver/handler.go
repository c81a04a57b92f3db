package receiver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// Message is a verified webhook.
type Message struct {
	ID        string          // webhook-id: the same on every retry of one event
	Timestamp time.Time       // webhook-timestamp of this attempt
	Type      string          // the event type, such as "upload.completed"
	EventTime time.Time       // when the event happened (the body's "timestamp")
	Data      json.RawMessage // the event's data
	Body      []byte          // the exact bytes that were signed
}

// Outcome says what Handle did with a message.
type Outcome int

// Outcomes of Handle.
const (
	Processed Outcome = iota + 1 // the message was new and the handler succeeded
	Duplicate                    // the id was processed before; nothing ran
)

// More errors Handle returns besides the verification errors.
var (
	// ErrMalformed: the message verified but its body is not a webhook.
	ErrMalformed = errors.New("receiver: body is not a webhook message")
	// ErrInProgress: the same id is being processed right now; the sender
	// should retry later, when it will be a duplicate or, if that run
	// failed, processed.
	ErrInProgress = errors.New("receiver: message already in progress")
)

// storeError marks a failure of the Store, which the sender should retry.
type storeError struct{ err error }

func (e storeError) Error() string { return "receiver: store: " + e.err.Error() }
func (e storeError) Unwrap() error { return e.err }

// Handler receives webhooks in the one safe order: verify, then
// deduplicate, then process, then record.
//
//   - Verify first, so a forged message never reaches the Store: it can
//     neither be processed nor mark a real id as seen.
//   - Deduplicate before processing, so a replay or a retry of a message
//     already handled answers 2xx without running Process again.
//   - Record only after Process succeeded, so a failed attempt leaves the
//     id unrecorded and the sender's retry is processed.
//
// Handler is an http.Handler; Handle is the same logic for other
// frameworks.
type Handler struct {
	Verifier *Verifier
	Store    Store
	// Process does the work. An error makes the sender retry later.
	Process func(ctx context.Context, m *Message) error
	// MaxBodyBytes bounds the request body; zero means 1 MiB.
	MaxBodyBytes int64
	// Log receives failures worth an operator's eye; nil means
	// slog.Default().
	Log *slog.Logger

	inflight sync.Map // ids being processed in this process
}

// Handle runs one message through verify, deduplicate, process, record.
func (h *Handler) Handle(ctx context.Context, header http.Header, body []byte) (Outcome, error) {
	id, ts, err := h.Verifier.Verify(header, body)
	if err != nil {
		return 0, err
	}
	m, err := parse(id, ts, body)
	if err != nil {
		return 0, err
	}
	// Two copies of one id in flight at once (a retry overtaking a slow
	// first attempt) would both pass Seen; let only one run.
	if _, busy := h.inflight.LoadOrStore(id, struct{}{}); busy {
		return 0, ErrInProgress
	}
	defer h.inflight.Delete(id)

	seen, err := h.Store.Seen(ctx, id)
	if err != nil {
		return 0, storeError{err}
	}
	if seen {
		return Duplicate, nil
	}
	if err := h.Process(ctx, m); err != nil {
		return 0, err
	}
	if err := h.Store.Record(ctx, id); err != nil {
		// The work is done; answering an error would only make the sender
		// deliver again and the work run twice.
		h.log().WarnContext(ctx, "webhook processed but not recorded; a replay would be processed again",
			"webhook_id", id, "err", err)
	}
	return Processed, nil
}

func parse(id string, ts time.Time, body []byte) (*Message, error) {
	var b struct {
		Type      string          `json:"type"`
		Timestamp string          `json:"timestamp"`
		Data      json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &b); err != nil || b.Type == "" {
		return nil, ErrMalformed
	}
	m := &Message{ID: id, Timestamp: ts, Type: b.Type, Data: b.Data, Body: body}
	if b.Timestamp != "" {
		t, err := time.Parse(time.RFC3339Nano, b.Timestamp)
		if err != nil {
			return nil, fmt.Errorf("%w: timestamp %q", ErrMalformed, b.Timestamp)
		}
		m.EventTime = t
	}
	return m, nil
}

// ServeHTTP answers 204 for a processed or duplicate message; 401 when
// verification fails; 400 for a verified but malformed body; 409 while the
// same id is in progress; 413 for an oversized body; 503 when the Store
// fails; 500 when Process fails. Every non-2xx makes ferry retry.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	limit := h.MaxBodyBytes
	if limit <= 0 {
		limit = 1 << 20
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "cannot read body", http.StatusBadRequest)
		return
	}
	_, err = h.Handle(r.Context(), r.Header, body)
	var se storeError
	switch {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, ErrMissingHeaders), errors.Is(err, ErrTimestamp), errors.Is(err, ErrSignature):
		http.Error(w, "webhook verification failed", http.StatusUnauthorized)
	case errors.Is(err, ErrMalformed):
		http.Error(w, "malformed webhook body", http.StatusBadRequest)
	case errors.Is(err, ErrInProgress):
		w.Header().Set("Retry-After", "5")
		http.Error(w, "already in progress", http.StatusConflict)
	case errors.As(err, &se):
		h.log().ErrorContext(r.Context(), "webhook store failed", "err", err)
		http.Error(w, "temporarily unavailable", http.StatusServiceUnavailable)
	default:
		h.log().ErrorContext(r.Context(), "webhook handler failed", "webhook_id", r.Header.Get(HeaderID), "err", err)
		http.Error(w, "processing failed", http.StatusInternalServerError)
	}
}

func (h *Handler) log() *slog.Logger {
	if h.Log != nil {
		return h.Log
	}
	return slog.Default()
}
