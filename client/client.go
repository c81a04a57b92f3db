package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Client talks to one ferry server. It is safe for concurrent use.
type Client struct {
	base  string
	token string
	api   *http.Client // ferry's API
	data  *http.Client // S3 part PUTs and downloads: no overall timeout
	idle  time.Duration
	sleep func(ctx context.Context, d time.Duration) error
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the client for ferry's API calls.
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.api = h } }

// WithDataClient sets the client for part uploads and downloads, in place
// of one whose connections are bounded by the idle timeout.
func WithDataClient(h *http.Client) Option { return func(c *Client) { c.data = h } }

// WithIdleTimeout sets how long a part PUT or a download may move no byte
// (nor wait for an answer) before its connection is given up and the
// transfer retried on a new one; 0 waits for ever. The default is
// DefaultIdleTimeout. It has no effect with WithDataClient.
func WithIdleTimeout(d time.Duration) Option { return func(c *Client) { c.idle = d } }

// New returns a client for the ferry server at baseURL (such as
// https://files.example.com) authenticating with token.
func New(baseURL, token string, opts ...Option) *Client {
	c := &Client{
		base:  strings.TrimRight(baseURL, "/"),
		token: token,
		api:   &http.Client{Timeout: 60 * time.Second},
		idle:  DefaultIdleTimeout,
		sleep: sleepCtx,
	}
	for _, o := range opts {
		o(c)
	}
	if c.data == nil {
		c.data = &http.Client{Transport: dataTransport(c.idle)}
	}
	return c
}

// withToken is c authenticating with token instead (an upload ticket).
func (c *Client) withToken(token string) *Client {
	d := *c
	d.token = token
	return &d
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Error is an error answer from ferry (RFC 9457 problem+json).
type Error struct {
	Status    int
	Code      string
	Title     string
	Detail    string
	RequestID string
	// Fields holds the problem's extension members, such as missing_parts.
	Fields map[string]json.RawMessage
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("ferry: %d %s", e.Status, e.Code)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if e.RequestID != "" {
		msg += " (request " + e.RequestID + ")"
	}
	return msg
}

// IsCode reports whether err is a ferry *Error with the given code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// IsStatus reports whether err is a ferry *Error with the given status.
func IsStatus(err error, status int) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == status
}

func decodeError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	e := &Error{Status: resp.StatusCode, Code: http.StatusText(resp.StatusCode)}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "application/problem+json" || mt == "application/json" {
		var fields map[string]json.RawMessage
		if json.Unmarshal(body, &fields) == nil {
			str := func(k string) string {
				var s string
				json.Unmarshal(fields[k], &s)
				delete(fields, k)
				return s
			}
			if code := str("code"); code != "" {
				e.Code = code
			}
			e.Title, e.Detail, e.RequestID = str("title"), str("detail"), str("request_id")
			for _, k := range []string{"type", "status", "instance"} {
				delete(fields, k)
			}
			e.Fields = fields
		}
	} else if len(body) > 0 {
		e.Detail = strings.TrimSpace(string(body[:min(len(body), 200)]))
	}
	return e
}

// call sends a JSON request to ferry and decodes a JSON answer into out
// (when out is not nil). It returns the status for callers that branch on
// 200 versus 201 or 202.
func (c *Client) call(ctx context.Context, method, path string, in, out any, header ...string) (int, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return 0, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.api.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return resp.StatusCode, decodeError(resp)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return resp.StatusCode, fmt.Errorf("ferry: decode %s %s: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// retryable reports whether an API call failing with err may succeed if
// repeated: network errors and 5xx/429 answers.
func retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Status >= 500 || e.Status == http.StatusTooManyRequests
	}
	return true
}

// Backoff is the retry schedule: 1 s, 2 s, 4 s … capped at 10 s.
func Backoff(attempt int) time.Duration {
	d := time.Second
	for i := 1; i < attempt && d < 10*time.Second; i++ {
		d *= 2
	}
	return min(d, 10*time.Second)
}

// Retry describes a try that failed and will be made again after Wait.
type Retry struct {
	// Op is what failed: "part 3" (its PUT to S3), "download", or a call
	// to ferry's API such as "POST /uploads/{id}/complete".
	Op       string
	Attempt  int // the try that failed, from 1
	Attempts int // the tries allowed
	Wait     time.Duration
	Err      error
}

// RetryFunc hears of each try that failed and will be made again, before
// the pause ahead of it. Parts go in parallel, so calls may come from
// several goroutines at once; keep it quick. Without one, retries are
// silent and only a final failure is reported.
type RetryFunc func(Retry)

// tries is how often an operation tries each step, and whom it tells when
// one is made again.
type tries struct {
	attempts int
	notify   RetryFunc
}

// failed reports try attempt of op, which failed with err, when another
// will follow, and returns the pause before it.
func (t tries) failed(op string, attempt int, err error) time.Duration {
	wait := Backoff(attempt)
	if t.notify != nil && attempt < t.attempts {
		t.notify(Retry{Op: op, Attempt: attempt, Attempts: t.attempts, Wait: wait, Err: err})
	}
	return wait
}

// withRetry runs fn until it succeeds, fails for good, or t's attempts
// run out; op names fn in retry notices.
func (c *Client) withRetry(ctx context.Context, t tries, op string, fn func() error) error {
	var err error
	for a := 1; a <= t.attempts; a++ {
		if err = fn(); !retryable(err) {
			return err
		}
		if a < t.attempts {
			if serr := c.sleep(ctx, t.failed(op, a, err)); serr != nil {
				return serr
			}
		}
	}
	return err
}

// Progress is a snapshot of a long operation.
type Progress struct {
	Phase string // "hash", "upload", "verify", "download", "export"
	// Done is the bytes done in this phase. In "upload" it counts the
	// parts S3 holds and what has gone out of the parts on their way, so
	// it can step back when a part fails and is sent again.
	Done  int64
	Total int64 // bytes in this phase; 0 when unknown
	Rate  float64
	ETA   time.Duration // 0 when unknown
	// UploadID names the upload in the "hash", "upload" and "verify"
	// phases, so that a caller can follow or abort it while it runs.
	UploadID string
}

// ProgressFunc receives progress. Calls come from one goroutine at a time
// but not always the same one; keep it quick.
type ProgressFunc func(Progress)

// meter turns byte counts into throttled Progress callbacks with a rate
// averaged over a sliding window.
type meter struct {
	mu    sync.Mutex
	fn    ProgressFunc
	phase string
	total int64
	done  int64
	// moving is what has gone out of the bodies still being sent (the
	// "upload" phase's parts in flight): shown as done, so that a bar
	// moves while a part is on its way, and taken back if the part fails.
	moving int64
	start  time.Time
	last   time.Time
	window []sample
}

type sample struct {
	at   time.Time
	done int64
}

func newMeter(fn ProgressFunc, phase string, total, done int64) *meter {
	now := time.Now()
	m := &meter{fn: fn, phase: phase, total: total, done: done, start: now, window: []sample{{now, done}}}
	m.emit(now)
	return m
}

// add counts n more bytes done.
func (m *meter) add(n int64) { m.sent(0, n) }

// sending counts n more bytes of a body on its way.
func (m *meter) sending(n int64) {
	if m == nil || m.fn == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.moving += n
	if now := time.Now(); now.Sub(m.last) >= 100*time.Millisecond {
		m.emit(now)
	}
}

// sent ends a body's counting, in one step so that no report sees it
// half done: the moved bytes it counted no longer show, and held bytes
// (the part's length when S3 took it, none when the PUT failed) count as
// done.
func (m *meter) sent(moved, held int64) {
	if m == nil || m.fn == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.moving -= moved
	m.done += held
	now := time.Now()
	if now.Sub(m.last) >= 100*time.Millisecond || m.done == m.total {
		m.emit(now)
	}
}

func (m *meter) finish() {
	if m == nil || m.fn == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.emit(time.Now())
}

// emit must be called with mu held.
func (m *meter) emit(now time.Time) {
	if m.fn == nil {
		return
	}
	done := m.done + m.moving
	m.window = append(m.window, sample{now, done})
	for len(m.window) > 2 && now.Sub(m.window[0].at) > 5*time.Second {
		m.window = m.window[1:]
	}
	p := Progress{Phase: m.phase, Done: done, Total: m.total}
	if first := m.window[0]; now.Sub(first.at) > 0 {
		p.Rate = max(0, float64(done-first.done)/now.Sub(first.at).Seconds())
	}
	if p.Rate > 0 && m.total > 0 && done < m.total {
		p.ETA = time.Duration(float64(m.total-done) / p.Rate * float64(time.Second))
	}
	m.last = now
	m.fn(p)
}

// counter receives byte counts.
type counter interface{ add(n int64) }

// countingReader reports bytes read to a counter.
type countingReader struct {
	r io.Reader
	c counter
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.c.add(int64(n))
	return n, err
}
