package client

import (
	"bytes"
	"context"
	"crypto/md5"
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
	// PartSize asks for a part size; 0 lets ferry choose.
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
	sum := opts.SHA256
	if sum == "" {
		h := sha256.New()
		m := newMeter(opts.Progress, "hash", size, 0)
		if _, err := io.Copy(h, countingReader{io.NewSectionReader(r, 0, size), m}); err != nil {
			return nil, fmt.Errorf("ferry: hash: %w", err)
		}
		m.finish()
		sum = hex.EncodeToString(h.Sum(nil))
	}

	in := initRequest{FileName: opts.Name, Size: size, ContentType: opts.ContentType, SHA256: sum, PartSize: opts.PartSize}
	var up uploadJSON
	var status int
	err := c.withRetry(ctx, opts.Attempts, func() (err error) {
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

	u := &uploader{c: c, r: r, up: up, opts: opts, res: res}
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
	c    *Client
	r    io.ReaderAt
	up   uploadJSON
	opts UploadOptions
	res  *UploadResult

	mu    sync.Mutex
	etags map[int]string
}

// part is one part's bytes, read once and kept until S3 accepted them.
type part struct {
	n   int
	buf []byte
	md5 string // base64, for Content-MD5
	hex string // hex, what S3 reports as the part's ETag
	url presignedURL
}

func (u *uploader) partRange(n int) (int64, int64) {
	off := int64(n-1) * u.up.PartSize
	return off, min(u.up.PartSize, u.up.Size-off)
}

func (u *uploader) read(n int, buf []byte) (part, error) {
	off, length := u.partRange(n)
	buf = buf[:length]
	if _, err := u.r.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return part{}, fmt.Errorf("ferry: read part %d: %w", n, err)
	}
	sum := md5.Sum(buf)
	return part{n: n, buf: buf, md5: base64.StdEncoding.EncodeToString(sum[:]), hex: hex.EncodeToString(sum[:])}, nil
}

// sendMissing uploads every part S3 does not hold with the right bytes.
// A part S3 lists is kept only when its size is right and its ETag is the
// MD5 of the local bytes: resume trusts nothing it has not checked.
func (u *uploader) sendMissing(ctx context.Context, have []partJSON) error {
	u.etags = map[int]string{}
	held := map[int]partJSON{}
	for _, p := range have {
		held[p.PartNumber] = p
	}
	var doneBytes int64
	var todo []int
	buf := make([]byte, u.up.PartSize)
	for n := 1; n <= u.up.PartCount; n++ {
		_, length := u.partRange(n)
		if p, ok := held[n]; ok && p.Size == length {
			pt, err := u.read(n, buf)
			if err != nil {
				return err
			}
			if strings.Trim(p.ETag, `"`) == pt.hex {
				u.etags[n] = p.ETag
				doneBytes += length
				u.res.PartsSkipped++
				continue
			}
		}
		todo = append(todo, n)
	}
	m := newMeter(u.opts.Progress, "upload", u.up.Size, doneBytes)
	defer m.finish()
	return u.send(ctx, todo, m)
}

// send uploads the parts in todo: one goroutine reads parts into a bounded
// pool of buffers (Concurrency+1 parts in memory) and presigns them in
// batches; Concurrency workers PUT them.
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
		for i := 0; i < len(todo); i += u.opts.Concurrency {
			nums := todo[i:min(i+u.opts.Concurrency, len(todo))]
			parts := make([]part, 0, len(nums))
			for _, n := range nums {
				var b []byte
				select {
				case b = <-free:
				case <-ctx.Done():
					return ctx.Err()
				}
				p, err := u.read(n, b)
				if err != nil {
					return err
				}
				parts = append(parts, p)
			}
			if err := u.presign(ctx, parts); err != nil {
				return err
			}
			for _, p := range parts {
				select {
				case work <- p:
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

// presign fills in the URLs of parts with one API call, each URL pinning
// its part's Content-MD5.
func (u *uploader) presign(ctx context.Context, parts []part) error {
	req := struct {
		PartNumbers []int             `json:"part_numbers"`
		ContentMD5  map[string]string `json:"content_md5"`
	}{ContentMD5: map[string]string{}}
	for _, p := range parts {
		req.PartNumbers = append(req.PartNumbers, p.n)
		req.ContentMD5[strconv.Itoa(p.n)] = p.md5
	}
	var out struct {
		URLs map[string]presignedURL `json:"urls"`
	}
	err := u.c.withRetry(ctx, u.opts.Attempts, func() error {
		_, err := u.c.call(ctx, http.MethodPost, "/uploads/"+u.up.UploadID+"/presign", req, &out)
		return err
	})
	if err != nil {
		return err
	}
	for i := range parts {
		pu, ok := out.URLs[strconv.Itoa(parts[i].n)]
		if !ok || pu.URL == "" {
			return fmt.Errorf("ferry: presign answer lacks part %d", parts[i].n)
		}
		parts[i].url = pu
	}
	return nil
}

// put sends one part to S3, retrying with backoff and re-signing the URL
// when it has expired (S3 answers 403). Then it reports the part to ferry.
func (u *uploader) put(ctx context.Context, p *part, m *meter) error {
	var lastErr error
	for attempt := 1; attempt <= u.opts.Attempts; attempt++ {
		if attempt > 1 {
			if err := u.c.sleep(ctx, Backoff(attempt-1)); err != nil {
				return err
			}
		}
		if time.Until(p.url.ExpiresAt) < 5*time.Second || isStatus(lastErr, http.StatusForbidden) {
			one := []part{*p}
			if err := u.presign(ctx, one); err != nil {
				return err
			}
			p.url = one[0].url
		}
		etag, err := u.putOnce(ctx, p, m)
		if err == nil {
			u.mu.Lock()
			u.etags[p.n] = etag
			u.res.PartsSent++
			u.mu.Unlock()
			return u.report(ctx, p.n, etag, int64(len(p.buf)))
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

// report tells ferry a part is in (progress bookkeeping; idempotent).
func (u *uploader) report(ctx context.Context, n int, etag string, size int64) error {
	return u.c.withRetry(ctx, u.opts.Attempts, func() error {
		_, err := u.c.call(ctx, http.MethodPut, fmt.Sprintf("/uploads/%s/parts/%d", u.up.UploadID, n),
			map[string]any{"etag": etag, "size": size}, nil)
		return err
	})
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
	delay := 200 * time.Millisecond
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
		delay = min(delay*2, 2*time.Second)
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
