package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
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
	caseSDKUpload        = "sdk-upload"
	caseSDKUploadCRC32   = "sdk-upload-crc32c"
	caseSDKUploadMD5     = "sdk-upload-md5"
	caseFerryUpload      = "ferry-upload"
	caseFerryInstant     = "ferry-upload-instant"
	caseTusdUpload       = "tusd-upload"
	caseAWSCLIUpload     = "aws-s3-cp"
	caseS3Get            = "s3-get"
	caseFerryDownload    = "ferry-download"
	caseFerryDownloadSHA = "ferry-download-sha256"
)

// caseOrder lists the cases in the order of the table and the chart.
var caseOrder = []string{caseSDKUpload, caseSDKUploadCRC32, caseSDKUploadMD5, caseFerryUpload, caseFerryInstant, caseTusdUpload, caseAWSCLIUpload, caseS3Get, caseFerryDownload, caseFerryDownloadSHA}

func caseTitle(c string) string {
	switch c {
	case caseSDKUpload:
		return "raw SDK multipart upload (ceiling)"
	case caseSDKUploadCRC32:
		return "raw SDK + CRC32C per part (ceiling with integrity)"
	case caseSDKUploadMD5:
		return "raw SDK + Content-MD5 per part"
	case caseAWSCLIUpload:
		return "`aws s3 cp`"
	case caseFerryUpload:
		return "`ferry upload` (presigned parts)"
	case caseFerryInstant:
		return "`ferry upload` of content ferry holds (hash, then instant)"
	case caseTusdUpload:
		return "tusd v2 + S3 store"
	case caseS3Get:
		return "direct S3 GET (ceiling)"
	case caseFerryDownload:
		return "`ferry download` (proxy)"
	case caseFerryDownloadSHA:
		return "`ferry download --sha256` (proxy, the CLI's own SHA-256)"
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
	// CompleteSeconds is S3's own CompleteMultipartUpload: for the raw
	// SDK uploads timed around the call, for `ferry upload` the call of
	// ferry's merge job, as ferry times it (its
	// ferry_s3_request_duration_seconds, from sending the request to
	// S3's answer).
	CompleteSeconds float64
	// For `ferry upload`: MergeSeconds is ferry's merge job (its
	// histogram's sum: ListParts, CompleteMultipartUpload, the database),
	// VerifySeconds the background verify job that reads the object back
	// through SHA-256 after success. SentToSuccess runs from the moment
	// S3 answered the CLI's last part PUT (its progress counts a part when
	// S3 has it) to the moment it exited after printing its success;
	// ServerSuccess from that same moment to its success line, read as it
	// arrived: ferry answers the CLI's long poll at the moment it records
	// success.
	MergeSeconds, VerifySeconds  float64
	SentToSuccess, ServerSuccess float64
	// ControlCPU is ferry serve's CPU from the start until the upload was
	// success on the server, BackgroundCPU from then until the verify job
	// had recorded the SHA-256 (both seconds, not per GiB).
	ControlCPU, BackgroundCPU float64
	// Checksum is the algorithm ferry's upload carried ("" for
	// Content-MD5 parts without a full-object checksum), or the digest
	// `ferry download` checked its file with (checked_by).
	Checksum string
	// Tool is the peer's own version line, for `aws s3 cp`.
	Tool string
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
	ServerSys  float64 // the kernel's part of ServerCPU
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
// pinCRC32C it does the integrity work ferry's checksummed uploads do
// (the second ceiling), with pinMD5 the Content-MD5 of ferry's older part
// URLs.
func (b *bench) sdkUpload(ctx context.Context, pin integrity) (result, error) {
	c := map[integrity]string{pinNothing: caseSDKUpload, pinMD5: caseSDKUploadMD5, pinCRC32C: caseSDKUploadCRC32}[pin]
	key := "bench/" + randomKey(8)
	w, err := b.begin(ctx, nil, "")
	if err != nil {
		return result{Case: c}, err
	}
	complete, err := sdkUpload(ctx, b.s3, rawBucket, key, b.file, b.o.partSize, b.o.concurrency, pin)
	r, _, err2 := w.end(ctx, c, b.o.size)
	r.CompleteSeconds = complete.Seconds()
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
	// CheckedBy is the digest a download was checked with.
	CheckedBy string `json:"checked_by"`
	// Instant and PartsSent say whether an upload transferred anything.
	Instant   bool  `json:"instant"`
	PartsSent int64 `json:"parts_sent"`
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

// markServer reads the server's and S3's counters alone, for moments
// after the CLI has exited.
func (w *window) markServer(at time.Time) (mark, error) {
	m := mark{at: at}
	var err error
	if m.server, err = readUsage(w.server.pid()); err != nil {
		return m, err
	}
	m.s3, err = readUsage(w.b.vgw.pid())
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
			ServerCPU: b.server.CPU - a.server.CPU, ServerSys: b.server.Sys - a.server.Sys, ServerRead: b.server.RChar - a.server.RChar,
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

// ferryUpload runs `ferry upload` against ferry serve and splits it at
// the moments that matter, whatever phases the CLI names:
//
//   - setup: from the CLI's start to its first "upload" progress line
//     (for a client that hashes first, that pass; then POST /uploads);
//   - transfer: to the progress line with every byte of the upload phase
//     handed to S3 (the last part sent);
//   - finish: to the CLI's success line (the last PUT's answer,
//     complete, the merge job with S3's CompleteMultipartUpload, and the
//     client's wait for the result);
//   - sha256: after success, until the background verify job has read the
//     object back and recorded its SHA-256 (the bench polls the file).
//
// ferry serve's CPU is split between the control plane and the verify
// job at the CLI's success line, read as it arrives: the CLI long-polls
// the upload (GET /uploads/{id}?wait=30s), which ferry answers at the
// moment it records success. The bench asks ferry nothing itself until
// then, so the control plane's figure is the client's requests and the
// merge alone. (It used to long-poll the upload too, from the last part
// sent on; until complete that request answers at once, with S3's
// ListParts, so it went again every 20 ms and its ListParts calls were
// counted as the control plane's.)
func (b *bench) ferryUpload(ctx context.Context) (ferryUploadResult, error) {
	out := ferryUploadResult{result: result{Case: caseFerryUpload}}
	w, err := b.begin(ctx, b.ferry, b.ferryURL+"/metrics")
	if err != nil {
		return out, err
	}
	calls := b.apiCalls.Load()
	var (
		transfer, sent, success mark // the first "upload" progress line; every byte sent; the result line
		markErr                 error
	)
	note := func(m *mark, pid int) {
		var err error
		if *m, err = w.markNow(pid); markErr == nil {
			markErr = err
		}
	}
	ps, done, err := b.runCLI(ctx, func(ev cliEvent, pid int) {
		if ev.Event == "done" && success.at.IsZero() {
			note(&success, pid)
			return
		}
		if ev.Event != "progress" || ev.Phase != "upload" {
			return
		}
		if transfer.at.IsZero() {
			note(&transfer, pid)
		}
		if ev.Total > 0 && ev.Done == ev.Total && sent.at.IsZero() {
			note(&sent, pid)
		}
	}, "upload", "--json", "--concurrency", strconv.Itoa(b.o.concurrency), b.file)
	cliDone := time.Now()
	if err == nil && markErr == nil && (transfer.at.IsZero() || sent.at.IsZero() || success.at.IsZero()) {
		err = errors.New("ferry upload sent no bytes (instant upload?) or printed no result")
	}
	if err == nil {
		err = markErr
	}
	if err != nil {
		w.end(ctx, caseFerryUpload, b.o.size)
		return out, err
	}
	if done.SHA256 != "" && done.SHA256 != b.sum {
		return out, fmt.Errorf("ferry reports sha256 %s, the file has %s", done.SHA256, b.sum)
	}
	verified, err := b.waitVerified(ctx, w, done.FileID)
	if err != nil {
		return out, err
	}
	r, m1, err := w.end(ctx, caseFerryUpload, b.o.size)
	if err != nil {
		return out, err
	}
	// The case ends when the client does, and the server's share when
	// the upload was success; the verify job after it is measured apart
	// (the "sha256" phase).
	r.Wall = cliDone.Sub(w.t0)
	d := success.server.sub(w.srv0)
	r.ServerCPU, r.ServerSys, r.ServerRead = d.CPU, d.Sys, d.RChar
	r.S3CPU = success.s3.CPU - w.s30.CPU
	out.result = r
	out.fileID, out.uploadID = done.FileID, done.UploadID
	out.ClientCPU = cpuOf(ps)
	out.Requests = m1.delta(w.m0, "ferry_http_requests_total") - float64(b.apiCalls.Load()-calls)
	out.MetricBytes, out.MetricName = m1.delta(w.m0, "ferry_upload_verify_bytes_total"), "ferry_upload_verify_bytes_total"
	out.MergeSeconds = m1.delta(w.m0, "ferry_upload_merge_duration_seconds_sum")
	out.CompleteSeconds = m1.delta(w.m0, `ferry_s3_request_duration_seconds_sum{operation="CompleteMultipartUpload",outcome="ok"}`)
	out.VerifySeconds = m1.delta(w.m0, "ferry_upload_verify_duration_seconds_sum")
	{
		// Asked after the measured window.
		var st struct {
			Checksum string `json:"checksum_algorithm"`
		}
		if err := b.api(ctx, http.MethodGet, "/uploads/"+done.UploadID, &st); err != nil {
			return out, err
		}
		out.Checksum = st.Checksum
	}
	out.SentToSuccess = cliDone.Sub(sent.at).Seconds()
	out.ServerSuccess = success.at.Sub(sent.at).Seconds()
	out.ControlCPU, out.BackgroundCPU = d.CPU, verified.server.CPU-success.server.CPU
	verified.client.CPU = cpuOf(ps)
	out.Phases = phasesBetween([]string{"setup", "transfer", "finish", "sha256"},
		[]mark{w.startMark(), transfer, sent, success, verified})
	return out, nil
}

// ferryUploadInstant runs `ferry upload` of the file ferry holds already:
// ferry's answer to its head CRC32C makes the CLI hash the file and
// declare the SHA-256, and the upload must end as an instant file with no
// part sent. The case ends when the CLI exits. It returns the new file.
func (b *bench) ferryUploadInstant(ctx context.Context) (result, string, error) {
	w, err := b.begin(ctx, b.ferry, b.ferryURL+"/metrics")
	if err != nil {
		return result{Case: caseFerryInstant}, "", err
	}
	calls := b.apiCalls.Load()
	ps, done, err := b.runCLI(ctx, func(cliEvent, int) {}, "upload", "--json", "--concurrency", strconv.Itoa(b.o.concurrency), b.file)
	cliDone := time.Now()
	if err == nil && (!done.Instant || done.PartsSent != 0 || done.SHA256 != b.sum) {
		err = fmt.Errorf("ferry upload of held content: instant %v, %d parts sent, sha256 %q; want instant, none sent, %s",
			done.Instant, done.PartsSent, done.SHA256, b.sum)
	}
	var atExit mark
	if err == nil {
		atExit, err = w.markServer(cliDone)
	}
	r, m1, err2 := w.end(ctx, caseFerryInstant, b.o.size)
	if err == nil {
		err = err2
	}
	r.Requests = m1.delta(w.m0, "ferry_http_requests_total") - float64(b.apiCalls.Load()-calls)
	r.Wall = cliDone.Sub(w.t0)
	d := atExit.server.sub(w.srv0)
	r.ServerCPU, r.ServerSys, r.ServerRead = d.CPU, d.Sys, d.RChar
	r.S3CPU = atExit.s3.CPU - w.s30.CPU
	r.ClientCPU = cpuOf(ps)
	return r, done.FileID, err
}

// waitVerified polls the file every 100 ms until ferry has recorded the
// SHA-256 it computed (sha256_verified), and marks the server's counters
// then. The polls are a few cheap GETs next to reading a GiB back.
func (b *bench) waitVerified(ctx context.Context, w *window, fileID string) (mark, error) {
	deadline := time.Now().Add(30 * time.Minute)
	for {
		var f struct {
			SHA256         string `json:"sha256"`
			SHA256Verified *bool  `json:"sha256_verified"`
		}
		if err := b.api(ctx, http.MethodGet, "/files/"+fileID, &f); err != nil {
			return mark{}, err
		}
		// A server without background verification has no such field.
		if f.SHA256Verified == nil || *f.SHA256Verified {
			if f.SHA256 != b.sum {
				return mark{}, fmt.Errorf("ferry verified sha256 %s, the file has %s", f.SHA256, b.sum)
			}
			return w.markServer(time.Now())
		}
		if time.Now().After(deadline) {
			return mark{}, fmt.Errorf("file %s not verified after 30 minutes", fileID)
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return mark{}, ctx.Err()
		}
	}
}

// ferryDownload runs `ferry download` of the uploaded file through
// ferry's proxy; with sha, `ferry download --sha256`, which hashes the
// bytes with SHA-256 instead of checking them by the CRC32C ferry sends.
// The transfer ends at the progress line with every byte done; the rest is
// the client's check of the file and its rename.
func (b *bench) ferryDownload(ctx context.Context, fileID string, sha bool) (result, error) {
	name, args := caseFerryDownload, []string{"download", "--json"}
	if sha {
		name, args = caseFerryDownloadSHA, append(args, "--sha256")
	}
	var f struct {
		DownloadURL string `json:"download_url"` // absolute: ferry's public URL and the signed path
	}
	if err := b.api(ctx, http.MethodGet, "/files/"+fileID, &f); err != nil {
		return result{Case: name}, err
	}
	path := filepath.Join(b.work, "ferry-download.bin")
	defer os.Remove(path)
	w, err := b.begin(ctx, b.ferry, b.ferryURL+"/metrics")
	if err != nil {
		return result{Case: name}, err
	}
	var transferred mark
	var markErr error
	ps, done, err := b.runCLI(ctx, func(ev cliEvent, pid int) {
		if ev.Event == "progress" && ev.Total > 0 && ev.Done == ev.Total && transferred.at.IsZero() {
			transferred, markErr = w.markNow(pid)
		}
	}, append(args, f.DownloadURL, "-o", path)...)
	end := time.Now()
	r, m1, err2 := w.end(ctx, name, b.o.size)
	for _, e := range []error{err, err2, markErr} {
		if e != nil {
			return r, e
		}
	}
	if done.SHA256 != b.sum {
		return r, fmt.Errorf("ferry download verified sha256 %s, the file has %s", done.SHA256, b.sum)
	}
	r.ClientCPU, r.Checksum = cpuOf(ps), done.CheckedBy
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
