package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"sync/atomic"
	"time"
)

// DefaultIdleTimeout is how long a part PUT or a download may go without
// moving a byte before the client gives its connection up and tries again
// on a new one (WithIdleTimeout). It is botocore's socket timeout, which
// the AWS CLI lives with: long enough for any store that is working, short
// against what a dead connection otherwise costs (Linux retransmits into
// a connection that died without a reset for about 15 minutes, and waits
// for a frozen server that still acknowledges with a zero window for
// ever).
const DefaultIdleTimeout = 60 * time.Second

// sendStep bounds how much of a body one sendfile(2) may send under one
// deadline: the idle timeout then fails a part that moves less than
// sendStep in it (4 KiB/s at the default), not one that takes longer than
// the timeout in all. At 256 KiB a GiB costs 4,096 calls, which the kernel
// would mostly make anyway as the socket buffer drains.
const sendStep = 256 << 10

// dataTransport is the transport for part PUTs and downloads: no overall
// timeout (a large part or file on a slow link takes what it takes), but
// every connection bounded by idle unless it is 0 (see idleConn), which
// also bounds the wait for an answer once a request is sent.
func dataTransport(idle time.Duration) *http.Transport {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &idleConn{Conn: c, idle: idle}, nil
	}
	return &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         dial,
		ForceAttemptHTTP2:   true, // as without a dial function of our own
		MaxIdleConnsPerHost: 64,
		// Under the default idle timeout, so that a pooled connection is
		// closed by the pool before its read deadline fails it.
		IdleConnTimeout:     30 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
	}
}

// idleConn fails a read or write that moves nothing for idle, the way a
// socket timeout does: a store that stops reading a part's body (frozen,
// or a connection that died without a reset), or stops answering, costs
// idle and a retry on a new connection instead of the upload. A write
// also pushes the read deadline on, because over HTTP/1 the answer the
// transport waits for cannot come while the request is still moving; the
// wait for it starts when the request is sent. Only time spent inside a
// call counts, so a download written slowly to disk is not a stall. With
// idle 0 there is no deadline, and the connection only sends part bodies
// in steps, for their progress.
type idleConn struct {
	net.Conn
	idle  time.Duration
	stall atomic.Pointer[stallError] // the first deadline that ran out
}

// deadline is the deadline of a call starting now.
func (c *idleConn) deadline() time.Time {
	if c.idle <= 0 {
		return time.Time{}
	}
	return time.Now().Add(c.idle)
}

func (c *idleConn) Read(b []byte) (int, error) {
	c.Conn.SetReadDeadline(c.deadline())
	n, err := c.Conn.Read(b)
	return n, c.stalled(err)
}

func (c *idleConn) Write(b []byte) (int, error) {
	c.Conn.SetDeadline(c.deadline())
	n, err := c.Conn.Write(b)
	return n, c.stalled(err)
}

// stalled names a deadline that ran out for what it means here, so that a
// retry notice or a final error says why the connection was given up
// instead of a bare "i/o timeout". Every later failure on the connection
// gets the same name: a read and a write share the deadline, and when the
// transport's reader (which waits for an answer while the body goes out)
// wakes first, it closes the connection, and the write it cut short
// fails with "use of closed network connection" instead.
func (c *idleConn) stalled(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		c.stall.CompareAndSwap(nil, &stallError{idle: c.idle, err: err})
	}
	if s := c.stall.Load(); s != nil {
		return s
	}
	return err
}

// stallError is a read or write that moved nothing for the idle timeout.
// It stays a timeout (a net.Error) and unwraps to the deadline's error.
type stallError struct {
	idle time.Duration
	err  error
}

func (e *stallError) Error() string   { return fmt.Sprintf("nothing moved for %s (%v)", e.idle, e.err) }
func (e *stallError) Unwrap() error   { return e.err }
func (e *stallError) Timeout() bool   { return true }
func (e *stallError) Temporary() bool { return true }

// ReadFrom keeps the connection's own ReadFrom, which is how a part of a
// file goes out with sendfile(2) (see fileSource), and gives each
// sendStep of it a fresh deadline. After each step a part body reports
// how far it has got: sendfile moves it on without a Read.
func (c *idleConn) ReadFrom(r io.Reader) (int64, error) {
	rf, ok := c.Conn.(io.ReaderFrom)
	if !ok {
		return io.Copy(writerOnly{c}, r)
	}
	left := int64(-1) // unknown: up to r's end
	if lr, ok := r.(*io.LimitedReader); ok {
		left, r = lr.N, lr.R
		defer func() { lr.N = left }()
	}
	var total int64
	for left != 0 {
		step := &io.LimitedReader{R: r, N: sendStep}
		if left > 0 {
			step.N = min(left, sendStep)
		}
		want := step.N
		c.Conn.SetDeadline(c.deadline())
		n, err := rf.ReadFrom(step)
		if s, ok := r.(sentReporter); ok {
			s.reportSent()
		}
		total += n
		if left > 0 {
			left -= n
		}
		if err != nil || n < want {
			return total, c.stalled(err) // failed, or r ended
		}
	}
	return total, nil
}

// writerOnly hides idleConn's ReadFrom from io.Copy, which would call it
// again.
type writerOnly struct{ io.Writer }

// redact cuts the query off the URL that a failed request's error names.
// A presigned part URL carries its signature there, and so does a ferry
// download link: either lets whoever reads it write that part or fetch
// that file until it expires. Errors end up in terminals, logs and CI
// output, so they name the host and path and leave the credential out.
func redact(err error) error {
	var ue *neturl.Error
	if !errors.As(err, &ue) {
		return err
	}
	if u, perr := neturl.Parse(ue.URL); perr == nil && (u.RawQuery != "" || u.User != nil || u.Fragment != "") {
		u.RawQuery, u.Fragment, u.User = "", "", nil
		ue.URL = u.String() + "?…"
	} else if perr != nil {
		ue.URL = "(a URL that does not parse)"
	}
	return err
}
