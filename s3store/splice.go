package s3store

import (
	"bufio"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// A download proxy copies every byte from S3's socket to the client's.
// Through the SDK's body that is two copies across the user/kernel
// boundary per byte, and most of the proxy's CPU. Where the store is
// reached over plain HTTP (S3-compatible servers inside a private network,
// as ferry's own default), ObjectReader instead sends its GETs on a TCP
// connection of its own, signed by the SDK's presigner and written and
// parsed by net/http, so that SendTo can hand the connection to the
// client's (net/http's ReadFrom, then splice(2)) and the body moves from
// socket to socket inside the kernel.
//
// The connection is not reused: each GET dials one, which on a private
// network costs less than a millisecond, and only GETs of at least
// directMin bytes go this way. A 4xx answer (a missing object, a 412 for a
// changed one) is translated like the SDK's errors; anything else that is
// not a 200 or 206 with a Content-Length (a 5xx, a chunked answer), or a
// connection that fails before its answer, is asked again through the
// SDK, with its retries.

// directGets reports whether GETs may go over a connection of the
// Store's own: the endpoint is plain HTTP, reached without an HTTP proxy
// (HTTP_PROXY, which the SDK's transport honours), and no Config.API
// replaces the SDK's client (a wrapper that injects faults must see every
// call).
func directGets(cfg Config) bool {
	u, err := url.Parse(cfg.Endpoint)
	if cfg.API != nil || err != nil || u.Scheme != "http" || u.Host == "" {
		return false
	}
	proxy, err := http.ProxyFromEnvironment(&http.Request{URL: u})
	return err == nil && proxy == nil
}

// directMin is the smallest GET sent on a connection of its own. Below it
// the copy splicing saves is worth less than the connection a dial costs
// (a round trip, and a socket in TIME_WAIT on one side), and the SDK's
// pooled connections serve the many small ranges a segmented client asks
// for.
const directMin = 4 << 20

// spliceStep is how much one ReadFrom of SendTo may move. Each step
// starts with a fresh idle deadline on S3's socket, and a step that ends
// on that deadline after moving bytes was slowed by the client, not by
// S3, so the copy goes on; only a step that moves nothing is a stall.
const spliceStep = 4 << 20

// openDirect issues a ranged GET (length bytes from offset, length > 0)
// on a connection of its own and returns its body, or nil when the answer
// is not one SendTo can stream and the SDK should ask again (nil error),
// or an outage when the store gives no answer within the first-byte
// timeout.
func (s *Store) openDirect(ctx context.Context, key, ifMatch string, offset, length int64) (*directBody, error) {
	rng := fmt.Sprintf("bytes=%d-%d", offset, offset+length-1)
	in := &s3.GetObjectInput{Bucket: &s.bucket, Key: &key, Range: &rng}
	if ifMatch != "" {
		in.IfMatch = &ifMatch
	}
	signed, err := s.presignInternal.PresignGetObject(ctx, in, func(o *s3.PresignOptions) { o.Expires = 15 * time.Minute })
	if err != nil {
		return nil, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, signed.URL, nil)
	if err != nil {
		return nil, nil
	}
	for k, vs := range signed.SignedHeader {
		if http.CanonicalHeaderKey(k) != "Host" {
			req.Header[http.CanonicalHeaderKey(k)] = vs
		}
	}
	req.Close = true
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	start := time.Now()
	// Dialed like the SDK's connections, and tracked with them, so that
	// Store.Close ends this GET too (conns.go).
	c, err := s.conns.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil // the SDK's GET reports the outage, with its retries
	}
	tracked, ok := c.(*trackedConn)
	if !ok {
		c.Close()
		return nil, nil
	}
	conn := tracked.TCPConn // what splice(2) needs to see
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	fail := func() { stop(); tracked.Close() }
	conn.SetDeadline(time.Now().Add(s.firstByte))
	br := bufio.NewReaderSize(conn, 16<<10)
	if err := req.Write(conn); err != nil {
		fail()
		s.metrics.observe("GetObject", start, 0)
		return nil, s.directErr(ctx, err)
	}
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		fail()
		s.metrics.observe("GetObject", start, 0)
		return nil, s.directErr(ctx, err)
	}
	s.metrics.observe("GetObject", start, resp.StatusCode)
	if resp.StatusCode >= 400 && resp.StatusCode < 500 {
		// The object is missing or changed, say: one answer is enough.
		err := answerErr(resp)
		fail()
		return nil, err
	}
	conn.SetDeadline(time.Time{})
	if (resp.StatusCode != http.StatusPartialContent && resp.StatusCode != http.StatusOK) ||
		resp.ContentLength != length || len(resp.TransferEncoding) > 0 {
		// A 5xx, which the SDK's GET retries, or a body SendTo could not
		// count.
		fail()
		return nil, nil
	}
	return &directBody{conn: tracked, br: br, left: length, idle: s.idle, ctx: ctx, stop: stop}, nil
}

// answerErr translates a 4xx answer to a direct GET as translate does
// the SDK's errors: by the S3 error code in its XML body, else by status.
func answerErr(resp *http.Response) error {
	var doc struct{ Code, Message string }
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = xml.Unmarshal(b, &doc)
	return translate("GetObject", &smithyhttp.ResponseError{
		Response: &smithyhttp.Response{Response: resp},
		Err:      &smithy.GenericAPIError{Code: doc.Code, Message: doc.Message},
	})
}

// directErr is the error of a direct GET whose answer did not come: an
// outage when the first-byte bound ran out, the context's error when the
// caller went away. Any other failure (the store closed the connection,
// say) is left to the SDK's GET to report (nil).
func (s *Store) directErr(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("s3 GetObject: %w", context.Cause(ctx))
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("s3 GetObject: %w (%w)", ErrUnavailable, errFirstByte)
	}
	return nil
}

// directBody is the body of a direct GET: the bytes the header read
// buffered, then the connection itself.
type directBody struct {
	conn *trackedConn // closed through the Store's tracker (conns.go)
	br   *bufio.Reader
	left int64 // body bytes not read yet, buffered ones included
	// spliced counts the bytes sendTo moved socket to socket, not those
	// the header read had buffered.
	spliced int64
	idle    time.Duration
	ctx     context.Context
	stop    func() bool // stops the context's watch of the connection
}

// Read reads the body; like idleBody, it fails when S3 sends nothing for
// the idle timeout while it waits.
func (b *directBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	b.conn.SetReadDeadline(time.Now().Add(b.idle))
	n, err := b.br.Read(p)
	b.left -= int64(n)
	return n, b.err(err)
}

// sendTo moves up to n body bytes to w, socket to socket when w's
// ReadFrom can splice (net/http's response writer over a TCP connection).
func (b *directBody) sendTo(w io.Writer, rf io.ReaderFrom, n int64) (int64, error) {
	n = min(n, b.left)
	var sent int64
	for sent < n {
		if k := b.br.Buffered(); k > 0 {
			// What the header read took from the socket goes first.
			chunk, _ := b.br.Peek(int(min(int64(k), n-sent)))
			m, err := w.Write(chunk)
			b.br.Discard(m)
			sent += int64(m)
			b.left -= int64(m)
			if err != nil {
				return sent, err
			}
			continue
		}
		step := min(n-sent, spliceStep)
		b.conn.SetReadDeadline(time.Now().Add(b.idle))
		// The bare *net.TCPConn: splice(2) is taken only for that type.
		m, err := rf.ReadFrom(&io.LimitedReader{R: b.conn.TCPConn, N: step})
		sent += m
		b.left -= m
		b.spliced += m
		if err != nil {
			if m > 0 && errors.Is(err, os.ErrDeadlineExceeded) && b.ctx.Err() == nil {
				continue // bytes moved: the wait was on the client
			}
			return sent, b.err(err)
		}
		if m < step {
			return sent, fmt.Errorf("s3 GetObject body: %w", io.ErrUnexpectedEOF)
		}
	}
	return sent, nil
}

// err translates a read error of the body.
func (b *directBody) err(err error) error {
	switch {
	case err == nil, errors.Is(err, io.EOF) && b.left == 0:
		return err
	case b.ctx.Err() != nil:
		return fmt.Errorf("s3 GetObject body: %w", context.Cause(b.ctx))
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("s3 GetObject body: %w (%w)", ErrUnavailable, errIdle)
	case errors.Is(err, io.EOF):
		return fmt.Errorf("s3 GetObject body: %w", io.ErrUnexpectedEOF)
	}
	return fmt.Errorf("s3 GetObject body: %w", err)
}

func (b *directBody) Close() error {
	b.stop()
	return b.conn.Close()
}
