package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The cases, by the key results carry.
const (
	caseSDKUpload     = "sdk-upload"
	caseFerryUpload   = "ferry-upload"
	caseTusdUpload    = "tusd-upload"
	caseS3Get         = "s3-get"
	caseFerryDownload = "ferry-download"
)

// caseTitles name the cases in the table and the chart, in their order.
var caseOrder = []string{caseSDKUpload, caseFerryUpload, caseTusdUpload, caseS3Get, caseFerryDownload}

func caseTitle(c string) string {
	switch c {
	case caseSDKUpload:
		return "raw SDK multipart upload (ceiling)"
	case caseFerryUpload:
		return "`ferry upload` (presigned parts)"
	case caseTusdUpload:
		return "tusd v2 + S3 store"
	case caseS3Get:
		return "direct S3 GET (ceiling)"
	case caseFerryDownload:
		return "`ferry download` (proxy)"
	}
	return c
}

// result is one case's measurement.
type result struct {
	Case  string
	Run   int
	Wall  time.Duration
	Bytes int64
	// Server is the API server measured ("" when the client talks to S3
	// alone): its CPU seconds and bytes read over the case.
	Server     string
	ServerCPU  float64
	ServerSys  float64 // the kernel's part of ServerCPU
	ServerRead int64
	// Requests the server counted in its own metrics, and the byte
	// counter it keeps for this path (ferry: bytes its merge read back or
	// its proxy sent; tusd: bytes received).
	Requests    float64
	MetricBytes float64
	MetricName  string
	S3CPU       float64 // the VersityGW process, for context
	ClientCPU   float64
	Load1       float64 // 1-minute load average when the case started
	Phases      []phase
	// MergeSeconds is ferry's own merge job time (its histogram's sum).
	MergeSeconds float64
	// For the direct GET, timed after the measured window: an fsync of
	// the file it wrote and a SHA-256 pass over it, the two things
	// `ferry download` does after its transfer.
	SyncSeconds, HashSeconds float64
}

// phase is a part of a ferry case, split where the CLI's JSON progress
// moves from one phase to the next.
type phase struct {
	Name       string
	Wall       time.Duration
	ServerCPU  float64
	ServerRead int64
}

func (r result) mibps() float64 { return float64(r.Bytes) / mib / r.Wall.Seconds() }

func perGiB(v float64, bytes int64) float64 { return v / (float64(bytes) / gib) }

// window is the measurement around one case: counters are read just
// before and just after, the metrics scrape outside the /proc reads so the
// scrape's own cost is not counted.
type window struct {
	b          *bench
	server     *process
	metricsURL string
	load       float64
	m0         metrics
	srv0, s30  usage
	srv1       usage
	self0      float64
	t0         time.Time
}

// begin flushes dirty pages left by the previous case (VersityGW's
// writes would otherwise be written back during this one), pauses, and
// takes the starting counters.
func (b *bench) begin(ctx context.Context, server *process, metricsURL string) (*window, error) {
	syscall.Sync()
	select {
	case <-time.After(b.o.settle):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	w := &window{b: b, server: server, metricsURL: metricsURL, load: load1()}
	var err error
	if w.m0, err = scrape(ctx, metricsURL); err != nil {
		return nil, err
	}
	if server != nil {
		if w.srv0, err = readUsage(server.pid()); err != nil {
			return nil, err
		}
	}
	if w.s30, err = readUsage(b.vgw.pid()); err != nil {
		return nil, err
	}
	w.self0 = selfCPU()
	w.t0 = time.Now()
	return w, nil
}

// end takes the closing counters and fills in a result for c.
func (w *window) end(ctx context.Context, c string, bytes int64) (result, metrics, error) {
	r := result{Case: c, Wall: time.Since(w.t0), Bytes: bytes, Load1: w.load, ClientCPU: selfCPU() - w.self0}
	s31, err := readUsage(w.b.vgw.pid())
	if err != nil {
		return r, nil, err
	}
	r.S3CPU = s31.CPU - w.s30.CPU
	if w.server != nil {
		if w.srv1, err = readUsage(w.server.pid()); err != nil {
			return r, nil, err
		}
		d := w.srv1.sub(w.srv0)
		r.Server, r.ServerCPU, r.ServerSys, r.ServerRead = w.server.name, d.CPU, d.Sys, d.RChar
	}
	m1, err := scrape(ctx, w.metricsURL)
	if err != nil {
		return r, nil, err
	}
	return r, m1, nil
}

// sdkUpload is the ceiling: the SDK straight to S3, no API server.
func (b *bench) sdkUpload(ctx context.Context) (result, error) {
	key := "bench/" + randomKey(8)
	w, err := b.begin(ctx, nil, "")
	if err != nil {
		return result{Case: caseSDKUpload}, err
	}
	err = sdkUpload(ctx, b.s3, rawBucket, key, b.file, b.o.partSize, b.o.concurrency)
	r, _, err2 := w.end(ctx, caseSDKUpload, b.o.size)
	if err == nil {
		err = err2
	}
	if err == nil {
		err = b.checkObject(ctx, rawBucket, key)
	}
	return r, err
}

// tusdUpload sends every byte through tusd, which writes it to S3.
func (b *bench) tusdUpload(ctx context.Context) (result, error) {
	w, err := b.begin(ctx, b.tusd, b.tusdURL+"/metrics")
	if err != nil {
		return result{Case: caseTusdUpload}, err
	}
	hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	loc, err := tusUpload(ctx, hc, b.tusdURL+"/files/", b.file, b.o.tusChunk)
	r, m1, err2 := w.end(ctx, caseTusdUpload, b.o.size)
	if err == nil {
		err = err2
	}
	if err != nil {
		return r, err
	}
	r.Requests = m1.delta(w.m0, "tusd_requests_total")
	r.MetricBytes, r.MetricName = m1.delta(w.m0, "tusd_bytes_received"), "tusd_bytes_received"
	key := tusObjectKey(loc)
	if err := b.checkObject(ctx, tusdBucket, key); err != nil {
		return r, err
	}
	deleteObject(ctx, b.s3, tusdBucket, key+".info")
	return r, nil
}

// checkObject makes sure an upload landed whole, then deletes it to keep
// the scratch disk small.
func (b *bench) checkObject(ctx context.Context, bucket, key string) error {
	n, err := objectSize(ctx, b.s3, bucket, key)
	if err != nil {
		return err
	}
	if n != b.o.size {
		return fmt.Errorf("%s/%s holds %d bytes, want %d", bucket, key, n, b.o.size)
	}
	return deleteObject(ctx, b.s3, bucket, key)
}

// cliEvent is one JSON line of `ferry upload|download --json`.
type cliEvent struct {
	Event    string `json:"event"`
	Phase    string `json:"phase"`
	Done     int64  `json:"done"`
	Total    int64  `json:"total"`
	FileID   string `json:"file_id"`
	UploadID string `json:"upload_id"`
	SHA256   string `json:"sha256"`
	Error    string `json:"error"`
}

// runCLI runs the ferry CLI with --json and calls onEvent for every line
// as it arrives, so phase changes are timed when they happen.
func (b *bench) runCLI(ctx context.Context, onEvent func(cliEvent), args ...string) (*os.ProcessState, cliEvent, error) {
	cmd := exec.CommandContext(ctx, b.ferryBin, args...)
	cmd.Env = cleanEnv("FERRY_URL="+b.ferryURL, "FERRY_TOKEN="+b.token)
	cmd.Dir = b.work
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, cliEvent{}, err
	}
	if err := cmd.Start(); err != nil {
		return nil, cliEvent{}, err
	}
	var last cliEvent
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var ev cliEvent
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		onEvent(ev)
		if ev.Event != "progress" {
			last = ev
		}
	}
	io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil {
		return cmd.ProcessState, last, fmt.Errorf("ferry %s: %w: %s %s", args[0], err, last.Error, strings.TrimSpace(stderr.String()))
	}
	if last.Event != "done" {
		return cmd.ProcessState, last, fmt.Errorf("ferry %s: no result line", args[0])
	}
	return cmd.ProcessState, last, nil
}

func cpuOf(ps *os.ProcessState) float64 {
	if ps == nil {
		return 0
	}
	return (ps.UserTime() + ps.SystemTime()).Seconds()
}

// ferryUploadResult is the upload's measurement and what the downloads
// need: the file and the object it lives in.
type ferryUploadResult struct {
	result
	fileID, uploadID string
}

// ferryUpload runs `ferry upload` against ferry serve. The server's
// counters are also read when the client enters its "verify" phase (it
// has called complete and waits for the merge): before is the control
// plane, after is the merge's read-back verification.
func (b *bench) ferryUpload(ctx context.Context) (ferryUploadResult, error) {
	out := ferryUploadResult{result: result{Case: caseFerryUpload}}
	w, err := b.begin(ctx, b.ferry, b.ferryURL+"/metrics")
	if err != nil {
		return out, err
	}
	marks := map[string]time.Time{}
	var mid usage
	var midErr error
	ps, done, err := b.runCLI(ctx, func(ev cliEvent) {
		if ev.Event != "progress" {
			return
		}
		if _, seen := marks[ev.Phase]; !seen {
			marks[ev.Phase] = time.Now()
			if ev.Phase == "verify" {
				mid, midErr = readUsage(b.ferry.pid())
			}
		}
	}, "upload", "--json", "--concurrency", strconv.Itoa(b.o.concurrency), b.file)
	end := time.Now()
	r, m1, err2 := w.end(ctx, caseFerryUpload, b.o.size)
	out.result = r
	for _, e := range []error{err, err2, midErr} {
		if e != nil {
			return out, e
		}
	}
	if done.SHA256 != b.sum {
		return out, fmt.Errorf("ferry reports sha256 %s, the file has %s", done.SHA256, b.sum)
	}
	if marks["upload"].IsZero() || marks["verify"].IsZero() {
		return out, fmt.Errorf("ferry upload did not go through the upload and verify phases (instant upload?)")
	}
	out.fileID, out.uploadID = done.FileID, done.UploadID
	out.ClientCPU = cpuOf(ps)
	out.Requests = m1.delta(w.m0, "ferry_http_requests_total")
	out.MetricBytes, out.MetricName = m1.delta(w.m0, "ferry_upload_verify_bytes_total"), "ferry_upload_verify_bytes_total"
	out.MergeSeconds = m1.delta(w.m0, "ferry_upload_merge_duration_seconds_sum")
	control, verify := mid.sub(w.srv0), w.srv1.sub(mid)
	out.Phases = []phase{
		{Name: "hash", Wall: marks["upload"].Sub(w.t0)},
		{Name: "upload", Wall: marks["verify"].Sub(marks["upload"]), ServerCPU: control.CPU, ServerRead: control.RChar},
		{Name: "verify", Wall: end.Sub(marks["verify"]), ServerCPU: verify.CPU, ServerRead: verify.RChar},
	}
	return out, nil
}

// ferryDownload runs `ferry download` of the uploaded file through
// ferry's proxy. The transfer ends at the progress line with every byte
// done; the rest is the client's SHA-256 check of the file.
func (b *bench) ferryDownload(ctx context.Context, fileID string) (result, error) {
	var f struct {
		DownloadURL string `json:"download_url"`
	}
	if err := b.api(ctx, http.MethodGet, "/files/"+fileID, &f); err != nil {
		return result{Case: caseFerryDownload}, err
	}
	path := filepath.Join(b.work, "ferry-download.bin")
	defer os.Remove(path)
	w, err := b.begin(ctx, b.ferry, b.ferryURL+"/metrics")
	if err != nil {
		return result{Case: caseFerryDownload}, err
	}
	var transferred time.Time
	var transferCPU usage
	ps, done, err := b.runCLI(ctx, func(ev cliEvent) {
		if ev.Event == "progress" && ev.Total > 0 && ev.Done == ev.Total && transferred.IsZero() {
			transferred = time.Now()
			transferCPU, _ = readUsage(b.ferry.pid())
		}
	}, "download", "--json", b.ferryURL+f.DownloadURL, "-o", path)
	end := time.Now()
	r, m1, err2 := w.end(ctx, caseFerryDownload, b.o.size)
	if err == nil {
		err = err2
	}
	if err != nil {
		return r, err
	}
	if done.SHA256 != b.sum {
		return r, fmt.Errorf("ferry download verified sha256 %s, the file has %s", done.SHA256, b.sum)
	}
	r.ClientCPU = cpuOf(ps)
	r.Requests = m1.delta(w.m0, "ferry_http_requests_total")
	r.MetricBytes, r.MetricName = m1.delta(w.m0, "ferry_download_bytes_total"), "ferry_download_bytes_total"
	if !transferred.IsZero() {
		tr := transferCPU.sub(w.srv0)
		rest := w.srv1.sub(transferCPU)
		r.Phases = []phase{
			{Name: "transfer", Wall: transferred.Sub(w.t0), ServerCPU: tr.CPU, ServerRead: tr.RChar},
			{Name: "verify", Wall: end.Sub(transferred), ServerCPU: rest.CPU, ServerRead: rest.RChar},
		}
	}
	return r, nil
}

// s3Get is the download ceiling: one GetObject of the object ferry stored,
// straight from S3.
func (b *bench) s3Get(ctx context.Context, uploadID string) (result, error) {
	key := "uploads/" + uploadID
	path := filepath.Join(b.work, "s3-get.bin")
	defer os.Remove(path)
	if _, err := objectSize(ctx, b.s3, ferryBucket, key); err != nil {
		return result{Case: caseS3Get}, err
	}
	w, err := b.begin(ctx, nil, "")
	if err != nil {
		return result{Case: caseS3Get}, err
	}
	n, err := s3Get(ctx, b.s3, ferryBucket, key, path)
	r, _, err2 := w.end(ctx, caseS3Get, b.o.size)
	if err == nil {
		err = err2
	}
	if err != nil {
		return r, err
	}
	if n != b.o.size {
		return r, fmt.Errorf("GET returned %d bytes, want %d", n, b.o.size)
	}
	t := time.Now()
	if err := syncFile(path); err != nil {
		return r, err
	}
	r.SyncSeconds = time.Since(t).Seconds()
	t = time.Now()
	sum, err := fileSHA256(path)
	if err != nil {
		return r, err
	}
	r.HashSeconds = time.Since(t).Seconds()
	if sum != b.sum {
		return r, fmt.Errorf("GET returned sha256 %s, want %s", sum, b.sum)
	}
	return r, nil
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
