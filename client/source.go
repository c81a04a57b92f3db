package client

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"syscall"
)

// source hands the senders the bytes of one part as a PUT body. The
// checksums come from an earlier read of the same bytes; S3 checks the
// body against the checksum signed into the URL, so bytes that changed in
// between are refused, never stored.
type source interface {
	// open returns part [off, off+length) as a body, and a function to
	// call once the PUT is done with it. The body calls sent, if not nil,
	// with how much of it has gone out so far: a position in the part,
	// not an increment (see sentReporter).
	open(off, length int64, sent func(int64)) (io.Reader, func(), error)
}

// sentReporter is a part body that tells its sent function how far it
// has got. A body read with Read does so itself; one sent by sendfile(2)
// moves on inside the kernel, and the connection asks it after each
// sendStep (idleConn.ReadFrom).
type sentReporter interface{ reportSent() }

// fileSource sends parts of a file with sendfile(2) where the platform has
// it: net/http copies a body that exposes its file descriptor
// (syscall.Conn) from the page cache to the socket in the kernel, so part
// bytes are never copied through the client's memory. Each body is its
// own open file description, as sendfile reads from, and moves, the file
// position.
type fileSource struct {
	reopen func() (*os.File, error)
}

// newFileSource returns a source for f, or nil when f cannot be opened
// again as the same file (then parts are read into buffers).
func newFileSource(f *os.File) source {
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return nil
	}
	// On Linux, /proc/self/fd opens the very file f has open, even if it
	// was renamed since; elsewhere the name it was opened by.
	name := f.Name()
	if runtime.GOOS == "linux" {
		name = "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
	}
	reopen := func() (*os.File, error) {
		g, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		if gs, err := g.Stat(); err != nil || !os.SameFile(st, gs) {
			g.Close()
			return nil, errors.New("ferry: the file was replaced while it was being uploaded")
		}
		return g, nil
	}
	g, err := reopen()
	if err != nil {
		return nil
	}
	g.Close()
	return &fileSource{reopen: reopen}
}

func (s *fileSource) open(off, length int64, sent func(int64)) (io.Reader, func(), error) {
	f, err := s.reopen()
	if err != nil {
		return nil, nil, fmt.Errorf("ferry: read: %w", err)
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("ferry: read: %w", err)
	}
	return &filePart{f: f, start: off, end: off + length, sent: sent}, func() { f.Close() }, nil
}

// filePart is a part of a file read from its file position up to end.
// net/http wraps it in an io.LimitedReader of the part's length and hands
// it to the connection, which finds the descriptor through SyscallConn and
// sends the part with sendfile(2); Read serves any other path, and the
// position tells it how much was sent either way.
type filePart struct {
	f          *os.File
	start, end int64
	sent       func(int64)
}

func (p *filePart) Read(b []byte) (int, error) {
	pos, err := p.f.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0, err
	}
	if pos >= p.end {
		return 0, io.EOF
	}
	if left := p.end - pos; int64(len(b)) > left {
		b = b[:left]
	}
	n, err := p.f.Read(b)
	if p.sent != nil {
		p.sent(pos + int64(n) - p.start)
	}
	return n, err
}

func (p *filePart) reportSent() {
	if p.sent == nil {
		return
	}
	if pos, err := p.f.Seek(0, io.SeekCurrent); err == nil {
		p.sent(pos - p.start)
	}
}

func (p *filePart) SyscallConn() (syscall.RawConn, error) { return p.f.SyscallConn() }

// Close makes filePart an io.ReadCloser, which net/http takes as the
// request body as it is: a plain io.Reader it would wrap in a NopCloser,
// which hides SyscallConn and with it sendfile. The file is closed by the
// function open returned, once the PUT is done.
func (p *filePart) Close() error { return nil }

// bufferSource reads parts into a pool of part-sized buffers, one per PUT
// in flight: for readers that are not files.
type bufferSource struct {
	r    io.ReaderAt
	pool chan []byte
}

func newBufferSource(r io.ReaderAt, partSize int64, buffers int) *bufferSource {
	pool := make(chan []byte, buffers)
	for range buffers {
		pool <- make([]byte, partSize)
	}
	return &bufferSource{r: r, pool: pool}
}

func (s *bufferSource) open(off, length int64, sent func(int64)) (io.Reader, func(), error) {
	b := <-s.pool
	release := func() { s.pool <- b[:cap(b)] }
	b = b[:length]
	if _, err := s.r.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		release()
		return nil, nil, fmt.Errorf("ferry: read: %w", err)
	}
	if sent == nil {
		return bytes.NewReader(b), release, nil
	}
	return &bufferPart{b: b, r: bytes.NewReader(b), sent: sent}, release, nil
}

// bufferPart is a part in a buffer that reports how much of it was read.
type bufferPart struct {
	b    []byte
	r    *bytes.Reader
	sent func(int64)
}

func (p *bufferPart) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.reportSent()
	return n, err
}

func (p *bufferPart) reportSent() { p.sent(p.r.Size() - int64(p.r.Len())) }

// again is the body's GetBody: the same bytes from the start, for the
// transport to send again on a new connection when the one it chose had
// died before the request got out, as it does for a bytes.Reader. What
// the first try sent counts once: sent takes positions, not increments.
func (p *bufferPart) again() (io.ReadCloser, error) {
	return io.NopCloser(&bufferPart{b: p.b, r: bytes.NewReader(p.b), sent: p.sent}), nil
}
