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
	"hash/crc32"
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	// stay within S3's 10,000 parts.
	PartSize int64
	// Attempts bounds the tries of each part and API call (default 8).
	Attempts int
	// Progress receives the "upload" phase (bytes S3 holds) and the
	// "verify" phase (waiting for ferry to merge the parts).
	Progress ProgressFunc
	// SHA256 is the content's hex SHA-256 when the caller already knows
	// it: ferry is then asked first whether it holds the content (instant
	// upload, or a proof of possession), and the file is not hashed.
	SHA256 string
	// SkipHash leaves the SHA-256 to ferry: the client computes only each
	// part's CRC32C, so it cannot be offered an instant upload, and the
	// file's SHA-256 is the one ferry computes when it reads the merged
	// object back (UploadResult.SHA256 is empty until then). On a machine
	// whose cores are busy sending, the client's hash is the one cost an
	// upload adds to a plain S3 transfer; skip it for content ferry is
	// not going to hold already. Ignored when SHA256 is given.
	SkipHash bool
	// Ticket is an upload ticket (ftk_…) a backend created: the upload
	// authenticates with it instead of the client's token, belongs to the
	// ticket's user and carries the ticket's metadata. A ticket makes one
	// upload; running the same upload again resumes it.
	Ticket string
	// Metadata is what the uploader says about the file (at most 16 keys,
	// values of at most 1 KiB); the file shows it as client_metadata.
	Metadata map[string]string
}

// UploadResult describes a finished upload.
type UploadResult struct {
	FileID   string
	UploadID string
	SHA256   string
	Size     int64
	// Instant is true when ferry already held the content: the caller
	// owned it, or proved possession of it. Parts sent before ferry could
	// tell were sent in vain.
	Instant bool
	// Resumed is true when ferry answered with an unfinished upload of the
	// same file.
	Resumed bool
	// PartsSent counts part PUTs that S3 accepted in this call.
	PartsSent int
	// PartsSkipped counts parts S3 already held with the right bytes.
	PartsSkipped int
}

// ErrUploadFailed wraps the reason ferry gives for a failed upload.
var ErrUploadFailed = errors.New("ferry: upload failed")

// errFileChanged reports a file whose bytes changed between the read that
// checksummed a part and the read that sends it.
var errFileChanged = errors.New("ferry: the file changed while it was being uploaded")

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
//
// The file is read once, in order, and that one read yields everything:
// each part's CRC32C (signed into the part's URL, so S3 refuses other
// bytes), the whole file's CRC32C (which S3 checks at completion) and its
// SHA-256, and the part buffers the PUTs send. No byte waits for a hash of
// the whole file. The reader may run ahead of the PUTs on a spare core
// when the network is the bottleneck (it never waits longer for a free
// buffer than it takes to hash two parts); then the SHA-256 is known early
// and ferry is asked whether it already holds the content, which ends the
// upload at once on a hit, and the parts read ahead are read again when
// their turn comes. A store without checksums gets Content-MD5 per part
// instead.
func (c *Client) Upload(ctx context.Context, r io.ReaderAt, size int64, opts UploadOptions) (*UploadResult, error) {
	if opts.Ticket != "" {
		c = c.withToken(opts.Ticket)
	}
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
		partSize = defaultPartSize(size, s3MaxParts)
	}
	var up uploadJSON
	var status int
	open := func(partSize int64) error {
		first := make([]byte, min(partSize, size))
		if _, err := r.ReadAt(first, 0); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("ferry: read: %w", err)
		}
		in := initRequest{FileName: opts.Name, Size: size, ContentType: opts.ContentType, SHA256: opts.SHA256,
			PartSize: partSize, Checksum: "CRC32C", FirstPartCRC32C: crc32cB64(crc32.Checksum(first, castagnoli)),
			Metadata: opts.Metadata}
		return c.withRetry(ctx, opts.Attempts, func() (err error) {
			status, err = c.call(ctx, http.MethodPost, "/uploads", in, &up)
			return err
		})
	}
	err := open(partSize)
	if n, ok := storePartLimit(err); ok && opts.PartSize == 0 && n < s3MaxParts {
		// The store takes fewer parts than S3 (FERRY_S3_MAX_PARTS): lay
		// the file out again within its limit.
		err = open(defaultPartSize(size, n))
	}
	if err != nil {
		return nil, err
	}
	res := &UploadResult{SHA256: opts.SHA256, Size: size, UploadID: up.UploadID}
	switch up.State {
	case "success":
		res.Instant, res.FileID = true, up.FileID
		return res, nil
	case "proof_required":
		fileID, err := c.prove(ctx, r, size, up.Challenge)
		if err != nil {
			return nil, err
		}
		res.Instant, res.FileID = true, fileID
		return res, nil
	case "pending", "merging":
		// Completed already by an earlier run: wait for it.
		u := &uploader{c: c, up: up, opts: opts, res: res}
		res.Resumed = true
		return res, u.wait(ctx)
	case "uploading":
		res.Resumed = status == http.StatusOK
	default:
		return nil, fmt.Errorf("ferry: unexpected upload state %q", up.State)
	}
	for round := 1; ; round++ {
		u := &uploader{c: c, r: r, up: up, opts: opts, res: res, checksums: up.Checksum == "CRC32C",
			sums: make(map[int]string, up.PartCount), etags: map[int]string{}}
		instant, err := u.transfer(ctx)
		if err != nil || instant {
			return res, err
		}
		err = u.complete(ctx)
		if !errors.Is(err, errRestarted) || round == 2 {
			return res, err
		}
		// The store lost the parts before ferry could merge them, and
		// ferry put the upload back to uploading: send it all again.
		if err := c.withRetry(ctx, opts.Attempts, func() error {
			_, err := c.call(ctx, http.MethodGet, "/uploads/"+up.UploadID, nil, &up)
			return err
		}); err != nil {
			return res, err
		}
		res.PartsSkipped = 0
	}
}

// errRestarted reports an upload that ferry put back to uploading after
// complete, because the store lost its parts.
var errRestarted = errors.New("ferry: the store lost the upload's parts; it must be sent again")

// The native API's JSON shapes (docs/uploads.md).
type initRequest struct {
	FileName        string            `json:"file_name"`
	Size            int64             `json:"size"`
	ContentType     string            `json:"content_type,omitempty"`
	SHA256          string            `json:"sha256,omitempty"`
	PartSize        int64             `json:"part_size,omitempty"`
	Checksum        string            `json:"checksum_algorithm,omitempty"`
	FirstPartCRC32C string            `json:"first_part_crc32c,omitempty"`
	Metadata        map[string]string `json:"metadata,omitempty"`
}

type partJSON struct {
	PartNumber int    `json:"part_number"`
	Size       int64  `json:"size"`
	ETag       string `json:"etag"`
	CRC32C     string `json:"checksum_crc32c"`
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
	Checksum  string     `json:"checksum_algorithm"`
	SHA256    string     `json:"sha256"`
	Challenge *challenge `json:"challenge"`
}

type challenge struct {
	ID     string `json:"id"`
	Nonce  string `json:"nonce"`
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

// prove answers a proof-of-possession challenge: for each requested range
// of the local bytes, the SHA-256 of the challenge's nonce followed by the
// range.
func (c *Client) prove(ctx context.Context, r io.ReaderAt, size int64, ch *challenge) (string, error) {
	if ch == nil {
		return "", errors.New("ferry: proof_required without a challenge")
	}
	nonce, err := hex.DecodeString(ch.Nonce)
	if err != nil || len(nonce) == 0 {
		return "", errors.New("ferry: the challenge has no valid nonce")
	}
	digests := make([]string, len(ch.Ranges))
	for i, rg := range ch.Ranges {
		if rg.Offset < 0 || rg.Length < 0 || rg.Offset+rg.Length > size {
			return "", fmt.Errorf("ferry: challenge range %d+%d is outside the file", rg.Offset, rg.Length)
		}
		h := sha256.New()
		h.Write(nonce)
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

// s3MaxParts is S3's part limit, which the client lays files out for
// until ferry says its store takes fewer.
const s3MaxParts = 10_000

// defaultPartSize is what the client asks for: 8 MiB, raised to the next
// MiB that keeps the file within maxParts parts.
func defaultPartSize(size, maxParts int64) int64 {
	const min = 8 << 20
	ps := int64(min)
	if (size+ps-1)/ps > maxParts {
		ps = ((size+maxParts-1)/maxParts + (1 << 20) - 1) >> 20 << 20
	}
	return ps
}

// storePartLimit is the part limit a too_many_parts refusal names.
func storePartLimit(err error) (int64, bool) {
	var e *Error
	if !errors.As(err, &e) || e.Code != "too_many_parts" {
		return 0, false
	}
	var n int64
	if raw, ok := e.Fields["max_parts"]; !ok || json.Unmarshal(raw, &n) != nil || n < 1 {
		return 0, false
	}
	return n, true
}

type uploader struct {
	c         *Client
	r         io.ReaderAt
	up        uploadJSON
	opts      UploadOptions
	res       *UploadResult
	checksums bool // parts carry CRC32C (else Content-MD5)

	mu      sync.Mutex
	sums    map[int]string // part → its CRC32C or Content-MD5, base64, as signed
	etags   map[int]string
	fullCRC uint32
	sent    int64 // bytes S3 holds: skipped parts and accepted PUTs
}

// part is one part ready to send: its checksum is known, and buf holds its
// bytes, or is nil when the reader went ahead without a free buffer and the
// sender must read them again. release gives buf back once the PUT is done
// with it.
type part struct {
	n       int
	sum     string
	crc     uint32 // for a part read again: the bytes must still hash to it
	md5     [md5.Size]byte
	buf     []byte
	release func()
	url     presignedURL
}

func (u *uploader) partRange(n int) (int64, int64) {
	off := int64(n-1) * u.up.PartSize
	return off, min(u.up.PartSize, u.up.Size-off)
}

// errInstant ends a transfer that ferry answered with an existing file.
var errInstant = errors.New("ferry: content already held")

// transfer reads the file once and sends every part S3 does not hold with
// the right bytes. It reports true when ferry turned out to hold the
// content already (res then names the file).
func (u *uploader) transfer(ctx context.Context) (bool, error) {
	held := map[int]partJSON{}
	for _, p := range u.up.Parts {
		held[p.PartNumber] = p
	}
	m := newMeter(u.opts.Progress, "upload", u.up.Size, 0)
	defer m.finish()
	g, gctx := errgroup.WithContext(ctx)
	// Buffers beyond the parts in flight let the reader get a few parts
	// ahead, so each presign call signs a batch of them instead of one or
	// two: ferry's work per GiB is mostly per request.
	window := min(u.opts.Concurrency+6, u.up.PartCount+1)
	pool := make(chan []byte, window)
	for range window {
		pool <- make([]byte, u.up.PartSize)
	}
	ready := make(chan part, u.up.PartCount)
	hashed := make(chan string, 1)
	g.Go(func() error { return u.read(gctx, held, pool, ready, hashed, m) })
	g.Go(func() error { return u.dispatch(gctx, ready, pool, m) })
	g.Go(func() error { return u.declare(gctx, ctx, hashed) })
	err := g.Wait()
	if u.res.Instant {
		// ferry holds the content: whatever the PUTs still in flight met
		// (the upload is gone) no longer matters.
		return true, nil
	}
	return false, err
}

// read is the one sequential read of the file. For each part it computes
// the part's checksum, folds the part into the whole file's CRC32C and
// SHA-256, and either counts the part as held (S3 lists it with the same
// checksum) or queues it to be sent, in its buffer when one is free.
func (u *uploader) read(ctx context.Context, held map[int]partJSON, pool chan []byte, ready chan<- part, hashed chan<- string, m *meter) error {
	defer close(ready)
	// The SHA-256 runs on its own goroutine, a few parts behind the read,
	// so part checksums (and with them presigning and the PUTs) never wait
	// for the slower hash. A pooled buffer goes back to the pool once both
	// the hash and its PUT are done with it.
	var sha *hasher
	if u.res.SHA256 == "" && !u.opts.SkipHash {
		sha = newHasher(cap(pool) + 2)
		defer sha.stop()
	}
	scratch := [2][]byte{make([]byte, u.up.PartSize), make([]byte, u.up.PartSize)}
	scratchFree := [2]chan struct{}{make(chan struct{}, 1), make(chan struct{}, 1)}
	scratchFree[0] <- struct{}{}
	scratchFree[1] <- struct{}{}
	ahead := false
	began := time.Now()
	var busy time.Duration // time spent reading and hashing, not waiting
	var readBytes int64
	for n := 1; n <= u.up.PartCount; n++ {
		off, length := u.partRange(n)
		var buf []byte
		pooled := false
		for !ahead && !pooled {
			// Wait for a free buffer while the PUTs keep up with reading.
			// When they are far slower (the network is the bottleneck),
			// go ahead without buffers: reading those parts again later
			// costs the transfer nothing, and the SHA-256 comes early.
			select {
			case b := <-pool:
				buf, pooled = b, true
			case <-time.After(100 * time.Millisecond):
				ahead = u.linkIsSlow(time.Since(began), busy, readBytes)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		var release func()
		if pooled {
			refs := new(atomic.Int32)
			refs.Store(1)
			if sha != nil {
				refs.Store(2)
			}
			b := buf
			release = func() {
				if refs.Add(-1) == 0 {
					pool <- b[:cap(b)]
				}
			}
		} else {
			// Two scratch buffers: one is read into while the hash may
			// still be busy with the other.
			i := n % 2
			select {
			case <-scratchFree[i]:
			case <-ctx.Done():
				return ctx.Err()
			}
			buf = scratch[i]
			release = func() { scratchFree[i] <- struct{}{} }
		}
		start := time.Now()
		buf = buf[:length]
		if _, err := u.r.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("ferry: read part %d: %w", n, err)
		}
		p := part{n: n}
		p.crc = crc32.Checksum(buf, castagnoli)
		if u.checksums {
			p.sum = crc32cB64(p.crc)
		} else {
			p.md5 = md5.Sum(buf)
			p.sum = base64.StdEncoding.EncodeToString(p.md5[:])
		}
		if sha != nil {
			if err := sha.add(ctx, buf, release); err != nil {
				return err
			}
		} else if !pooled {
			release()
		}
		u.mu.Lock()
		u.sums[n] = p.sum
		if n == 1 {
			u.fullCRC = p.crc
		} else {
			u.fullCRC = crc32cCombine(u.fullCRC, p.crc, length)
		}
		u.mu.Unlock()
		busy += time.Since(start)
		readBytes += length

		if h, ok := held[n]; ok && h.Size == length && u.holds(h, p) {
			u.mu.Lock()
			u.etags[n] = h.ETag
			u.res.PartsSkipped++
			u.sent += length
			u.mu.Unlock()
			m.add(length)
			if pooled {
				release() // the PUT's share: there is none
			}
			continue
		}
		// Once ahead, the reader never takes a buffer again: queued
		// buffers then belong only to parts before every part that must
		// be read again, so a sender waiting for one always gets it.
		if pooled {
			p.buf, p.release = buf, release
		}
		select {
		case ready <- p:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if sha != nil {
		sum, err := sha.sum(ctx)
		if err != nil {
			return err
		}
		u.res.SHA256 = sum
		hashed <- sum
	}
	close(hashed)
	return nil
}

// hasher takes the file's bytes in order on its own goroutine and computes
// their SHA-256, calling each chunk's done once it is hashed.
type hasher struct {
	in   chan hashChunk
	out  chan string
	quit chan struct{}
}

type hashChunk struct {
	b    []byte
	done func()
}

func newHasher(depth int) *hasher {
	in := make(chan hashChunk, depth)
	h := &hasher{in: in, out: make(chan string, 1), quit: make(chan struct{})}
	go func() {
		s := sha256.New()
		for {
			select {
			case c, ok := <-in:
				if !ok {
					h.out <- hex.EncodeToString(s.Sum(nil))
					return
				}
				s.Write(c.b)
				c.done()
			case <-h.quit:
				return
			}
		}
	}()
	return h
}

func (h *hasher) add(ctx context.Context, b []byte, done func()) error {
	select {
	case h.in <- hashChunk{b, done}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sum ends the input and returns the digest.
func (h *hasher) sum(ctx context.Context) (string, error) {
	close(h.in)
	h.in = nil
	select {
	case s := <-h.out:
		return s, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// stop ends the hashing goroutine if sum was not reached.
func (h *hasher) stop() {
	if h.in != nil {
		close(h.quit)
	}
}

// linkIsSlow decides, after at least a second, whether the PUTs are so
// much slower than reading and hashing (a quarter of the speed or less)
// that reading ahead pays: on a fast link the reader waits for buffers and
// the file is read once.
func (u *uploader) linkIsSlow(elapsed, busy time.Duration, read int64) bool {
	if elapsed < time.Second || busy <= 0 {
		return false
	}
	u.mu.Lock()
	sent := u.sent
	u.mu.Unlock()
	readRate := float64(read) / busy.Seconds()
	sendRate := float64(sent) / elapsed.Seconds()
	return sendRate*4 < readRate
}

// holds reports whether a part S3 lists is the local part: same CRC32C, or
// for uploads without checksums an ETag that is the local part's MD5. A
// PUT cut mid-way can leave a part of the right size with other bytes, so
// resume trusts nothing it has not checked.
func (u *uploader) holds(h partJSON, p part) bool {
	if u.checksums {
		return h.CRC32C == p.sum
	}
	return strings.Trim(h.ETag, `"`) == hex.EncodeToString(p.md5[:])
}

// declare tells ferry the SHA-256 as soon as the read has it, when enough
// is left to send for it to matter: ferry answers with an instant file, a
// proof to make, or nothing new. It waits for the hash on wait (the
// transfer's group) but asks on ctx: an instant answer aborts the upload
// before it reaches the client, so a part in flight meanwhile fails with
// 409 and ends the group; the answer must still be read, or a file ferry
// created would be reported as a failed upload.
func (u *uploader) declare(wait, ctx context.Context, hashed <-chan string) error {
	var sum string
	select {
	case s, ok := <-hashed:
		if !ok {
			return nil
		}
		sum = s
	case <-wait.Done():
		return nil
	}
	u.mu.Lock()
	left := u.up.Size - u.sent
	u.mu.Unlock()
	if left < 2*u.up.PartSize {
		return nil // it goes with complete
	}
	var out uploadJSON
	err := u.c.withRetry(ctx, u.opts.Attempts, func() error {
		_, err := u.c.call(ctx, http.MethodPost, "/uploads/"+u.up.UploadID+"/sha256", map[string]string{"sha256": sum}, &out)
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	switch out.State {
	case "success":
		u.res.Instant, u.res.FileID = true, out.FileID
		return errInstant
	case "proof_required":
		fileID, err := u.c.prove(ctx, u.r, u.up.Size, out.Challenge)
		if err != nil {
			return err
		}
		u.res.Instant, u.res.FileID = true, fileID
		u.abort(ctx)
		return errInstant
	}
	return nil
}

// abort drops the upload after an instant file made it useless.
func (u *uploader) abort(ctx context.Context) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	u.c.call(actx, http.MethodDelete, "/uploads/"+u.up.UploadID, nil, nil)
}

// presignWindow is how many part URLs one presign call asks for. Large
// windows keep ferry's control plane to a handful of requests per file;
// URLs that expire before their turn are signed again one by one.
const presignWindow = 128

// dispatch presigns ready parts in batches (as many as are ready, up to
// presignWindow) and hands them to Concurrency senders.
func (u *uploader) dispatch(ctx context.Context, ready <-chan part, pool chan []byte, m *meter) error {
	g, ctx := errgroup.WithContext(ctx)
	work := make(chan part)
	g.Go(func() error {
		defer close(work)
		for {
			var batch []part
			select {
			case p, ok := <-ready:
				if !ok {
					return nil
				}
				batch = append(batch, p)
			case <-ctx.Done():
				return ctx.Err()
			}
		more:
			for len(batch) < presignWindow {
				select {
				case p, ok := <-ready:
					if !ok {
						break more
					}
					batch = append(batch, p)
				default:
					break more
				}
			}
			nums := make([]int, len(batch))
			for i, p := range batch {
				nums[i] = p.n
			}
			urls, err := u.presign(ctx, nums)
			if err != nil {
				return err
			}
			for _, p := range batch {
				p.url = urls[p.n]
				select {
				case work <- p:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
	})
	for range u.opts.Concurrency {
		g.Go(func() error {
			for p := range work {
				if err := u.send(ctx, &p, pool, m); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// send PUTs one part, reading it again first when the reader went ahead
// without keeping its bytes, and returns its buffer to the pool.
func (u *uploader) send(ctx context.Context, p *part, pool chan []byte, m *meter) error {
	if p.buf == nil {
		var b []byte
		select {
		case b = <-pool:
		case <-ctx.Done():
			return ctx.Err()
		}
		p.release = func() { pool <- b[:cap(b)] }
		off, length := u.partRange(p.n)
		p.buf = b[:length]
		if _, err := u.r.ReadAt(p.buf, off); err != nil && !errors.Is(err, io.EOF) {
			p.release()
			return fmt.Errorf("ferry: read part %d: %w", p.n, err)
		}
		if crc32.Checksum(p.buf, castagnoli) != p.crc {
			p.release()
			return fmt.Errorf("%w (part %d)", errFileChanged, p.n)
		}
	}
	err := u.put(ctx, p, m)
	p.release()
	return err
}

// presign asks for the URLs of parts nums with one API call, each URL
// pinning its part's checksum.
func (u *uploader) presign(ctx context.Context, nums []int) (map[int]presignedURL, error) {
	sums := make(map[string]string, len(nums))
	u.mu.Lock()
	for _, n := range nums {
		sums[strconv.Itoa(n)] = u.sums[n]
	}
	u.mu.Unlock()
	req := map[string]any{"part_numbers": nums}
	if u.checksums {
		req["checksum_crc32c"] = sums
	} else {
		req["content_md5"] = sums
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
			u.sent += int64(len(p.buf))
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

// complete asks ferry to merge, with the part ETags, the whole file's
// CRC32C (which S3 checks) and SHA-256, sending again (once) any part ferry
// says is missing or wrong; then it waits for the result.
func (u *uploader) complete(ctx context.Context) error {
	for round := 0; ; round++ {
		u.mu.Lock()
		nums := make([]int, 0, len(u.etags))
		for n := range u.etags {
			nums = append(nums, n)
		}
		sort.Ints(nums)
		parts := make([]map[string]any, 0, len(nums))
		for _, n := range nums {
			parts = append(parts, map[string]any{"part_number": n, "etag": u.etags[n]})
		}
		req := map[string]any{"parts": parts}
		if u.res.SHA256 != "" {
			req["sha256"] = u.res.SHA256
		}
		if u.checksums {
			req["checksum_crc32c"] = crc32cB64(u.fullCRC)
		}
		u.mu.Unlock()
		err := u.c.withRetry(ctx, u.opts.Attempts, func() error {
			_, err := u.c.call(ctx, http.MethodPost, "/uploads/"+u.up.UploadID+"/complete", req, nil)
			return err
		})
		var fe *Error
		if round == 0 && errors.As(err, &fe) && fe.Status == http.StatusConflict {
			if missing := missingParts(fe); len(missing) > 0 {
				if err := u.resend(ctx, missing); err != nil {
					return err
				}
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

// resend sends parts again from the file, checking each against the
// checksum the first read gave it.
func (u *uploader) resend(ctx context.Context, nums []int) error {
	m := newMeter(u.opts.Progress, "upload", u.up.Size, u.up.Size-int64(len(nums))*u.up.PartSize)
	defer m.finish()
	pool := make(chan []byte, u.opts.Concurrency)
	for range u.opts.Concurrency {
		pool <- make([]byte, u.up.PartSize)
	}
	ready := make(chan part, len(nums))
	for _, n := range nums {
		u.mu.Lock()
		delete(u.etags, n)
		sum := u.sums[n]
		u.mu.Unlock()
		p := part{n: n, sum: sum}
		if u.checksums {
			b, _ := base64.StdEncoding.DecodeString(sum)
			if len(b) == 4 {
				p.crc = uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
			}
		} else {
			// Content-MD5 pins the bytes; read them and take their CRC.
			off, length := u.partRange(n)
			b := make([]byte, length)
			if _, err := u.r.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			p.crc = crc32.Checksum(b, castagnoli)
		}
		ready <- p
	}
	close(ready)
	return u.dispatch(ctx, ready, pool, m)
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

// wait follows the upload until ferry has merged it, holding each request
// open until the state changes (?wait), so success is seen as soon as it
// happens.
func (u *uploader) wait(ctx context.Context) error {
	m := newMeter(u.opts.Progress, "verify", u.up.Size, 0)
	for {
		var st uploadJSON
		err := u.c.withRetry(ctx, u.opts.Attempts, func() error {
			_, err := u.c.call(ctx, http.MethodGet, "/uploads/"+u.up.UploadID+"?wait=30s", nil, &st)
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
			if u.res.SHA256 == "" {
				u.res.SHA256 = st.SHA256
			}
			return nil
		case "failed", "aborted", "expired":
			return fmt.Errorf("%w: %s: %s", ErrUploadFailed, st.State, st.Error)
		case "uploading":
			return errRestarted
		}
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
