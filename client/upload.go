package client

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
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
	// Progress receives the "upload" phase (bytes S3 holds, and what has
	// gone out of the parts on their way) and the "verify" phase
	// (waiting for ferry to merge the parts).
	Progress ProgressFunc
	// OnRetry hears of each part PUT and API call that failed and will be
	// tried again.
	OnRetry RetryFunc
	// SHA256 is the content's hex SHA-256 when the caller already knows
	// it: ferry is then asked first whether it holds the content (instant
	// upload, or a proof of possession), and the file is not hashed.
	SHA256 string
	// SkipHash never hashes the file, even when ferry says it may hold
	// the content already (instant_candidate), so the upload is never
	// instant. Without it the client hashes the file only on that hint,
	// before sending a byte; otherwise the file's SHA-256 is the one
	// ferry computes when it reads the merged object back
	// (UploadResult.SHA256 is empty until then). Ignored when SHA256 is
	// given.
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

func (o UploadOptions) tries() tries { return tries{o.Attempts, o.OnRetry} }

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
// A checksum read of the file, in order, yields each part's CRC32C (signed
// into the part's URL, so S3 refuses other bytes) and the whole file's
// CRC32C (which S3 checks at completion), running up to readAhead parts
// ahead of the PUTs so that presign calls sign large batches. Each PUT then
// sends its part from r: from an *os.File with sendfile(2), so the bytes
// never pass through the client's memory, otherwise through one buffer per
// PUT in flight. The SHA-256 of the whole file is computed only when it
// can pay off: POST /uploads carries the CRC32C of the file's head (its
// first 8 MiB), and ferry answers instant_candidate when it holds verified
// content of that size and head. Then the file is hashed before any byte
// is sent and the SHA-256 declared: an instant file (or a proof of
// possession) ends the upload there. Otherwise ferry computes the SHA-256
// itself from the stored bytes, and the upload costs what a plain S3
// upload with CRC32Cs costs. A store without checksums gets Content-MD5
// per part instead.
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
		// One read covers the first part and the head.
		firstPart, head, err := firstCRC32Cs(r, size, partSize)
		if err != nil {
			return err
		}
		in := initRequest{FileName: opts.Name, Size: size, ContentType: opts.ContentType, SHA256: opts.SHA256,
			PartSize: partSize, Checksum: "CRC32C", Metadata: opts.Metadata,
			FirstPartCRC32C: crc32cB64(firstPart), HeadCRC32C: crc32cB64(head)}
		return c.withRetry(ctx, opts.tries(), "POST /uploads", func() (err error) {
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
	if fn := opts.Progress; fn != nil {
		opts.Progress = func(p Progress) {
			p.UploadID = res.UploadID
			fn(p)
		}
	}
	switch up.State {
	case "success":
		res.Instant, res.FileID = true, up.FileID
		return res, nil
	case "proof_required":
		got, err := c.prove(ctx, r, size, up.Challenge)
		if err != nil {
			return nil, err
		}
		res.Instant, res.FileID, res.UploadID = true, got.FileID, got.UploadID
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
	if up.InstantCandidate && res.SHA256 == "" && !opts.SkipHash {
		instant, err := c.hashAndDeclare(ctx, r, &up, opts, res)
		if err != nil || instant {
			return res, err
		}
	}
	var src source
	if f, ok := r.(*os.File); ok {
		src = newFileSource(f)
	}
	if src == nil {
		src = newBufferSource(r, up.PartSize, opts.Concurrency)
	}
	for round := 1; ; round++ {
		u := &uploader{c: c, r: r, src: src, up: up, opts: opts, res: res, checksums: up.Checksum == "CRC32C",
			sums: make(map[int]string, up.PartCount), etags: map[int]string{}}
		if err := u.transfer(ctx); err != nil {
			return res, err
		}
		err := u.complete(ctx)
		if !errors.Is(err, errRestarted) || round == 2 {
			return res, err
		}
		// The store lost the parts before ferry could merge them, and
		// ferry put the upload back to uploading: send it all again.
		if err := c.withRetry(ctx, opts.tries(), "GET /uploads/{id}", func() error {
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
	HeadCRC32C      string            `json:"head_crc32c,omitempty"`
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
	// InstantCandidate: ferry holds verified content of this size and
	// head, so the file's SHA-256 may make the upload instant.
	InstantCandidate bool `json:"instant_candidate"`
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
// range. It returns ferry's answer: the instant upload and its file.
func (c *Client) prove(ctx context.Context, r io.ReaderAt, size int64, ch *challenge) (*uploadJSON, error) {
	if ch == nil {
		return nil, errors.New("ferry: proof_required without a challenge")
	}
	nonce, err := hex.DecodeString(ch.Nonce)
	if err != nil || len(nonce) == 0 {
		return nil, errors.New("ferry: the challenge has no valid nonce")
	}
	digests := make([]string, len(ch.Ranges))
	for i, rg := range ch.Ranges {
		if rg.Offset < 0 || rg.Length < 0 || rg.Offset+rg.Length > size {
			return nil, fmt.Errorf("ferry: challenge range %d+%d is outside the file", rg.Offset, rg.Length)
		}
		h := sha256.New()
		h.Write(nonce)
		if _, err := io.Copy(h, io.NewSectionReader(r, rg.Offset, rg.Length)); err != nil {
			return nil, err
		}
		digests[i] = hex.EncodeToString(h.Sum(nil))
	}
	var out uploadJSON
	if _, err := c.call(ctx, http.MethodPost, "/uploads/proofs/"+ch.ID, map[string]any{"digests": digests}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// headLength is how much of a file its head CRC32C covers (ferry's
// upload.HeadLength): ferry keys verified content by size and head, and
// answers instant_candidate when a file's may be held.
const headLength = 8 << 20

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
	src       source // the part bodies: the file itself, or buffers read from r
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

// part is one part whose checksum is known; the sender opens its bytes
// from the source, and url is where it goes.
type part struct {
	n   int
	sum string
	url presignedURL
}

func (u *uploader) partRange(n int) (int64, int64) {
	off := int64(n-1) * u.up.PartSize
	return off, min(u.up.PartSize, u.up.Size-off)
}

// readAhead bounds how many parts the checksum read may be ahead of the
// senders: enough for a presign call to sign a large batch, few enough
// that the parts read ahead are still in the page cache when they are
// sent.
const readAhead = presignWindow

// transfer sends every part S3 does not hold with the right bytes. One
// read computes the parts' checksums, up to readAhead parts ahead of the
// senders, so that each presign call signs a batch of them; each sender
// then sends its part straight from the source.
func (u *uploader) transfer(ctx context.Context) error {
	held := map[int]partJSON{}
	for _, p := range u.up.Parts {
		held[p.PartNumber] = p
	}
	m := newMeter(u.opts.Progress, "upload", u.up.Size, 0)
	defer m.finish()
	g, gctx := errgroup.WithContext(ctx)
	ready := make(chan part, u.up.PartCount)
	ahead := make(chan struct{}, min(readAhead, u.up.PartCount))
	g.Go(func() error { return u.read(gctx, held, ready, ahead, m) })
	g.Go(func() error { return u.dispatch(gctx, ready, ahead, m) })
	return g.Wait()
}

// read is the checksum read of the file, in order. For each part it
// computes the part's checksum and folds the part into the whole file's
// CRC32C, and either counts the part as held (S3 lists it with the same
// checksum) or queues it to be sent. Each queued part holds a place in
// ahead until a sender takes it.
func (u *uploader) read(ctx context.Context, held map[int]partJSON, ready chan<- part, ahead chan struct{}, m *meter) error {
	defer close(ready)
	buf := make([]byte, sumChunk)
	for n := 1; n <= u.up.PartCount; n++ {
		select {
		case ahead <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		off, length := u.partRange(n)
		crc, sum, err := sumRange(u.r, off, length, buf, !u.checksums)
		if err != nil {
			return fmt.Errorf("ferry: read part %d: %w", n, err)
		}
		p := part{n: n}
		if u.checksums {
			p.sum = crc32cB64(crc)
		} else {
			p.sum = base64.StdEncoding.EncodeToString(sum[:])
		}
		u.mu.Lock()
		u.sums[n] = p.sum
		if n == 1 {
			u.fullCRC = crc
		} else {
			u.fullCRC = crc32cCombine(u.fullCRC, crc, length)
		}
		u.mu.Unlock()

		if h, ok := held[n]; ok && h.Size == length && u.holds(h, p.sum, sum) {
			<-ahead
			u.mu.Lock()
			u.etags[n] = h.ETag
			u.res.PartsSkipped++
			u.sent += length
			u.mu.Unlock()
			m.add(length)
			continue
		}
		ready <- p // sized for every part
	}
	return nil
}

// hashAndDeclare runs when ferry holds verified content of the file's size
// and head: it hashes the whole file (the "hash" phase) before sending a
// byte and declares the SHA-256. An instant answer, or a proof of
// possession, gives the file and ends the upload (true); otherwise the
// content differs after its head, and the upload goes on with its
// SHA-256 known.
func (c *Client) hashAndDeclare(ctx context.Context, r io.ReaderAt, up *uploadJSON, opts UploadOptions, res *UploadResult) (bool, error) {
	m := newMeter(opts.Progress, "hash", up.Size, 0)
	h := sha256.New()
	// 1 MiB reads: the hash, not the syscalls, should bound the pass.
	_, err := io.CopyBuffer(h, countingReader{io.NewSectionReader(r, 0, up.Size), m}, make([]byte, 1<<20))
	m.finish()
	if err != nil {
		return false, fmt.Errorf("ferry: read: %w", err)
	}
	res.SHA256 = hex.EncodeToString(h.Sum(nil))
	var out uploadJSON
	err = c.withRetry(ctx, opts.tries(), "POST /uploads/{id}/sha256", func() error {
		_, err := c.call(ctx, http.MethodPost, "/uploads/"+up.UploadID+"/sha256", map[string]string{"sha256": res.SHA256}, &out)
		return err
	})
	if err != nil {
		return false, err
	}
	switch out.State {
	case "success":
		// ferry aborted the running upload itself; the file is the
		// instant upload's.
		res.Instant, res.FileID, res.UploadID = true, out.FileID, out.UploadID
		return true, nil
	case "proof_required":
		got, err := c.prove(ctx, r, up.Size, out.Challenge)
		if err != nil {
			return false, err
		}
		res.Instant, res.FileID, res.UploadID = true, got.FileID, got.UploadID
		u := &uploader{c: c, up: *up}
		u.abort(ctx)
		return true, nil
	}
	*up = out
	return false, nil
}

// holds reports whether a part S3 lists is the local part: same CRC32C, or
// for uploads without checksums an ETag that is the local part's MD5. A
// PUT cut mid-way can leave a part of the right size with other bytes, so
// resume trusts nothing it has not checked.
func (u *uploader) holds(h partJSON, sum string, md5 [md5.Size]byte) bool {
	if u.checksums {
		return h.CRC32C == sum
	}
	return strings.Trim(h.ETag, `"`) == hex.EncodeToString(md5[:])
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

// dispatch presigns ready parts in batches and hands them to Concurrency
// senders, each part giving its place in ahead back as a sender takes it.
// It signs only when no signed part is left for a sender, and then every
// part the read has finished meanwhile (up to presignWindow), so batches
// grow while the senders are busy instead of one call per part read.
// Each batch waits for Concurrency parts, or for the end of the read:
// where the checksum read is slower than the PUTs (at the start, where
// they share its cores, or on a fast link) no part piles up while the
// senders work, and signing what was there cost a call per part read
// (seven for the first seven parts of a GiB). The senders lose nothing
// by the wait: they would be waiting for the read anyway.
func (u *uploader) dispatch(ctx context.Context, ready <-chan part, ahead <-chan struct{}, m *meter) error {
	g, ctx := errgroup.WithContext(ctx)
	work := make(chan part)
	g.Go(func() error {
		defer close(work)
		read := readParts{ch: ready}
		// Parts each batch waits for; never more than ahead lets the
		// read hold, or the wait would never end.
		want := min(u.opts.Concurrency, cap(ahead))
		var signed []part
		for {
			if len(signed) == 0 {
				if err := read.await(ctx, want); err != nil {
					return err
				}
				batch := read.take()
				if len(batch) == 0 {
					return nil // the read is done, and every part handed out
				}
				var err error
				if signed, err = u.sign(ctx, batch); err != nil {
					return err
				}
				continue
			}
			// A signed part waits for a sender; meanwhile the parts the read
			// finishes join the next batch.
			select {
			case work <- signed[0]:
				signed = signed[1:]
				<-ahead
			case p, ok := <-read.ch:
				read.add(p, ok)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	})
	for range u.opts.Concurrency {
		g.Go(func() error {
			for p := range work {
				if err := u.put(ctx, &p, m); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// readParts holds the parts the read has finished and that wait to be
// signed.
type readParts struct {
	ch      <-chan part // the read's parts; nil once it has ended
	pending []part
}

// add keeps p, or notes the end of the read when the channel is closed
// (ok false); a nil channel's case in a select never runs.
func (r *readParts) add(p part, ok bool) {
	if !ok {
		r.ch = nil
		return
	}
	r.pending = append(r.pending, p)
}

// await waits until want parts are pending or the read has ended, then
// takes without waiting whatever else the read has finished, up to
// presignWindow in all.
func (r *readParts) await(ctx context.Context, want int) error {
	for len(r.pending) < want && r.ch != nil {
		select {
		case p, ok := <-r.ch:
			r.add(p, ok)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for r.ch != nil && len(r.pending) < presignWindow {
		select {
		case p, ok := <-r.ch:
			r.add(p, ok)
		default:
			return nil
		}
	}
	return nil
}

// take removes and returns the next batch to sign.
func (r *readParts) take() []part {
	batch := r.pending[:min(len(r.pending), presignWindow)]
	r.pending = r.pending[len(batch):]
	return batch
}

// sign presigns batch with one call and returns its parts with their URLs.
func (u *uploader) sign(ctx context.Context, batch []part) ([]part, error) {
	nums := make([]int, len(batch))
	for i, p := range batch {
		nums[i] = p.n
	}
	urls, err := u.presign(ctx, nums)
	if err != nil {
		return nil, err
	}
	signed := make([]part, len(batch))
	for i, p := range batch {
		p.url = urls[p.n]
		signed[i] = p
	}
	return signed, nil
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
	err := u.c.withRetry(ctx, u.opts.tries(), "POST /uploads/{id}/presign", func() error {
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
// again when it has expired (S3 answers 403) or is about to. A refusal of
// the part's checksum (400 BadDigest) is a byte damaged on its way, worth
// another try, unless the file itself no longer has the checksum.
func (u *uploader) put(ctx context.Context, p *part, m *meter) error {
	var lastErr error
	var wait time.Duration
	off, length := u.partRange(p.n)
	for attempt := 1; attempt <= u.opts.Attempts; attempt++ {
		if attempt > 1 {
			if err := u.c.sleep(ctx, wait); err != nil {
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
		out := &partOut{m: m}
		etag, err := u.putOnce(ctx, p, off, length, out.seen)
		if err == nil {
			u.mu.Lock()
			u.etags[p.n] = etag
			u.res.PartsSent++
			u.sent += length
			u.mu.Unlock()
			m.sent(out.end(), length)
			return nil
		}
		m.sent(out.end(), 0)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		lastErr = err
		var se *s3Error
		if errors.As(err, &se) && se.status == http.StatusBadRequest && u.changed(p.n, p.sum) {
			return fmt.Errorf("%w (part %d)", errFileChanged, p.n)
		}
		if errors.As(err, &se) && se.status >= 400 && se.status < 500 &&
			se.status != http.StatusForbidden && se.status != http.StatusBadRequest &&
			se.status != http.StatusRequestTimeout && se.status != http.StatusTooManyRequests {
			return err // not going to change on retry
		}
		wait = u.opts.tries().failed(fmt.Sprintf("part %d", p.n), attempt, err)
	}
	return fmt.Errorf("ferry: part %d failed after %d attempts: %w", p.n, u.opts.Attempts, lastErr)
}

// changed reports whether part n of the file no longer has the checksum
// it was signed with.
func (u *uploader) changed(n int, sum string) bool {
	off, length := u.partRange(n)
	crc, h, err := sumRange(u.r, off, length, make([]byte, sumChunk), !u.checksums)
	if err != nil {
		return false // the next attempt reports the read
	}
	if u.checksums {
		return crc32cB64(crc) != sum
	}
	return base64.StdEncoding.EncodeToString(h[:]) != sum
}

// sumChunk is the buffer through which the client reads the file for its
// checksums. The parts' bytes go to S3 from the file itself, so the read
// only needs the digests: a small buffer, reused, stays in the CPU's cache
// and costs no fresh memory. A part-sized one (8 MiB and more) was
// allocated twice before the first PUT, and on a VM that hands freed
// memory back to its host each fresh page faults there: about 3 s per GiB
// on this project's 2-core machines.
const sumChunk = 256 << 10

// sumRange reads length bytes of r from off through buf and returns their
// CRC32C and, with withMD5, their MD5.
func sumRange(r io.ReaderAt, off, length int64, buf []byte, withMD5 bool) (uint32, [md5.Size]byte, error) {
	var crc uint32
	var h hash.Hash
	if withMD5 {
		h = md5.New()
	}
	for done := int64(0); done < length; {
		b := buf[:min(int64(len(buf)), length-done)]
		if n, err := r.ReadAt(b, off+done); n < len(b) {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // the file shrank
			}
			return 0, [md5.Size]byte{}, err
		}
		crc = crc32.Update(crc, castagnoli, b)
		if h != nil {
			h.Write(b)
		}
		done += int64(len(b))
	}
	var sum [md5.Size]byte
	if h != nil {
		h.Sum(sum[:0])
	}
	return crc, sum, nil
}

// firstCRC32Cs returns the CRC32Cs of the file's first part and of its
// head (its first headLength bytes), read once.
func firstCRC32Cs(r io.ReaderAt, size, partSize int64) (firstPart, head uint32, err error) {
	partLen, headLen := min(partSize, size), min(int64(headLength), size)
	short, long := min(partLen, headLen), max(partLen, headLen)
	buf := make([]byte, sumChunk)
	a, _, err := sumRange(r, 0, short, buf, false)
	if err != nil {
		return 0, 0, fmt.Errorf("ferry: read: %w", err)
	}
	b, _, err := sumRange(r, short, long-short, buf, false)
	if err != nil {
		return 0, 0, fmt.Errorf("ferry: read: %w", err)
	}
	whole := crc32cCombine(a, b, long-short)
	if partLen == short {
		return a, whole, nil
	}
	return whole, a, nil
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

// partOut counts, for the meter, how much of one PUT's body has gone out.
// It takes positions, so a body the transport sends again from the start
// counts only past where the first try got, and nothing once the PUT is
// over (the transport may still be writing when S3 has answered).
type partOut struct {
	mu   sync.Mutex
	m    *meter
	at   int64
	over bool
}

func (o *partOut) seen(pos int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.over && pos > o.at {
		o.m.sending(pos - o.at)
		o.at = pos
	}
}

// end stops the count and returns it.
func (o *partOut) end() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.over = true
	return o.at
}

func (u *uploader) putOnce(ctx context.Context, p *part, off, length int64, sent func(int64)) (string, error) {
	if u.opts.Progress == nil {
		sent = nil // nobody watches: no count to keep
	}
	body, done, err := u.src.open(off, length, sent)
	if err != nil {
		return "", err
	}
	defer done()
	method := p.url.Method
	if method == "" {
		method = http.MethodPut
	}
	req, err := http.NewRequestWithContext(ctx, method, p.url.URL, body)
	if err != nil {
		return "", redact(err)
	}
	req.ContentLength = length
	if bp, ok := body.(*bufferPart); ok {
		req.GetBody = bp.again
	}
	for k, v := range p.url.Headers {
		req.Header.Set(k, v)
	}
	resp, err := u.c.data.Do(req)
	if err != nil {
		return "", redact(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
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
		err := u.c.withRetry(ctx, u.opts.tries(), "POST /uploads/{id}/complete", func() error {
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

// resend sends parts again from the file, with the checksums the first
// read gave them.
func (u *uploader) resend(ctx context.Context, nums []int) error {
	m := newMeter(u.opts.Progress, "upload", u.up.Size, u.up.Size-int64(len(nums))*u.up.PartSize)
	defer m.finish()
	ready := make(chan part, len(nums))
	ahead := make(chan struct{}, len(nums))
	for _, n := range nums {
		u.mu.Lock()
		delete(u.etags, n)
		sum := u.sums[n]
		u.mu.Unlock()
		ahead <- struct{}{}
		ready <- part{n: n, sum: sum}
	}
	close(ready)
	return u.dispatch(ctx, ready, ahead, m)
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
		err := u.c.withRetry(ctx, u.opts.tries(), "GET /uploads/{id}?wait=30s", func() error {
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
