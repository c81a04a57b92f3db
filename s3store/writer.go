package s3store

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"errors"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// writer streams an object of unknown size into S3 with constant memory:
// it fills one part buffer at a time and uploads it as a multipart part
// while the next fills. An object smaller than one part is written with a
// single PutObject on Close. Nothing is visible under the key until Close
// succeeds; Abort (or a failed Close) discards everything.
type writer struct {
	s           *Store
	ctx         context.Context
	key         string
	contentType string
	partSize    int

	buf      *bytes.Buffer
	spare    *bytes.Buffer
	uploadID string
	parts    []CompletedPart
	pending  chan partResult // at most one part in flight
	written  int64
	err      error
	closed   bool
}

type partResult struct {
	part CompletedPart
	err  error
}

// MinPartSize is S3's minimum size for every part but the last.
const MinPartSize = 5 << 20

// WriteObject writes an object of unknown size to key: fill writes its
// bytes, and the object becomes visible under key only if fill returns nil
// and the upload completes; otherwise everything written is discarded
// (aborted) and the error returned. Memory is about two part buffers of
// partSize (clamped to at least MinPartSize): an object smaller than one
// part is one PutObject, a larger one a multipart upload whose next part
// fills while the last is sent. It returns the bytes written.
func (s *Store) WriteObject(ctx context.Context, key, contentType string, partSize int, fill func(io.Writer) error) (n int64, err error) {
	w := s.newWriter(ctx, key, contentType, partSize)
	defer func() {
		if p := recover(); p != nil {
			w.Abort()
			panic(p)
		}
	}()
	if err := fill(w); err != nil {
		w.Abort()
		return w.written, err
	}
	return w.written, w.Close()
}

func (s *Store) newWriter(ctx context.Context, key, contentType string, partSize int) *writer {
	if partSize < MinPartSize {
		partSize = MinPartSize
	}
	return &writer{
		s: s, ctx: ctx, key: key, contentType: contentType, partSize: partSize,
		buf: bytes.NewBuffer(make([]byte, 0, partSize)), spare: bytes.NewBuffer(make([]byte, 0, partSize)),
	}
}

// Write implements io.Writer.
func (w *writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.closed {
		return 0, errors.New("s3store: write after close")
	}
	n := 0
	for len(p) > 0 {
		room := w.partSize - w.buf.Len()
		chunk := p
		if len(chunk) > room {
			chunk = p[:room]
		}
		w.buf.Write(chunk)
		n += len(chunk)
		p = p[len(chunk):]
		if w.buf.Len() == w.partSize {
			if err := w.flushPart(); err != nil {
				w.err = err
				return n, err
			}
		}
	}
	w.written += int64(n)
	return n, nil
}

// flushPart sends the full buffer as the next part, in the background, after
// waiting for the previous part so at most one is in flight.
func (w *writer) flushPart() error {
	if w.uploadID == "" {
		id, err := w.s.CreateMultipart(w.ctx, w.key, MultipartOptions{ContentType: w.contentType})
		if err != nil {
			return err
		}
		w.uploadID = id
	}
	if err := w.wait(); err != nil {
		return err
	}
	num := int32(len(w.parts) + 1)
	data := w.buf
	w.buf, w.spare = w.spare, data
	w.buf.Reset()
	w.pending = make(chan partResult, 1)
	go func(ch chan partResult) {
		ch <- w.uploadPart(num, data.Bytes())
	}(w.pending)
	return nil
}

func (w *writer) uploadPart(num int32, data []byte) partResult {
	sum := md5.Sum(data)
	ctx, cancel := w.s.transfer(w.ctx)
	defer cancel()
	out, err := w.s.api.UploadPart(ctx, &s3.UploadPartInput{
		Bucket: &w.s.bucket, Key: &w.key, UploadId: &w.uploadID, PartNumber: aws.Int32(num),
		Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))),
		ContentMD5: aws.String(base64.StdEncoding.EncodeToString(sum[:])),
	})
	if err != nil {
		return partResult{err: translate("UploadPart", err)}
	}
	return partResult{part: CompletedPart{Number: num, ETag: aws.ToString(out.ETag)}}
}

func (w *writer) wait() error {
	if w.pending == nil {
		return nil
	}
	r := <-w.pending
	w.pending = nil
	if r.err != nil {
		return r.err
	}
	w.parts = append(w.parts, r.part)
	return nil
}

// Written is the number of bytes accepted so far.
func (w *writer) Written() int64 { return w.written }

// Close uploads what remains and makes the object visible.
func (w *writer) Close() error {
	if w.closed {
		return w.err
	}
	w.closed = true
	if w.err != nil {
		w.abort()
		return w.err
	}
	if w.uploadID == "" {
		// Small object: one request, no multipart bookkeeping.
		w.err = w.s.Put(w.ctx, w.key, bytes.NewReader(w.buf.Bytes()), int64(w.buf.Len()), w.contentType)
		return w.err
	}
	if w.buf.Len() > 0 {
		if err := w.flushPart(); err != nil {
			w.err = err
			w.abort()
			return err
		}
	}
	if err := w.wait(); err != nil {
		w.err = err
		w.abort()
		return err
	}
	if _, err := w.s.CompleteMultipart(w.ctx, w.key, w.uploadID, w.parts, ""); err != nil {
		w.err = fmt.Errorf("s3store: complete %s: %w", w.key, err)
		w.abort()
		return w.err
	}
	return nil
}

// Abort discards the upload. It is safe to call after Close.
func (w *writer) Abort() error {
	if !w.closed {
		w.closed = true
		w.err = errors.New("s3store: writer aborted")
	}
	return w.abort()
}

func (w *writer) abort() error {
	if w.pending != nil {
		<-w.pending
		w.pending = nil
	}
	if w.uploadID == "" {
		return nil
	}
	ctx := context.WithoutCancel(w.ctx)
	return w.s.AbortMultipart(ctx, w.key, w.uploadID)
}

var _ io.WriteCloser = (*writer)(nil)
