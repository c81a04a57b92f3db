package client

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"
)

// ExportOptions tune Export.
type ExportOptions struct {
	// NewIntent forgets a saved idempotency key and starts a new export.
	NewIntent bool
	// Progress receives the "export" and "download" phases.
	Progress ProgressFunc
	// Attempts bounds the tries of each API call and the download's
	// reconnections (default 8).
	Attempts int
	// OnRetry hears of each API call that failed and of each cut
	// download, when they will be tried again.
	OnRetry RetryFunc
}

func (o ExportOptions) tries() tries { return tries{o.Attempts, o.OnRetry} }

// ExportResult describes a finished export.
type ExportResult struct {
	JobID    string
	Replayed bool // ferry answered with the job an earlier call created
	Download *DownloadResult
}

// ErrExportFailed wraps the final state of an export that did not finish.
var ErrExportFailed = errors.New("ferry: export did not complete")

// ExportError is an export that ended without an artifact to download:
// failed, revoked or expired. It is ErrExportFailed. Its job will never
// change again, so only a new export (ExportOptions.NewIntent) helps.
type ExportError struct {
	JobID  string
	State  string // "failed", "revoked" or "expired"
	Reason string // for failed exports, ferry's reason
}

func (e *ExportError) Error() string {
	msg := fmt.Sprintf("ferry: export %s is %s", e.JobID, e.State)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// Gone reports whether the export existed and is gone for good: revoked
// or expired, what a 410 says of a link to it. A failed export is not
// gone; it never produced an artifact.
func (e *ExportError) Gone() bool { return e.State == "revoked" || e.State == "expired" }

// Unwrap makes an ExportError match ErrExportFailed.
func (e *ExportError) Unwrap() error { return ErrExportFailed }

// exportIntent is kept beside the output file: the idempotency key of this
// intent, so rerunning the command after any crash or Ctrl-C returns the
// same export job instead of creating another.
type exportIntent struct {
	Scope string `json:"scope"`
	Key   string `json:"idempotency_key"`
	JobID string `json:"job_id,omitempty"`
}

type exportJSON struct {
	JobID       string `json:"job_id"`
	State       string `json:"state"`
	Replayed    bool   `json:"replayed"`
	DownloadURL string `json:"download_url"`
	SHA256      string `json:"sha256"`
	Bytes       int64  `json:"bytes"`
	Error       string `json:"error"`
}

// ended returns the error for a job in a final state without an artifact,
// or nil.
func (j exportJSON) ended() error {
	switch j.State {
	case "failed", "revoked", "expired":
		return &ExportError{JobID: j.JobID, State: j.State, Reason: j.Error}
	}
	return nil
}

// IntentPath is where Export keeps the idempotency key for an output path.
func IntentPath(out string) string { return out + ".ferry-export.json" }

// Export creates (or resumes) an export of scope ("all" or "conv:<id>"),
// waits for it, and downloads the artifact to out.
func (c *Client) Export(ctx context.Context, scope, out string, opts ExportOptions) (*ExportResult, error) {
	if opts.Attempts <= 0 {
		opts.Attempts = 8
	}
	intentPath := IntentPath(out)
	var in exportIntent
	if b, err := os.ReadFile(intentPath); err == nil && !opts.NewIntent {
		if json.Unmarshal(b, &in) != nil || in.Scope != scope {
			in = exportIntent{}
		}
	}
	if in.Key == "" {
		in = exportIntent{Scope: scope, Key: "ferry-cli-" + randomHex(16)}
		b, _ := json.MarshalIndent(in, "", "  ")
		if err := writeFileAtomic(intentPath, b); err != nil {
			return nil, fmt.Errorf("ferry: save export intent: %w", err)
		}
	}
	var job exportJSON
	err := c.withRetry(ctx, opts.tries(), "POST /exports", func() error {
		_, err := c.call(ctx, http.MethodPost, "/exports", map[string]string{"scope": scope}, &job, "Idempotency-Key", in.Key)
		return err
	})
	if err != nil {
		return nil, err
	}
	if in.JobID != job.JobID {
		in.JobID = job.JobID
		b, _ := json.MarshalIndent(in, "", "  ")
		writeFileAtomic(intentPath, b)
	}
	res := &ExportResult{JobID: job.JobID, Replayed: job.Replayed}

	m := newMeter(opts.Progress, "export", 0, 0)
	delay := 250 * time.Millisecond
	// Poll until done. The create answer carries no link, so even an
	// export that is already done is read once more for a fresh one.
	for first := true; first || job.State != "done"; first = false {
		if err := job.ended(); err != nil {
			return res, err
		}
		if !first {
			if err := c.sleep(ctx, delay); err != nil {
				return res, err
			}
			delay = min(delay*2, 2*time.Second)
		}
		err := c.withRetry(ctx, opts.tries(), "GET /exports/{id}", func() error {
			_, err := c.call(ctx, http.MethodGet, "/exports/"+job.JobID, nil, &job)
			return err
		})
		if err != nil {
			return res, err
		}
	}
	m.finish()
	if job.SHA256 != "" {
		if d, err := fileDigest(out, digestSHA256); err == nil && hex.EncodeToString(d) == job.SHA256 {
			res.Download = &DownloadResult{Path: out, Size: job.Bytes, SHA256: job.SHA256, CheckedBy: digestSHA256}
			return res, nil // already downloaded by an earlier run
		}
	}
	// A long or interrupted download outlives its link; the export hands
	// out a fresh one for as long as it is done.
	refresh := func(ctx context.Context) (string, error) {
		var now exportJSON
		err := c.withRetry(ctx, opts.tries(), "GET /exports/{id}", func() error {
			_, err := c.call(ctx, http.MethodGet, "/exports/"+job.JobID, nil, &now)
			return err
		})
		if err != nil {
			return "", err
		}
		if err := now.ended(); err != nil {
			return "", err
		}
		if now.DownloadURL == "" || now.SHA256 != job.SHA256 {
			return "", fmt.Errorf("ferry: export %s is %s and has no link", now.JobID, now.State)
		}
		return now.DownloadURL, nil
	}
	dl, err := c.Download(ctx, job.DownloadURL, out, DownloadOptions{Progress: opts.Progress, Attempts: opts.Attempts, OnRetry: opts.OnRetry, Refresh: refresh})
	if err != nil {
		return res, err
	}
	res.Download = dl
	return res, nil
}
