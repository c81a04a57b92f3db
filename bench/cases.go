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
	caseSDKUploadMD5  = "sdk-upload-md5"
	caseFerryUpload   = "ferry-upload"
	caseTusdUpload    = "tusd-upload"
	caseS3Get         = "s3-get"
	caseFerryDownload = "ferry-download"
)

// caseTitles name the cases in the table and the chart, in their order.
var caseOrder = []string{caseSDKUpload, caseSDKUploadMD5, caseFerryUpload, caseTusdUpload, caseS3Get, caseFerryDownload}

func caseTitle(c string) string {
	switch c {
	case caseSDKUpload:
		return "raw SDK multipart upload (ceiling)"
	case caseSDKUploadMD5:
		return "raw SDK + Content-MD5 per part"
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
	// MergeSeconds is ferry's own merge job time (its histogram's sum);
	// VerifySeconds the read-back part of it, from the verification's
	// throughput histogram (one upload: its sum is that upload's rate).
	MergeSeconds, VerifySeconds float64
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
	ClientCPU  float64 // the CLI process
	S3CPU      float64
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
	srv1, s31  usage
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
	var err error
	if w.s31, err = readUsage(w.b.vgw.pid()); err != nil {
		return r, nil, err
	}
	r.S3CPU = w.s31.CPU - w.s30.CPU
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

// sdkUpload is the ceiling: the SDK straight to S3, no API server. With
// contentMD5 each part also carries the Content-MD5 header that ferry's
// part URLs require: the cost of that integrity pin alone, without ferry.
func (b *bench) sdkUpload(ctx context.Context, contentMD5 bool) (result, error) {
	c := caseSDKUpload
	if contentMD5 {
		c = caseSDKUploadMD5
	}
	key := "bench/" + randomKey(8)
	w, err := b.begin(ctx, nil, "")
	if err != nil {
		return result{Case: c}, err
	}
	err = sdkUpload(ctx, b.s3, rawBucket, key, b.file, b.o.partSize, b.o.concurrency, contentMD5)
	r, _, err2 := w.end(ctx, c, b.o.size)
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

// runCLI runs the ferry CLI with --json and calls onEvent with every line
// as it arrives, and the CLI's pid, so phase changes are timed and
// measured when they happen.
func (b *bench) runCLI(ctx context.Context, onEvent func(ev cliEvent, pid int), args ...string) (*os.ProcessState, cliEvent, error) {
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
		onEvent(ev, cmd.Process.Pid)
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

// mark is the counters of the three processes at a phase boundary.
type mark struct {
	at                 time.Time
	server, s3, client usage
}

// markNow reads the counters at a phase boundary; the CLI's pid is the
// one the event came from.
func (w *window) markNow(cliPID int) (mark, error) {
	m := mark{at: time.Now()}
	var err error
	if m.server, err = readUsage(w.server.pid()); err != nil {
		return m, err
	}
	if m.s3, err = readUsage(w.b.vgw.pid()); err != nil {
		return m, err
	}
	m.client, err = readUsage(cliPID)
	return m, err
}

// phasesBetween turns consecutive marks into phases. The first mark is
// the window's start (the CLI not yet running), the last its end, with
// the CLI's final CPU from its exit status.
func phasesBetween(names []string, marks []mark) []phase {
	var out []phase
	for i, name := range names {
		a, b := marks[i], marks[i+1]
		out = append(out, phase{
			Name: name, Wall: b.at.Sub(a.at),
			ServerCPU: b.server.CPU - a.server.CPU, ServerRead: b.server.RChar - a.server.RChar,
			S3CPU: b.s3.CPU - a.s3.CPU, ClientCPU: b.client.CPU - a.client.CPU,
		})
	}
	return out
}

func (w *window) startMark() mark { return mark{at: w.t0, server: w.srv0, s3: w.s30} }

func (w *window) endMark(at time.Time, cli *os.ProcessState) mark {
	return mark{at: at, server: w.srv1, s3: w.s31, client: usage{CPU: cpuOf(cli)}}
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
	// The CLI announces "hash", then "upload" after POST /uploads, then
	// "verify" once complete has been accepted.
	marks := map[string]mark{}
	var markErr error
	ps, done, err := b.runCLI(ctx, func(ev cliEvent, pid int) {
		if _, seen := marks[ev.Phase]; ev.Event == "progress" && !seen {
			m, err := w.markNow(pid)
			if markErr == nil {
				markErr = err
			}
			marks[ev.Phase] = m
		}
	}, "upload", "--json", "--concurrency", strconv.Itoa(b.o.concurrency), b.file)
	end := time.Now()
	r, m1, err2 := w.end(ctx, caseFerryUpload, b.o.size)
	out.result = r
	for _, e := range []error{err, err2, markErr} {
		if e != nil {
			return out, e
		}
	}
	if done.SHA256 != b.sum {
		return out, fmt.Errorf("ferry reports sha256 %s, the file has %s", done.SHA256, b.sum)
	}
	up, okUp := marks["upload"]
	verify, okVerify := marks["verify"]
	if !okUp || !okVerify {
		return out, fmt.Errorf("ferry upload did not go through the upload and verify phases (instant upload?)")
	}
	out.fileID, out.uploadID = done.FileID, done.UploadID
	out.ClientCPU = cpuOf(ps)
	out.Requests = m1.delta(w.m0, "ferry_http_requests_total")
	out.MetricBytes, out.MetricName = m1.delta(w.m0, "ferry_upload_verify_bytes_total"), "ferry_upload_verify_bytes_total"
	out.MergeSeconds = m1.delta(w.m0, "ferry_upload_merge_duration_seconds_sum")
	if rate := m1.delta(w.m0, "ferry_upload_verify_throughput_bytes_per_second_sum"); rate > 0 &&
		m1.delta(w.m0, "ferry_upload_verify_throughput_bytes_per_second_count") == 1 {
		out.VerifySeconds = out.MetricBytes / rate
	}
	out.Phases = phasesBetween([]string{"hash", "upload", "verify"}, []mark{w.startMark(), up, verify, w.endMark(end, ps)})
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
	var transferred mark
	var markErr error
	ps, done, err := b.runCLI(ctx, func(ev cliEvent, pid int) {
		if ev.Event == "progress" && ev.Total > 0 && ev.Done == ev.Total && transferred.at.IsZero() {
			transferred, markErr = w.markNow(pid)
		}
	}, "download", "--json", b.ferryURL+f.DownloadURL, "-o", path)
	end := time.Now()
	r, m1, err2 := w.end(ctx, caseFerryDownload, b.o.size)
	for _, e := range []error{err, err2, markErr} {
		if e != nil {
			return r, e
		}
	}
	if done.SHA256 != b.sum {
		return r, fmt.Errorf("ferry download verified sha256 %s, the file has %s", done.SHA256, b.sum)
	}
	r.ClientCPU = cpuOf(ps)
	r.Requests = m1.delta(w.m0, "ferry_http_requests_total")
	r.MetricBytes, r.MetricName = m1.delta(w.m0, "ferry_download_bytes_total"), "ferry_download_bytes_total"
	if !transferred.at.IsZero() {
		r.Phases = phasesBetween([]string{"transfer", "verify"}, []mark{w.startMark(), transferred, w.endMark(end, ps)})
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
