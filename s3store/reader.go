package s3store

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// ObjectReader is an io.ReadSeeker over an object whose size is already
// known (from ferry's database). Seeking costs nothing; the first Read after
// a seek issues one ranged GET from that offset to the end, and following
// Reads stream from it. So http.ServeContent, which seeks to the end to learn
// the size and then to the start of each range, makes exactly one S3 request
// per range and none for HEAD or 304 answers.
type ObjectReader struct {
	s    *Store
	ctx  context.Context
	key  string
	size int64

	off    int64         // logical position
	body   io.ReadCloser // open ranged GET, positioned at bodyOff
	bodyAt int64
	gets   int // ranged GETs issued, for tests and metrics
}

// Open returns a lazy reader over key, which must be size bytes long. ctx
// bounds every GET the reader issues. Close it to release a pending body.
func (s *Store) Open(ctx context.Context, key string, size int64) *ObjectReader {
	return &ObjectReader{s: s, ctx: ctx, key: key, size: size}
}

// Read implements io.Reader.
func (r *ObjectReader) Read(p []byte) (int, error) {
	if r.off >= r.size {
		return 0, io.EOF
	}
	if r.body != nil && r.bodyAt != r.off {
		r.body.Close()
		r.body = nil
	}
	if r.body == nil {
		body, err := r.s.GetRange(r.ctx, r.key, r.off, -1)
		if err != nil {
			return 0, err
		}
		r.body, r.bodyAt = body, r.off
		r.gets++
	}
	if rem := r.size - r.off; int64(len(p)) > rem {
		p = p[:rem]
	}
	n, err := r.body.Read(p)
	r.off += int64(n)
	r.bodyAt += int64(n)
	if errors.Is(err, io.EOF) {
		r.body.Close()
		r.body = nil
		if r.off < r.size {
			// The object is shorter than the database says: never pad
			// or splice, fail loudly.
			return n, fmt.Errorf("s3store: %s ended at %d of %d bytes: %w", r.key, r.off, r.size, io.ErrUnexpectedEOF)
		}
		if n > 0 {
			err = nil
		}
	}
	return n, err
}

// Seek implements io.Seeker. It never contacts S3.
func (r *ObjectReader) Seek(offset int64, whence int) (int64, error) {
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = r.off + offset
	case io.SeekEnd:
		abs = r.size + offset
	default:
		return 0, errors.New("s3store: invalid whence")
	}
	if abs < 0 {
		return 0, errors.New("s3store: negative position")
	}
	r.off = abs
	return abs, nil
}

// Close releases any open GET.
func (r *ObjectReader) Close() error {
	if r.body != nil {
		err := r.body.Close()
		r.body = nil
		return err
	}
	return nil
}

// GETs reports how many ranged GETs the reader has issued.
func (r *ObjectReader) GETs() int { return r.gets }
