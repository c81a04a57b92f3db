package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// UploadOptions tune Upload. The zero value is usable.
type UploadOptions struct {
	// Name is the file name ferry records; UploadFile defaults it to the
	// path's base name.
	Name string
	// ContentType defaults to one guessed from Name's extension, else
	// application/octet-stream.
	ContentType string
	// Concurrency is the number of parts in flight (default 4).
	Concurrency int
	// PartSize asks for a part size; 0 means 8 MiB, raised as needed to
	// stay within S3's 10,000 parts. (The client picks it rather than
	// ferry so that one read of the file yields every part's MD5.)
	PartSize int64
	// Attempts bounds the tries of each part and API call (default 8).
	Attempts int
	// Progress receives the "hash", "upload" and "verify" phases.
	Progress ProgressFunc
	// SHA256 skips the hashing phase when the caller already knows the
	// content's hex SHA-256.
	SHA256 string
}

// UploadResult describes a finished upload.
type UploadResult struct {
	FileID   string
	UploadID string
	SHA256   string
	Size     int64
	// Instant is true when no bytes were sent: the caller owned the
	// content already, or proved possession of it.
	Instant bool
	// Resumed is true when ferry answered with an unfinished upload of the
	// same content.
	Resumed bool
	// PartsSent counts part PUTs that S3 accepted in this call.
	PartsSent int
	// PartsSkipped counts parts S3 already held with the right bytes.
	PartsSkipped int
}

// ErrUploadFailed wraps the reason ferry gives for a failed upload.
var ErrUploadFailed = errors.New("ferry: upload failed")

// UploadFile uploads the file at path.
func (c *Client) UploadFile(ctx context.Context, path string, opts UploadOptions) (*UploadResult, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if opts.Name == "" {
		opts.Name = filepath.Base(path)
	}
	return c.Upload(ctx, f, st.Size(), opts)
}

// Upload uploads size bytes read from r.
func (c *Client) Upload(ctx context.Context, r io.ReaderAt, size int64, opts UploadOptions) (*UploadResult, error) {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 4
	}
	if opts.Attempts <= 0 {
		opts.Attempts = 8
	}
	if opts.Name == "" {
		return nil, errors.New("ferry: upload needs a file name")
	}
	if opts.ContentType == "" {
		opts.ContentType = mime.TypeByExtension(filepath.Ext(opts.Name))
		if opts.ContentType == "" {
			opts.ContentType = "application/octet-stream"
		}
	}
	partSize := opts.PartSize
	if partSize == 0 {
		partSize = defaultPartSize(size)
	}
	hm := newMeter(opts.Progress, "hash", size, 0)
	d, err := hashFile(ctx, r, size, partSize, opts.SHA256 == "", hm)
	if err != nil {
		return nil, fmt.Errorf("ferry: hash: %w", err)
	}
	hm.finish()
	sum := opts.SHA256
	if sum == "" {
		sum = d.sha256
	}

	in := initRequest{FileName: opts.Name, Size: size, ContentType: opts.ContentType, SHA256: sum, PartSize: partSize}
	var up uploadJSON
	var status int
	err = c.withRetry(ctx, opts.Attempts, func() (err error) {
		status, err = c.call(ctx, http.MethodPost, "/uploads", in, &up)
		return err
	})
	if err != nil {
		return nil, err
	}
	res := &UploadResult{SHA256: sum, Size: size, UploadID: up.UploadID}
	switch up.State {
	case "success":
		res.Instant, res.FileID = true, up.FileID
		return res, nil
	case "proof_required":
		fileID, err := c.prove(ctx, r, size, up.Challenge, opts)
		if err != nil {
			return nil, err
		}
		res.Instant, res.FileID = true, fileID
		return res, nil
	case "uploading":
		res.Resumed = status == http.StatusOK
	default:
		return nil, fmt.Errorf("ferry: unexpected upload state %q", up.State)
	}

	if up.PartSize != partSize {
		// Resuming an upload someone started with another part size:
		// the part MD5s must be taken again on its boundaries.
		if d, err = hashFile(ctx, r, size, up.PartSize, false, nil); err != nil {
			return nil, fmt.Errorf("ferry: hash: %w", err)
		}
	}
	u := &uploader{c: c, r: r, up: up, opts: opts, res: res, digests: d}
	if err := u.sendMissing(ctx, up.Parts); err != nil {
		return res, err
	}
	return res, u.complete(ctx)
}

// The native API's JSON shapes (design §3).
type initRequest struct {
	FileName    string `json:"file_name"`
	Size        int64  `json:"size"`
	ContentType string `json:"content_type,omitempty"`
	SHA256      string `json:"sha256,omitempty"`
	PartSize    int64  `json:"part_size,omitempty"`
}

type partJSON struct {
	PartNumber int    `json:"part_number"`
	Size       int64  `json:"size"`
	ETag       string `json:"etag"`
}

type uploadJSON struct {
	UploadID  string     `json:"upload_id"`
	State     string     `json:"state"`
	FileName  string     `json:"file_name"`
	Size      int64      `json:"size"`
	PartSize  int64      `json:"part_size"`
	PartCount int        `json:"part_count"`
	Parts     []partJSON `json:"parts"`
	Error     string     `json:"error"`
	FileID    string     `json:"file_id"`
	Instant   bool       `json:"instant"`
	Challenge *challenge `json:"challenge"`
}

type challenge struct {
	ID     string `json:"id"`
	Ranges []struct {
		Offset int64 `json:"offset"`
		Length int64 `json:"length"`
	} `json:"ranges"`
	ExpiresAt time.Time `json:"expires_at"`
}

type presignedURL struct {
	URL       string            `json:"url"`
	Method    string            `json:"method"`
	Headers   map[string]string `json:"headers"`
	ExpiresAt time.Time         `json:"expires_at"`
}

// prove answers a proof-of-possession challenge with the SHA-256 of each
// requested range of the local bytes.
func (c *Client) prove(ctx context.Context, r io.ReaderAt, size int64, ch *challenge, opts UploadOptions) (string, error) {
	if ch == nil {
		return "", errors.New("ferry: proof_required without a challenge")
	}
	digests := make([]string, len(ch.Ranges))
	for i, rg := range ch.Ranges {
		if rg.Offset < 0 || rg.Length < 0 || rg.Offset+rg.Length > size {
			return "", fmt.Errorf("ferry: challenge range %d+%d is outside the file", rg.Offset, rg.Length)
		}
		h := sha256.New()
		if _, err := io.Copy(h, io.NewSectionReader(r, rg.Offset, rg.Length)); err != nil {
			return "", err
		}
		digests[i] = hex.EncodeToString(h.Sum(nil))
	}
	var out uploadJSON
	if _, err := c.call(ctx, http.MethodPost, "/uploads/proofs/"+ch.ID, map[string]any{"digests": digests}, &out); err != nil {
		return "", err
	}
	return out.FileID, nil
}

type uploader struct {
	c       *Client
	r       io.ReaderAt
	up      uploadJSON
	opts    UploadOptions
	res     *UploadResult
	digests digests

	mu    sync.Mutex
	etags map[int]string
}

// part is one part's bytes, read once and kept until S3 accepted them.
type part struct {
	n   int
	buf []byte
	md5 string // base64, for Content-MD5
	url presignedURL
}

func (u *uploader) partRange(n int) (int64, int64) {
	off := int64(n-1) * u.up.PartSize
	return off, min(u.up.PartSize, u.up.Size-off)
}

func (u *uploader) md5b64(n int) string {
	return base64.StdEncoding.EncodeToString(u.digests.md5[n-1][:])
}

// sendMissing uploads every part S3 does not hold with the right bytes.
// A part S3 lists is kept only when its size is right and its ETag is the
// MD5 of the local bytes: resume trusts nothing it has not checked (a PUT
// cut mid-way can leave a part of the right size with other bytes).
func (u *uploader) sendMissing(ctx context.Context, have []partJSON) error {
	u.etags = map[int]string{}
	held := map[int]partJSON{}
	for _, p := range have {
		held[p.PartNumber] = p
	}
	var doneBytes int64
	var todo []int
	for n := 1; n <= u.up.PartCount; n++ {
		_, length := u.partRange(n)
		if p, ok := held[n]; ok && p.Size == length && strings.Trim(p.ETag, `"`) == u.digests.md5Hex(n) {
			u.etags[n] = p.ETag
			doneBytes += length
			u.res.PartsSkipped++
			continue
		}
		todo = append(todo, n)
	}
	m := newMeter(u.opts.Progress, "upload", u.up.Size, doneBytes)
	defer m.finish()
	return u.send(ctx, todo, m)
}

// presignWindow is how many part URLs one presign call asks for. Large
// windows keep ferry's control plane to a handful of requests per file;
// URLs that expire before their turn are signed again one by one.
const presignWindow = 128

// send uploads the parts in todo: one goroutine presigns them a window at
// a time and reads each into one of a bounded pool of buffers
// (Concurrency+1 parts in memory); Concurrency workers PUT them.
func (u *uploader) send(ctx context.Context, todo []int, m *meter) error {
	if len(todo) == 0 {
		return nil
	}
	g, ctx := errgroup.WithContext(ctx)
	work := make(chan part)
	free := make(chan []byte, u.opts.Concurrency+1)
	for range cap(free) {
		free <- make([]byte, u.up.PartSize)
	}
	g.Go(func() error {
		defer close(work)
		for i := 0; i < len(todo); i += presignWindow {
			nums := todo[i:min(i+presignWindow, len(todo))]
			urls, err := u.presign(ctx, nums)
			if err != nil {
				return err
			}
			for _, n := range nums {
				var b []byte
				select {
				case b = <-free:
				case <-ctx.Done():
					return ctx.Err()
				}
				off, length := u.partRange(n)
				b = b[:length]
				if _, err := u.r.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
					return fmt.Errorf("ferry: read part %d: %w", n, err)
				}
				select {
				case work <- part{n: n, buf: b, md5: u.md5b64(n), url: urls[n]}:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		return nil
	})
	for range u.opts.Concurrency {
		g.Go(func() error {
			for p := range work {
				err := u.put(ctx, &p, m)
				free <- p.buf[:cap(p.buf)]
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// presign asks for the URLs of parts nums with one API call, each URL
// pinning its part's Content-MD5.
func (u *uploader) presign(ctx context.Context, nums []int) (map[int]presignedURL, error) {
	req := struct {
		PartNumbers []int             `json:"part_numbers"`
		ContentMD5  map[string]string `json:"content_md5"`
	}{PartNumbers: nums, ContentMD5: map[string]string{}}
	for _, n := range nums {
		req.ContentMD5[strconv.Itoa(n)] = u.md5b64(n)
	}
	var out struct {
		URLs map[string]presignedURL `json:"urls"`
	}
	err := u.c.withRetry(ctx, u.opts.Attempts, func() error {
		_, err := u.c.call(ctx, http.MethodPost, "/uploads/"+u.up.UploadID+"/presign", req, &out)
		return err
	})
	if err != nil {
		return nil, err
	}
	urls := make(map[int]presignedURL, len(nums))
	for _, n := range nums {
		pu, ok := out.URLs[strconv.Itoa(n)]
		if !ok || pu.URL == "" {
			return nil, fmt.Errorf("ferry: presign answer lacks part %d", n)
		}
		urls[n] = pu
	}
	return urls, nil
}

// put sends one part to S3, retrying with backoff and signing the URL
// again when it has expired (S3 answers 403) or is about to.
func (u *uploader) put(ctx context.Context, p *part, m *meter) error {
	var lastErr error
	for attempt := 1; attempt <= u.opts.Attempts; attempt++ {
		if attempt > 1 {
			if err := u.c.sleep(ctx, Backoff(attempt-1)); err != nil {
				return err
			}
		}
		if time.Until(p.url.ExpiresAt) < 5*time.Second || isStatus(lastErr, http.StatusForbidden) {
			urls, err := u.presign(ctx, []int{p.n})
			if err != nil {
				return err
			}
			p.url = urls[p.n]
		}
		etag, err := u.putOnce(ctx, p, m)
		if err == nil {
			u.mu.Lock()
			u.etags[p.n] = etag
			u.res.PartsSent++
			u.mu.Unlock()
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		lastErr = err
		var se *s3Error
		if errors.As(err, &se) && se.status >= 400 && se.status < 500 &&
			se.status != http.StatusForbidden && se.status != http.StatusBadRequest &&
			se.status != http.StatusRequestTimeout && se.status != http.StatusTooManyRequests {
			return err // not going to change on retry
		}
	}
	return fmt.Errorf("ferry: part %d failed after %d attempts: %w", p.n, u.opts.Attempts, lastErr)
}

// s3Error is a non-2xx answer from S3 to a part PUT.
type s3Error struct {
	status int
	body   string
}

func (e *s3Error) Error() string { return fmt.Sprintf("s3 answered %d: %s", e.status, e.body) }

func isStatus(err error, status int) bool {
	var se *s3Error
	return errors.As(err, &se) && se.status == status
}

func (u *uploader) putOnce(ctx context.Context, p *part, m *meter) (string, error) {
	var sent int64
	body := countingReader{bytes.NewReader(p.buf), &meterFunc{m: m, sent: &sent}}
	method := p.url.Method
	if method == "" {
		method = http.MethodPut
	}
	req, err := http.NewRequestWithContext(ctx, method, p.url.URL, body)
	if err != nil {
		return "", err
	}
	req.ContentLength = int64(len(p.buf))
	for k, v := range p.url.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-MD5", p.md5)
	resp, err := u.c.data.Do(req)
	if err != nil {
		m.add(-sent)
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		m.add(-sent)
		return "", &s3Error{status: resp.StatusCode, body: strings.TrimSpace(string(b))}
	}
	io.Copy(io.Discard, resp.Body)
	etag := resp.Header.Get("ETag")
	if etag == "" {
		return "", errors.New("ferry: S3 answered without an ETag (is the bucket's CORS exposing it?)")
	}
	return etag, nil
}

// complete asks ferry to merge, re-sending any parts ferry says are
// missing (once), then waits for the verified result.
func (u *uploader) complete(ctx context.Context) error {
	for round := 0; ; round++ {
		u.mu.Lock()
		parts := make([]map[string]any, 0, len(u.etags))
		nums := make([]int, 0, len(u.etags))
		for n := range u.etags {
			nums = append(nums, n)
		}
		sort.Ints(nums)
		for _, n := range nums {
			parts = append(parts, map[string]any{"part_number": n, "etag": u.etags[n]})
		}
		u.mu.Unlock()
		err := u.c.withRetry(ctx, u.opts.Attempts, func() error {
			_, err := u.c.call(ctx, http.MethodPost, "/uploads/"+u.up.UploadID+"/complete", map[string]any{"parts": parts}, nil)
			return err
		})
		var fe *Error
		if round == 0 && errors.As(err, &fe) && fe.Status == http.StatusConflict {
			missing := missingParts(fe)
			if len(missing) > 0 {
				u.mu.Lock()
				for _, n := range missing {
					delete(u.etags, n)
				}
				u.mu.Unlock()
				m := newMeter(u.opts.Progress, "upload", u.up.Size, u.up.Size-int64(len(missing))*u.up.PartSize)
				if err := u.send(ctx, missing, m); err != nil {
					return err
				}
				m.finish()
				continue
			}
		}
		if err != nil {
			return err
		}
		break
	}
	return u.wait(ctx)
}

func missingParts(e *Error) []int {
	var out []int
	for _, k := range []string{"missing_parts", "bad_parts"} {
		var ns []int
		if raw, ok := e.Fields[k]; ok && json.Unmarshal(raw, &ns) == nil {
			out = append(out, ns...)
		}
	}
	sort.Ints(out)
	return out
}

// wait polls the upload until ferry has merged and verified it.
func (u *uploader) wait(ctx context.Context) error {
	m := newMeter(u.opts.Progress, "verify", u.up.Size, 0)
	// Merging and verifying take about as long as reading the file from
	// S3 once; polls are cheap, so keep the wait after it short.
	delay := 100 * time.Millisecond
	for {
		var st uploadJSON
		err := u.c.withRetry(ctx, u.opts.Attempts, func() error {
			_, err := u.c.call(ctx, http.MethodGet, "/uploads/"+u.up.UploadID, nil, &st)
			return err
		})
		if err != nil {
			return err
		}
		switch st.State {
		case "success":
			m.add(u.up.Size)
			m.finish()
			u.res.FileID = st.FileID
			return nil
		case "failed", "aborted", "expired":
			return fmt.Errorf("%w: %s: %s", ErrUploadFailed, st.State, st.Error)
		}
		if err := u.c.sleep(ctx, delay); err != nil {
			return err
		}
		delay = min(delay*3/2, time.Second)
	}
}

// meterFunc adapts a meter for countingReader while remembering how much
// one attempt sent, so a failed attempt can be taken back.
type meterFunc struct {
	m    *meter
	sent *int64
}

func (f *meterFunc) add(n int64) {
	*f.sent += n
	f.m.add(n)
}
