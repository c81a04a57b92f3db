package s3store

import (
	"context"
	"net"
	"sync"
)

// conns dials the Store's connections to S3, the SDK's and the direct
// GETs' (splice.go), and remembers the open ones, so that Store.Close can
// close them all.
//
// Why not the transport's CloseIdleConnections: the SDK's BuildableClient
// builds its transport from a copy and exposes neither it nor that method.
// And why it matters: net/http finishes a dial whose request went
// elsewhere (an idle connection freed up first, or the request was
// canceled) and parks the connection unused. Some servers, the embedded
// VersityGW's fasthttp among them, count a connection that has never
// carried a request as busy, and their shutdown waits for it (ten seconds
// for VersityGW) unless the client closes it.
type conns struct {
	dialer *net.Dialer

	mu   sync.Mutex
	open map[*trackedConn]struct{}
}

func newConns(d *net.Dialer) *conns {
	return &conns{dialer: d, open: make(map[*trackedConn]struct{})}
}

// DialContext dials with the Store's dialer and tracks the connection: the
// dial function of the SDK's transport and of the direct GETs.
func (cs *conns) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := cs.dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tcp, ok := c.(*net.TCPConn)
	if !ok {
		return c, nil // the Store dials "tcp" only; anything else goes untracked
	}
	tc := &trackedConn{TCPConn: tcp, cs: cs}
	cs.mu.Lock()
	cs.open[tc] = struct{}{}
	cs.mu.Unlock()
	return tc, nil
}

// closeAll closes every open connection, in use or not.
func (cs *conns) closeAll() {
	cs.mu.Lock()
	open := cs.open
	cs.open = make(map[*trackedConn]struct{})
	cs.mu.Unlock()
	for c := range open {
		c.TCPConn.Close()
	}
}

// trackedConn embeds the *net.TCPConn itself, not a net.Conn, so that
// its ReadFrom and WriteTo (sendfile and splice) stay visible to io.Copy.
type trackedConn struct {
	*net.TCPConn
	cs *conns
}

func (c *trackedConn) Close() error {
	c.cs.mu.Lock()
	delete(c.cs.open, c)
	c.cs.mu.Unlock()
	return c.TCPConn.Close()
}
