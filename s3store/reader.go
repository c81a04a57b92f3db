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
	etag string // when set, every GET carries If-Match: etag

	off     int64         // logical position
	body    io.ReadCloser // open ranged GET, positioned at bodyAt
	bodyAt  int64
	bodyEnd int64 // where the open GET ends (exclusive)
	spans   [][2]int64
	gets    int   // ranged GETs issued, for tests and metrics
	spliced int64 // bytes SendTo moved socket to socket
	err     error // the last GET's failure, for callers whose reader (ServeContent) drops it
}

// Open returns a lazy reader over key, which must be size bytes long; its
// dynamic type is *ObjectReader. ctx bounds every GET the reader issues.
// When etag is set every GET is conditional on the object's ETag still
// being etag, so bytes of an object that changed since ferry recorded it
// are never streamed: the read fails with ErrPreconditionFailed instead.
// Close it to release a pending body.
func (s *Store) Open(ctx context.Context, key string, size int64, etag string) io.ReadSeekCloser {
	return &ObjectReader{s: s, ctx: ctx, key: key, size: size, etag: etag}
}

// Expect tells the reader that the bytes [start, start+length) will be read
// after a seek to start. A GET that begins inside an expected span then asks
// S3 for exactly the rest of that span instead of the rest of the object, so
// a range request neither pulls bytes nobody reads nor has to drop its
// connection to S3 when it ends. Call it before reading; spans may not
// overlap.
func (r *ObjectReader) Expect(start, length int64) {
	if length > 0 && start >= 0 && start < r.size {
		r.spans = append(r.spans, [2]int64{start, min(start+length, r.size)})
	}
}

// getEnd is where a GET starting at off should stop.
func (r *ObjectReader) getEnd(off int64) int64 {
	for _, sp := range r.spans {
		if off >= sp[0] && off < sp[1] {
			return sp[1]
		}
	}
	return r.size
}

// Read implements io.Reader.
func (r *ObjectReader) Read(p []byte) (int, error) {
	if r.off >= r.size {
		return 0, io.EOF
	}
	if r.body != nil && (r.bodyAt != r.off || r.off >= r.bodyEnd) {
		r.body.Close()
		r.body = nil
	}
	if r.body == nil {
		end := r.getEnd(r.off)
		body, err := r.get(end)
		if err != nil {
			r.err = err
			return 0, err
		}
		r.body, r.bodyAt, r.bodyEnd = body, r.off, end
		r.gets++
	}
	if rem := r.bodyEnd - r.off; int64(len(p)) > rem {
		p = p[:rem]
	}
	n, err := r.body.Read(p)
	r.off += int64(n)
	r.bodyAt += int64(n)
	if errors.Is(err, io.EOF) {
		r.body.Close()
		r.body = nil
		if r.off < r.bodyEnd {
			// The object is shorter than the database says: never pad
			// or splice, fail loudly.
			return n, fmt.Errorf("s3store: %s ended at %d of %d bytes: %w", r.key, r.off, r.size, io.ErrUnexpectedEOF)
		}
		if n > 0 || r.off < r.size {
			// The end of one span is not the end of the object.
			err = nil
		}
	}
	return n, err
}

// get issues the GET of [r.off, end): on a connection of the reader's own
// where the store allows it and the body is large enough to gain from
// splicing (splice.go), else through the SDK.
func (r *ObjectReader) get(end int64) (io.ReadCloser, error) {
	if r.s.direct && end-r.off >= directMin {
		body, err := r.s.openDirect(r.ctx, r.key, r.etag, r.off, end-r.off)
		if body != nil || err != nil {
			return body, err
		}
	}
	length := int64(-1)
	if end < r.size {
		length = end - r.off
	}
	return r.s.getRange(r.ctx, r.key, r.etag, r.off, length)
}

// SendTo writes the next n bytes of the object to w and returns how many
// it wrote; fewer than n come with an error (io.EOF at the object's end),
// as with io.CopyN. When w can take a socket's bytes itself (its ReadFrom
// splices, as net/http's response writer over plain TCP does) and the GET
// went over a connection of the reader's own, the bytes move from S3's
// socket to w's inside the kernel; otherwise they are copied through buf.
// w must be the innermost writer of its connection: no wrapper above it
// may hold bytes back, or they would come after the spliced ones.
func (r *ObjectReader) SendTo(w io.Writer, n int64, buf []byte) (int64, error) {
	rf, canSplice := w.(io.ReaderFrom)
	var sent int64
	for sent < n {
		if _, err := r.Read(nil); err != nil { // opens the GET at r.off
			return sent, err
		}
		db, direct := r.body.(*directBody)
		if !direct || !canSplice {
			m, err := io.CopyBuffer(writerOnly{w}, io.LimitReader(readerOnly{r}, n-sent), buf)
			sent += m
			if err == nil && sent < n {
				err = io.EOF
			}
			return sent, err
		}
		before := db.spliced
		m, err := db.sendTo(w, rf, min(n-sent, r.bodyEnd-r.off))
		sent += m
		r.off += m
		r.bodyAt += m
		r.spliced += db.spliced - before
		if err != nil {
			return sent, err
		}
		if r.off >= r.bodyEnd {
			r.body.Close()
			r.body = nil
		}
	}
	return sent, nil
}

// writerOnly and readerOnly hide ReadFrom and WriteTo, so that a copy
// between them runs through its buffer.
type writerOnly struct{ io.Writer }
type readerOnly struct{ io.Reader }

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

// Err returns the error of the last GET that failed to start, or nil.
func (r *ObjectReader) Err() error { return r.err }

// GETs reports how many ranged GETs the reader has issued.
func (r *ObjectReader) GETs() int { return r.gets }

// Spliced reports how many bytes SendTo moved from socket to socket.
func (r *ObjectReader) Spliced() int64 { return r.spliced }
