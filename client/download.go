package client

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ferry-io/ferry/internal/random"
)

// DownloadOptions tune Download.
type DownloadOptions struct {
	// Attempts bounds reconnections after a cut transfer (default 8).
	Attempts int
	// Progress receives the "download" phase.
	Progress ProgressFunc
	// OnRetry hears of each cut or failed request that Download will make
	// again (Op "download").
	OnRetry RetryFunc
	// Refresh, when set, returns a fresh link to the same resource. A
	// link lives minutes (FERRY_DOWNLOAD_LINK_TTL); when ferry answers
	// link_expired, Download asks Refresh for a new one and resumes with
	// it, as uploads re-sign expired part URLs. Without it an expired link
	// ends the download.
	Refresh func(ctx context.Context) (string, error)
	// SHA256 makes Download hash the bytes with SHA-256 and compare that
	// with the strong ETag even when the server offers a CRC32C of them.
	SHA256 bool
}

func (o DownloadOptions) tries() tries { return tries{o.Attempts, o.OnRetry} }

// CodeLinkExpired is the problem code ferry answers for a download link
// that ran out.
const CodeLinkExpired = "link_expired"

// DownloadResult describes a finished download.
type DownloadResult struct {
	Path   string
	Size   int64
	SHA256 string
	// ResumedFrom is the offset the first request resumed at (0: from the
	// start).
	ResumedFrom int64
	// Restarted is true when the server sent the whole resource where a
	// range was asked for (it changed), so the partial file was discarded.
	Restarted bool
	// CheckedBy names the digest the bytes were checked with: "crc32c"
	// when the server sent the CRC32C it computed with the SHA-256
	// (Repr-Digest), "sha256" otherwise.
	CheckedBy string
}

// ErrChecksum means the downloaded bytes do not match the resource's
// digest (its CRC32C or SHA-256); the partial file is removed.
var ErrChecksum = errors.New("ferry: downloaded bytes do not match the resource's digest")

// partialMeta is kept beside a partial download: the validator that makes
// a resumed range safe.
type partialMeta struct {
	ETag string `json:"etag"`
	Size int64  `json:"size"`
	// CRC32C is the base64 CRC32C of the whole resource, from the
	// response's Repr-Digest; empty when the server sent none.
	CRC32C string `json:"crc32c,omitempty"`
}

// The digests a download is checked with.
const (
	digestSHA256 = "sha256"
	digestCRC32C = "crc32c"
)

// digestFor picks the digest that checks a download. A verified resource
// carries its SHA-256 in the strong ETag and, from servers that computed
// it, its CRC32C in Repr-Digest: the CRC32C is enough to catch bytes
// damaged on the way or on disk, at a twentieth of SHA-256's CPU, and the
// SHA-256 the result reports is then the one the server computed from the
// stored bytes. Anything else is hashed with SHA-256, whose sum the result
// reports.
func digestFor(m partialMeta, opts DownloadOptions) string {
	if !opts.SHA256 && m.CRC32C != "" && strongETag.MatchString(m.ETag) {
		return digestCRC32C
	}
	return digestSHA256
}

func newDigest(alg string) hash.Hash {
	if alg == digestCRC32C {
		return crc32.New(castagnoli)
	}
	return sha256.New()
}

// reprCRC32C returns the crc32c member of a Repr-Digest field (RFC 9530:
// a structured dictionary of byte sequences, such as
// "sha-256=:...:, crc32c=:AAAAAA==:"), or "" when it has none that holds
// four bytes. As in any structured dictionary, the last member of a name
// counts.
func reprCRC32C(field string) string {
	crc := ""
	for member := range strings.SplitSeq(field, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(member), "=")
		if !ok || k != "crc32c" {
			continue
		}
		v, _, _ = strings.Cut(v, ";") // parameters say nothing we use
		crc = ""
		if len(v) >= 2 && v[0] == ':' && v[len(v)-1] == ':' {
			if b, err := base64.StdEncoding.DecodeString(v[1 : len(v)-1]); err == nil && len(b) == 4 {
				crc = v[1 : len(v)-1]
			}
		}
	}
	return crc
}

var strongETag = regexp.MustCompile(`^"([0-9a-f]{64})"$`)

// Download fetches url (a ferry download link, absolute or relative to the
// server) into path. A partial download left by an earlier call is resumed
// with Range and If-Range on its saved ETag; if the resource changed, the
// server sends it whole and the partial bytes are dropped, never spliced.
// The result is checked against the CRC32C the server sends in
// Repr-Digest, or else against the SHA-256 that the strong ETag carries
// (see digestFor and DownloadOptions.SHA256).
func (c *Client) Download(ctx context.Context, url, path string, opts DownloadOptions) (*DownloadResult, error) {
	if opts.Attempts <= 0 {
		opts.Attempts = 8
	}
	url, err := c.absolute(url)
	if err != nil {
		return nil, err
	}
	partPath, metaPath := path+".part", path+".part.json"
	res := &DownloadResult{Path: path, ResumedFrom: -1}
	st := &dlState{}
	var lastErr error
	refreshes := 0
	var wait time.Duration
	for attempt := 1; attempt <= opts.Attempts; attempt++ {
		if attempt > 1 {
			if err := c.sleep(ctx, wait); err != nil {
				return nil, err
			}
		}
		done, err := c.downloadOnce(ctx, url, partPath, metaPath, res, st, opts)
		if done {
			break
		}
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if IsCode(err, CodeLinkExpired) && opts.Refresh != nil && refreshes < opts.Attempts {
			// The link ran out (a long or resumed transfer): get a fresh
			// one and go on at once, keeping what arrived.
			refreshes++
			fresh, rerr := opts.Refresh(ctx)
			if rerr != nil {
				return nil, rerr
			}
			if fresh, rerr = c.absolute(fresh); rerr != nil {
				return nil, rerr
			}
			url = fresh
			attempt--
			continue
		}
		var fe *Error
		if errors.As(err, &fe) && fe.Status < 500 && fe.Status != http.StatusTooManyRequests {
			return nil, err // 403, 404, 410: retrying will not help
		}
		if errors.Is(err, ErrChecksum) {
			return nil, err
		}
		lastErr = err
		if attempt == opts.Attempts {
			return nil, fmt.Errorf("ferry: download failed after %d attempts: %w", opts.Attempts, lastErr)
		}
		wait = opts.tries().failed("download", attempt, err)
	}
	st.m.finish()

	meta, _ := readMeta(metaPath)
	alg := digestFor(meta, opts)
	// The bytes were hashed as they were written; only a partial file left
	// by an earlier run and never resumed here needs reading again.
	var digest []byte
	if fi, err := os.Stat(partPath); err == nil && st.alg == alg && fi.Size() == st.hashed {
		digest = st.h.Sum(nil)
	} else if digest, err = fileDigest(partPath, alg); err != nil {
		return nil, err
	}
	etagSum := ""
	if m := strongETag.FindStringSubmatch(meta.ETag); m != nil {
		etagSum = m[1]
	}
	sum := hex.EncodeToString(digest)
	got, want := sum, etagSum
	if alg == digestCRC32C {
		// The SHA-256 reported is the server's, once the bytes match its
		// CRC32C (digestFor chose CRC32C only beside a SHA-256 ETag).
		got, want, sum = base64.StdEncoding.EncodeToString(digest), meta.CRC32C, etagSum
	}
	if want != "" && got != want {
		os.Remove(partPath)
		os.Remove(metaPath)
		return nil, fmt.Errorf("%w: got %s %s, want %s", ErrChecksum, alg, got, want)
	}
	if err := os.Rename(partPath, path); err != nil {
		return nil, err
	}
	os.Remove(metaPath)
	res.SHA256, res.Size, res.CheckedBy = sum, meta.Size, alg
	if res.ResumedFrom < 0 {
		res.ResumedFrom = 0
	}
	return res, nil
}

// absolute resolves a download link relative to the server and checks it
// is an http(s) URL.
func (c *Client) absolute(url string) (string, error) {
	if strings.HasPrefix(url, "/") {
		url = c.base + url
	}
	if u, err := neturl.Parse(url); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("ferry: %q is not a download link", url)
	}
	return url, nil
}

// dlState carries one Download call's progress across reconnections: the
// digest (alg) of the partial file's first hashed bytes, so the file is
// hashed as it is written instead of read again at the end.
type dlState struct {
	m      *meter
	alg    string
	h      hash.Hash
	hashed int64
}

// use makes st hash with alg from the start of the file.
func (st *dlState) use(alg string) {
	st.alg, st.h, st.hashed = alg, newDigest(alg), 0
}

// hashPrefix makes st.h the alg digest of the partial file's first have
// bytes, reading them from disk only when they were not hashed in this
// call.
func (st *dlState) hashPrefix(partPath, alg string, have int64) error {
	if st.alg == alg && st.hashed == have {
		return nil
	}
	st.use(alg)
	f, err := os.Open(partPath)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.Copy(st.h, io.LimitReader(f, have))
	st.hashed = n
	if err == nil && n != have {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// downloadOnce makes one request and appends what arrives. It reports
// done once the partial file holds the whole resource.
func (c *Client) downloadOnce(ctx context.Context, url, partPath, metaPath string, res *DownloadResult, st *dlState, opts DownloadOptions) (bool, error) {
	meta, metaErr := readMeta(metaPath)
	have := int64(0)
	if fi, err := os.Stat(partPath); err == nil && metaErr == nil && meta.ETag != "" {
		have = fi.Size()
	} else {
		os.Remove(partPath)
		os.Remove(metaPath)
		meta = partialMeta{}
	}
	if meta.Size > 0 && have == meta.Size {
		return true, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err
	}
	if have > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(have, 10)+"-")
		req.Header.Set("If-Range", meta.ETag)
	}
	resp, err := c.data.Do(req)
	if err != nil {
		return false, redact(err)
	}
	defer resp.Body.Close()
	if res.ResumedFrom < 0 {
		res.ResumedFrom = 0
		if resp.StatusCode == http.StatusPartialContent {
			res.ResumedFrom = have
		}
	}

	var f *os.File
	switch resp.StatusCode {
	case http.StatusOK:
		// The whole resource: either we asked for it, or it changed since
		// the partial was saved. Start over, never splice.
		if have > 0 {
			res.Restarted = true
		}
		meta = partialMeta{ETag: resp.Header.Get("ETag"), Size: resp.ContentLength, CRC32C: reprCRC32C(resp.Header.Get("Repr-Digest"))}
		if err := writeMeta(metaPath, meta); err != nil {
			return false, err
		}
		if f, err = os.OpenFile(partPath, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644); err != nil {
			return false, err
		}
		have = 0
		st.use(digestFor(meta, opts))
	case http.StatusPartialContent:
		start, total, ok := parseContentRange(resp.Header.Get("Content-Range"))
		if !ok || start != have || (meta.Size > 0 && total != meta.Size) || resp.Header.Get("ETag") != meta.ETag {
			// Not the continuation we asked for: drop everything.
			os.Remove(partPath)
			os.Remove(metaPath)
			return false, fmt.Errorf("ferry: server resumed at an unexpected range %q", resp.Header.Get("Content-Range"))
		}
		if err := st.hashPrefix(partPath, digestFor(meta, opts), have); err != nil {
			return false, err
		}
		if f, err = os.OpenFile(partPath, os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			return false, err
		}
	case http.StatusRequestedRangeNotSatisfiable:
		// Our partial is as long as (or longer than) the resource: start
		// again rather than guess.
		os.Remove(partPath)
		os.Remove(metaPath)
		return false, errors.New("ferry: partial download does not fit the resource; restarting")
	default:
		return false, decodeError(resp)
	}
	defer f.Close()
	if st.m == nil {
		st.m = newMeter(opts.Progress, "download", meta.Size, have)
	}
	n, err := st.copy(f, countingReader{resp.Body, st.m})
	if err != nil {
		return false, err
	}
	if meta.Size >= 0 && have+n < meta.Size {
		return false, io.ErrUnexpectedEOF
	}
	return true, nil
}

// copyChunk is the unit of a download's copy: the body is read until a
// chunk fills, then the chunk is written to the file and hashed. Measured
// on this project's 2-core machine (1 GiB through ferry's splicing proxy,
// checked by its CRC32C in step, six runs each, interleaved): 128 KiB
// chunks took 0.94–1.25 s and 0.77–1.08 CPU s, 512 KiB 0.88–1.00 s and
// 0.62–0.77, 1 MiB 0.84–0.92 s and 0.59–0.64, 4 MiB 0.88–0.95 s and
// 0.63–0.70. Larger reads cost fewer system calls and deadline updates
// per GiB (see idleConn).
const copyChunk = 1 << 20

// writePiece bounds each write(2) of a chunk to the file. Linux sizes a
// new page-cache folio by the write that creates it, and keeps freed
// blocks of up to 32 KiB (order 3) on per-CPU lists: larger folios come
// from the buddy allocator's big free blocks, which a VM whose balloon
// reports free pages (Firecracker's, for one) has handed back to its host,
// so each first touch faults on the host. On such a 2-core VM, 1 GiB
// through ferry's proxy took 2.8–4.1 s written in 128 KiB pieces and
// 1.4–2.2 s in 32 KiB ones, alternating in one run; a bare write loop after
// a few idle seconds spent 2.9–3.0 s per GiB in write(2) at 128 KiB and
// 0.82–0.88 s at 32 KiB. It is also the piece io.Copy writes.
const writePiece = 32 << 10

// hashAhead is how many written chunks (4 MiB) may wait for a SHA-256:
// the socket reads and file writes run on one goroutine and the SHA-256 on
// another, each on its own core, and the hash (the larger half of the
// CLI's CPU) no longer holds up the socket. On one goroutine the CLI kept
// a core full and took 1.14–1.50 s for the same GiB. With 1 MiB chunks,
// four ahead did as well as sixteen (1.18–1.44 s for 1 GiB with
// --sha256, against 1.52–1.79 s for sixteen 128 KiB chunks).
const hashAhead = 4

// copy appends src to f and hashes what f took, returning the bytes
// written. It returns once the hash has caught up, so st.h then covers
// exactly the file's prefix, even after a failed read or write.
//
// A CRC32C (many GB/s) is computed on the copying goroutine, each chunk
// right after the file took it: handing the chunks to another goroutine
// cost more than the hash itself. With 1 MiB chunks a GiB took 1.04–1.17 s
// and 0.90–1.02 CPU s handed over, 0.86–0.97 s and 0.63–0.72 in step (one
// run of five at 1.22 s); with 128 KiB chunks handed over, as before,
// 1.11–1.54 s and 1.07–1.57. A SHA-256 is computed behind the copy on
// another goroutine (hashAhead).
func (st *dlState) copy(f io.Writer, src io.Reader) (int64, error) {
	hashing := st.hashBehind
	if st.alg == digestCRC32C {
		hashing = st.hashInStep
	}
	next, took, wait := hashing()
	defer wait()
	var n int64
	for {
		b := next()
		r, err := io.ReadFull(src, b)
		w, werr := writePieces(f, b[:r])
		n += int64(w)
		took(b[:w])
		if werr != nil {
			return n, werr
		}
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return n, nil // the body ended
		case err != nil:
			return n, err
		}
	}
}

// hashInStep hashes each chunk as the file takes it, in one buffer. next
// gives the buffer for the next read, took hashes what the file took of
// it, and wait returns once every chunk taken is hashed.
func (st *dlState) hashInStep() (next func() []byte, took func([]byte), wait func()) {
	buf := make([]byte, copyChunk)
	next = func() []byte { return buf }
	took = func(b []byte) {
		st.h.Write(b)
		st.hashed += int64(len(b))
	}
	return next, took, func() {}
}

// hashBehind hashes the chunks the file took on another goroutine, up to
// hashAhead chunks behind the copy.
func (st *dlState) hashBehind() (next func() []byte, took func([]byte), wait func()) {
	free := make(chan []byte, hashAhead)
	for range hashAhead {
		free <- make([]byte, copyChunk)
	}
	written := make(chan []byte, hashAhead)
	hashed := make(chan struct{})
	go func() {
		defer close(hashed)
		for b := range written {
			st.h.Write(b)
			st.hashed += int64(len(b))
			free <- b[:cap(b)]
		}
	}()
	next = func() []byte { return <-free }
	took = func(b []byte) { written <- b }
	wait = func() { close(written); <-hashed }
	return next, took, wait
}

// writePieces writes b to f in writePiece pieces.
func writePieces(f io.Writer, b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		w, err := f.Write(b[:min(len(b), writePiece)])
		n += w
		if err != nil {
			return n, err
		}
		b = b[w:]
	}
	return n, nil
}

func parseContentRange(v string) (start, total int64, ok bool) {
	// bytes 100-199/1000
	rest, found := strings.CutPrefix(v, "bytes ")
	if !found {
		return 0, 0, false
	}
	rng, tot, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, false
	}
	first, _, found := strings.Cut(rng, "-")
	if !found {
		return 0, 0, false
	}
	start, err1 := strconv.ParseInt(first, 10, 64)
	total, err2 := strconv.ParseInt(tot, 10, 64)
	return start, total, err1 == nil && err2 == nil
}

func readMeta(path string) (partialMeta, error) {
	var m partialMeta
	b, err := os.ReadFile(path)
	if err != nil {
		return m, err
	}
	err = json.Unmarshal(b, &m)
	return m, err
}

func writeMeta(path string, m partialMeta) error {
	b, _ := json.Marshal(m)
	return writeFileAtomic(path, b)
}

// writeFileAtomic writes via a temporary file and a rename, so a crash
// leaves the old content or the new, never half of either.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp-" + randomHex(4)
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// fileDigest reads the file at path through alg.
func fileDigest(path, alg string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := newDigest(alg)
	if _, err := io.Copy(h, f); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

func randomHex(n int) string { return random.Hex(n) }
