package receiver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
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
	// ErrInProgress: the same id is being processed right now, here or
	// on another replica sharing the Store; the sender should retry
	// later, when it will be a duplicate or, if that run failed,
	// processed.
	ErrInProgress = errors.New("receiver: message already in progress")
)

// Defaults for Handler.
const (
	// DefaultProcessTimeout bounds one Process call unless
	// Handler.ProcessTimeout says otherwise.
	DefaultProcessTimeout = time.Minute
	// StoreTimeout bounds each Store call Handler makes.
	StoreTimeout = 10 * time.Second
	// leaseMargin is how much longer a claim lives than Process may run:
	// room for Done to land before anyone could take the claim over.
	leaseMargin = StoreTimeout + 20*time.Second
)

// storeError marks a failure of the Store, which the sender should retry.
type storeError struct{ err error }

func (e storeError) Error() string { return "receiver: store: " + e.err.Error() }
func (e storeError) Unwrap() error { return e.err }

// Handler receives webhooks in the one safe order: verify, then claim the
// id, then process, then mark it done.
//
//   - Verify first, so a forged message never reaches the Store: it can
//     neither be processed nor mark a real id as seen.
//   - Claim before processing, so a replay, a retry of a message already
//     handled, or a copy arriving at another replica at the same moment
//     answers without running Process again.
//   - Mark done only after Process succeeded; a failure releases the
//     claim, so the sender's retry is processed.
//
// Once a message verified, Handler finishes it even if the sender stops
// waiting: ferry gives up on an attempt after 10 s, and work that the
// hang-up cut short (or did not record) would run again on the retry.
// Process gets a context that a client hang-up does not cancel, bounded by
// ProcessTimeout, and the Store calls get their own timeouts.
//
// Handler is an http.Handler; Handle is the same logic for other
// frameworks.
type Handler struct {
	Verifier *Verifier
	Store    Store
	// Process does the work. An error makes the sender retry later. It
	// must return when its context ends: the claim on the message
	// lapses soon after, and another copy may then be processed.
	Process func(ctx context.Context, m *Message) error
	// ProcessTimeout bounds one Process call; zero means
	// DefaultProcessTimeout. A claim lasts this long plus 30 s.
	ProcessTimeout time.Duration
	// MaxBodyBytes bounds the request body; zero means 1 MiB.
	MaxBodyBytes int64
	// Log receives failures worth an operator's eye; nil means
	// slog.Default().
	Log *slog.Logger
}

// Handle runs one message through verify, claim, process, done.
func (h *Handler) Handle(ctx context.Context, header http.Header, body []byte) (Outcome, error) {
	id, ts, err := h.Verifier.Verify(header, body)
	if err != nil {
		return 0, err
	}
	m, err := parse(id, ts, body)
	if err != nil {
		return 0, err
	}
	if len(id) > MaxIDBytes {
		return 0, ErrIDTooLong
	}
	// From here on nothing depends on the sender still waiting.
	bg := context.WithoutCancel(ctx)
	limit := h.ProcessTimeout
	if limit <= 0 {
		limit = DefaultProcessTimeout
	}
	sctx, cancel := context.WithTimeout(bg, StoreTimeout)
	token, err := h.Store.Claim(sctx, id, limit+leaseMargin)
	cancel()
	switch {
	case errors.Is(err, ErrProcessed):
		return Duplicate, nil
	case errors.Is(err, ErrInProgress):
		return 0, ErrInProgress
	case err != nil:
		return 0, storeError{err}
	}
	if err := h.process(bg, limit, m, token); err != nil {
		return 0, err
	}
	sctx, cancel = context.WithTimeout(bg, StoreTimeout)
	defer cancel()
	if err := h.Store.Done(sctx, id, token); err != nil {
		// The work is done; answering an error would only make the sender
		// deliver again and the work run twice. Until the claim lapses,
		// copies are still refused.
		h.log().WarnContext(ctx, "webhook processed but not marked done; a copy arriving after the claim lapses would be processed again",
			"webhook_id", id, "err", err)
	}
	return Processed, nil
}

// process runs Process under its time limit and releases the claim when
// it fails or panics, so that the next copy is processed at once.
func (h *Handler) process(bg context.Context, limit time.Duration, m *Message, token string) (err error) {
	release := func() {
		ctx, cancel := context.WithTimeout(bg, StoreTimeout)
		defer cancel()
		if rerr := h.Store.Release(ctx, m.ID, token); rerr != nil {
			h.log().WarnContext(ctx, "webhook claim not released; the next copy waits until it lapses",
				"webhook_id", m.ID, "err", rerr)
		}
	}
	defer func() {
		if r := recover(); r != nil {
			release()
			panic(r)
		}
	}()
	pctx, cancel := context.WithTimeout(bg, limit)
	defer cancel()
	if err = h.Process(pctx, m); err != nil {
		release()
	}
	return err
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
// verification fails; 400 for a verified but malformed body or an id over
// MaxIDBytes; 409 while the same id is in progress; 413 for an oversized
// body; 503 when the Store fails; 500 when Process fails. Every non-2xx
// makes ferry retry.
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
	case errors.Is(err, ErrIDTooLong):
		http.Error(w, "webhook-id too long", http.StatusBadRequest)
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
