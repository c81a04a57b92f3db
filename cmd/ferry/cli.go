package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/ferry-io/ferry/client"
)

// Exit codes of the client subcommands (upload, download, export). Scripts
// may rely on them; they are listed in docs/cli.md.
const (
	exitAuth        = 3   // ferry refused the credentials or the link (401, 403)
	exitNotFound    = 4   // the resource does not exist or is gone (404, 410)
	exitRejected    = 5   // ferry refused the request or the upload/export failed (other 4xx, failed state)
	exitUnavailable = 6   // network or server trouble outlasted the retries
	exitInterrupted = 130 // Ctrl-C; rerun the same command to resume
)

// clientFlags are shared by the client subcommands.
type clientFlags struct {
	server string
	token  string
	json   bool
	quiet  bool
	idle   time.Duration
}

func (f *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.server, "server", os.Getenv("FERRY_URL"), "ferry's `URL`")
	fs.StringVar(&f.token, "token", os.Getenv("FERRY_TOKEN"), "the API `TOKEN` to send")
	// Help names the variables, never their values: a token is a secret.
	fs.Lookup("server").DefValue = "$FERRY_URL"
	fs.Lookup("token").DefValue = "$FERRY_TOKEN"
	fs.BoolVar(&f.json, "json", false, "print JSON lines (progress and result) for machines")
	fs.BoolVar(&f.quiet, "quiet", false, "print only the result")
	fs.DurationVar(&f.idle, "idle-timeout", client.DefaultIdleTimeout, "give a part PUT or a download `DURATION` to move a byte before retrying it on a new connection (0: wait for ever)")
}

func (f *clientFlags) client() (*client.Client, error) {
	if f.server == "" {
		return nil, usageError{errors.New("no server: pass --server or set FERRY_URL")}
	}
	return f.clientFor(f.server), nil
}

// clientFor is a client for the ferry server at base with these flags.
func (f *clientFlags) clientFor(base string) *client.Client {
	return client.New(base, f.token, client.WithIdleTimeout(f.idle))
}

// clientExit maps a client error to an exit code.
func clientExit(err error) int {
	var fe *client.Error
	var ee *client.ExportError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, context.Canceled):
		return exitInterrupted
	case errors.As(err, &ee) && ee.Gone():
		// A revoked or expired export is gone, as its 410 link says; the
		// exit code must not claim it failed verification.
		return exitNotFound
	case errors.As(err, &fe):
		switch {
		case fe.Status == http.StatusUnauthorized || fe.Status == http.StatusForbidden:
			return exitAuth
		case fe.Status == http.StatusNotFound || fe.Status == http.StatusGone:
			return exitNotFound
		case fe.Status < 500:
			return exitRejected
		}
		return exitUnavailable
	case errors.Is(err, client.ErrUploadFailed), errors.Is(err, client.ErrExportFailed), errors.Is(err, client.ErrChecksum):
		return exitRejected
	default:
		var ue usageError
		var pe *fs.PathError
		switch {
		case errors.As(err, &ue):
			return exitUsage
		case errors.As(err, &pe):
			return exitFailure // a local file problem
		}
		return exitUnavailable
	}
}

// interruptible returns a context cancelled by the first SIGINT/SIGTERM.
// Work stops at the next safe point; everything already sent stays, so the
// same command resumes. A second signal exits at once.
func interruptible() (context.Context, func()) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	return ctx, stop
}

// reporter renders progress: a bar on a terminal, plain lines otherwise,
// JSON lines with --json.
type reporter struct {
	mu    sync.Mutex
	out   io.Writer
	mode  string // "bar", "lines", "json", "quiet"
	label string
	bar   *progressbar.ProgressBar
	phase string
	shown int64 // bytes done in the last plain line printed
	last  time.Time
}

func newReporter(out io.Writer, f clientFlags, label string) *reporter {
	mode := "lines"
	switch {
	case f.json:
		mode = "json"
	case f.quiet:
		mode = "quiet"
	case isTerminal(out):
		mode = "bar"
	}
	return &reporter{out: out, mode: mode, label: label}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func (r *reporter) progress(p client.Progress) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch r.mode {
	case "json":
		if time.Since(r.last) < 500*time.Millisecond && p.Done != p.Total && p.Phase == r.phase {
			return
		}
		r.last, r.phase = time.Now(), p.Phase
		ev := map[string]any{
			"event": "progress", "file": r.label, "phase": p.Phase, "done": p.Done, "total": p.Total,
			"rate": int64(p.Rate), "eta_seconds": p.ETA.Seconds(),
		}
		if p.UploadID != "" {
			ev["upload_id"] = p.UploadID
		}
		json.NewEncoder(r.out).Encode(ev)
	case "lines":
		// A line when a phase starts, every 2 s, and when it completes;
		// never the same state twice.
		same := p.Phase == r.phase && p.Done == r.shown
		if same || (p.Phase == r.phase && time.Since(r.last) < 2*time.Second && p.Done != p.Total) {
			return
		}
		r.last, r.phase, r.shown = time.Now(), p.Phase, p.Done
		fmt.Fprintf(r.out, "%s: %s %s/%s %s/s eta %s\n", r.label, p.Phase, human(p.Done), human(p.Total), human(int64(p.Rate)), p.ETA.Round(time.Second))
	case "bar":
		if r.bar == nil || r.phase != p.Phase {
			if r.bar != nil {
				r.bar.Finish()
				fmt.Fprintln(r.out)
			}
			r.phase = p.Phase
			total := p.Total
			if total <= 0 {
				total = -1 // spinner
			}
			r.bar = progressbar.NewOptions64(total,
				progressbar.OptionSetWriter(r.out),
				progressbar.OptionSetDescription(fmt.Sprintf("%-8s %s", p.Phase, r.label)),
				progressbar.OptionShowBytes(true),
				progressbar.OptionShowCount(),
				progressbar.OptionSetWidth(30),
				progressbar.OptionThrottle(100*time.Millisecond),
				progressbar.OptionSetPredictTime(true),
				progressbar.OptionFullWidth(),
			)
		}
		r.bar.Set64(p.Done)
	}
}

// retry tells of a try that failed and will be made again. The bar or the
// lines stand still meanwhile, and whoever watches them should see why.
// --quiet keeps it to itself: only a final failure is worth its output.
func (r *reporter) retry(e client.Retry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch r.mode {
	case "json":
		json.NewEncoder(r.out).Encode(map[string]any{
			"event": "retry", "file": r.label, "op": e.Op, "attempt": e.Attempt, "attempts": e.Attempts,
			"wait_seconds": e.Wait.Seconds(), "error": e.Err.Error(),
		})
	case "lines", "bar":
		if r.bar != nil {
			r.bar.Clear()
		}
		fmt.Fprintf(r.out, "%s: %s failed (try %d of %d), trying again in %s: %v\n", r.label, e.Op, e.Attempt, e.Attempts, e.Wait, e.Err)
		if r.bar != nil {
			r.bar.RenderBlank()
		}
	}
}

func (r *reporter) done(result map[string]any, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bar != nil {
		r.bar.Finish()
		fmt.Fprintln(r.out)
		r.bar = nil
	}
	if r.mode == "json" {
		result["event"] = "done"
		json.NewEncoder(r.out).Encode(result)
		return
	}
	fmt.Fprintln(r.out, text)
}

func (r *reporter) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bar != nil {
		r.bar.Exit()
		fmt.Fprintln(r.out)
		r.bar = nil
	}
	if r.mode == "json" {
		m := map[string]any{"event": "error", "file": r.label, "error": err.Error(), "exit_code": clientExit(err)}
		var fe *client.Error
		if errors.As(err, &fe) {
			m["code"], m["status"] = fe.Code, fe.Status
		}
		json.NewEncoder(r.out).Encode(m)
	}
}

func human(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// parseInterspersed parses flags that may come before or after the
// positional arguments ("ferry upload a.bin --json b.bin").
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func cmdUpload(args []string, stdout, stderr io.Writer) (int, error) {
	flags := newFlags("upload")
	var cf clientFlags
	cf.register(flags)
	concurrency := flags.Int("concurrency", 4, "`N` parts in flight")
	contentType := flags.String("type", "", "the files' `CONTENT-TYPE` (default: from the extension)")
	ticket := flags.String("ticket", "", "an upload `TICKET` (ftk_…) from your app's backend, instead of --token")
	noInstant := flags.Bool("no-instant", false, "never hash files on this machine, even when ferry may hold the content already: no instant upload")
	meta := metaFlag{}
	flags.Var(meta, "meta", "`KEY=VALUE` metadata for the file (repeatable)")
	files, err := parseInterspersed(flags, args)
	if err != nil {
		return exitUsage, usageError{err}
	}
	if len(files) == 0 {
		//lint:ignore ST1005 a usage line ends with its synopsis
		return exitUsage, usageError{errors.New("usage: ferry upload [--concurrency N] [--type CONTENT-TYPE] [--ticket TICKET] [--meta KEY=VALUE]... [--no-instant] FILE...")}
	}
	if *ticket != "" && len(files) > 1 {
		return exitUsage, usageError{errors.New("a ticket makes one upload: give one FILE with --ticket")}
	}
	c, err := cf.client()
	if err != nil {
		return exitUsage, err
	}
	ctx, stop := interruptible()
	defer stop()
	worst := exitOK
	var firstErr error
	for _, path := range files {
		rep := newReporter(stdout, cf, path)
		res, err := c.UploadFile(ctx, path, client.UploadOptions{Concurrency: *concurrency, ContentType: *contentType,
			Progress: rep.progress, OnRetry: rep.retry, Ticket: *ticket, Metadata: meta, SkipHash: *noInstant})
		if err != nil {
			rep.fail(err)
			if firstErr == nil {
				firstErr = fmt.Errorf("%s: %w", path, err)
			}
			worst = max(worst, clientExit(err))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		how := "uploaded"
		switch {
		case res.Instant:
			how = "already stored (instant upload)"
		case res.Resumed:
			how = fmt.Sprintf("resumed (%d parts sent, %d already there)", res.PartsSent, res.PartsSkipped)
		}
		rep.done(map[string]any{"file": path, "file_id": res.FileID, "upload_id": res.UploadID, "sha256": res.SHA256,
			"size": res.Size, "instant": res.Instant, "resumed": res.Resumed, "parts_sent": res.PartsSent, "parts_skipped": res.PartsSkipped},
			fmt.Sprintf("%s: %s as %s (%s, %s)", path, how, res.FileID, human(res.Size), shaNote(res.SHA256)))
	}
	return worst, firstErr
}

// shaNote names an uploaded file's SHA-256, or says that ferry computes it
// (--no-instant).
func shaNote(sha string) string {
	if sha == "" {
		return "sha256 computed by ferry"
	}
	return "sha256 " + sha
}

// metaFlag collects repeated --meta KEY=VALUE flags.
type metaFlag map[string]string

func (m metaFlag) String() string { return "" }

func (m metaFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", v)
	}
	m[k] = val
	return nil
}

func cmdDownload(args []string, stdout, stderr io.Writer) (int, error) {
	flags := newFlags("download")
	var cf clientFlags
	cf.register(flags)
	out := flags.String("o", "", "the output `FILE` (required)")
	withSHA := flags.Bool("sha256", false, "check the bytes with SHA-256 even when the server sends their CRC32C")
	pos, err := parseInterspersed(flags, args)
	if err != nil {
		return exitUsage, usageError{err}
	}
	if len(pos) != 1 || *out == "" {
		return exitUsage, usageError{errors.New("usage: ferry download [--sha256] URL -o FILE")}
	}
	base := cf.server
	if base == "" && !strings.HasPrefix(pos[0], "/") {
		base = pos[0] // an absolute link needs no --server
	}
	if base == "" {
		return exitUsage, usageError{errors.New("a relative link needs --server or FERRY_URL")}
	}
	c := cf.clientFor(base)
	ctx, stop := interruptible()
	defer stop()
	rep := newReporter(stdout, cf, *out)
	res, err := c.Download(ctx, pos[0], *out, client.DownloadOptions{Progress: rep.progress, OnRetry: rep.retry, SHA256: *withSHA})
	if client.IsCode(err, client.CodeLinkExpired) {
		// A bare link cannot be renewed from here; the partial file stays.
		err = fmt.Errorf("%w; get a fresh link (download_url of GET /exports/{id} or GET /files/{id}) and run the same command with it to resume", err)
	}
	if err != nil {
		rep.fail(err)
		return clientExit(err), err
	}
	how := "downloaded"
	if res.ResumedFrom > 0 {
		how = fmt.Sprintf("resumed at %s", human(res.ResumedFrom))
	}
	rep.done(map[string]any{"file": *out, "size": res.Size, "sha256": res.SHA256, "checked_by": res.CheckedBy, "resumed_from": res.ResumedFrom, "restarted": res.Restarted},
		fmt.Sprintf("%s: %s, %s, sha256 %s, checked by %s", *out, how, human(res.Size), res.SHA256, res.CheckedBy))
	return exitOK, nil
}

func cmdExport(args []string, stdout, stderr io.Writer) (int, error) {
	flags := newFlags("export")
	var cf clientFlags
	cf.register(flags)
	scope := flags.String("scope", "all", `what to export: "all" or "conv:<id>"`)
	out := flags.String("o", "", "the output `FILE` (required)")
	fresh := flags.Bool("new", false, "start a new export even if one for this output exists")
	pos, err := parseInterspersed(flags, args)
	if err != nil {
		return exitUsage, usageError{err}
	}
	if len(pos) != 0 || *out == "" {
		return exitUsage, usageError{errors.New("usage: ferry export --scope all -o FILE")}
	}
	c, err := cf.client()
	if err != nil {
		return exitUsage, err
	}
	ctx, stop := interruptible()
	defer stop()
	rep := newReporter(stdout, cf, *out)
	res, err := c.Export(ctx, *scope, *out, client.ExportOptions{NewIntent: *fresh, Progress: rep.progress, OnRetry: rep.retry})
	var ended *client.ExportError
	if errors.As(err, &ended) {
		// The saved key names this export for good: rerunning the same
		// command finds it again. Only a new key makes a new export.
		err = fmt.Errorf("%w; that will not change, so run the command again with --new to start a new export", err)
	}
	if err != nil {
		rep.fail(err)
		return clientExit(err), err
	}
	rep.done(map[string]any{"file": *out, "job_id": res.JobID, "replayed": res.Replayed, "size": res.Download.Size, "sha256": res.Download.SHA256, "checked_by": res.Download.CheckedBy},
		fmt.Sprintf("%s: export %s, %s, sha256 %s, checked by %s", *out, res.JobID, human(res.Download.Size), res.Download.SHA256, res.Download.CheckedBy))
	return exitOK, nil
}
