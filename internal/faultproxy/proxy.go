package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Direction is a side of the forwarded stream, seen from the client.
type Direction uint8

const (
	// Upstream is client to target: requests, PUT bodies, SQL.
	Upstream Direction = 1 << iota
	// Downstream is target to client: responses, GET bodies, result sets.
	Downstream
	// Both is either direction.
	Both = Upstream | Downstream
)

func (d Direction) String() string {
	switch d {
	case Upstream:
		return "upstream"
	case Downstream:
		return "downstream"
	case Both:
		return "both"
	}
	return fmt.Sprintf("Direction(%d)", uint8(d))
}

const (
	// chunkSize is the most one read takes from a socket; it is also the
	// token bucket's burst, so a bandwidth cap is smooth at that grain.
	chunkSize = 32 << 10
	// readAhead chunks may wait in a pump (behind latency or a stall)
	// before the proxy stops reading and TCP back-pressure takes over.
	readAhead = 8
	// dialTimeout bounds the connection to the target; a client whose
	// target cannot be reached sees its connection closed.
	dialTimeout = 5 * time.Second
	// relistenFor bounds how long Accept retries binding the old port,
	// which another process could hold for a moment.
	relistenFor = 5 * time.Second
)

// Stats counts what a Proxy forwarded and which faults it injected.
type Stats struct {
	Accepted       int64 // connections accepted
	DialFailures   int64 // accepted connections whose target could not be reached
	Resets         int64 // connections reset by ResetAfter or ResetAll
	Stalls         int64 // times a stream was held by StallAfter
	RefusedPeriods int64 // times the listener was closed by Refuse
	BytesUp        int64 // client to target, counted once each write returns
	BytesDown      int64 // target to client, likewise
	Open           int   // connections open now
}

// Proxy forwards TCP connections from a 127.0.0.1 listener to a target and
// injects faults. It is safe for concurrent use.
type Proxy struct {
	target string
	addr   string

	mu        sync.Mutex
	ln        net.Listener // nil while refusing
	refuseGen int          // bumped by every Refuse and Accept, for RefuseFor
	closed    bool
	latency   time.Duration
	rules     [2]rule // indexed by dirIndex
	conns     map[*conn]struct{}
	// changed is closed and replaced on every fault change, waking the
	// pumps that wait for one (stalled streams, latency waits).
	changed chan struct{}

	limit [2]*rate.Limiter // per direction, shared by all connections

	wg    sync.WaitGroup
	stats struct {
		accepted, dialFailures, resets, stalls, refused, up, down atomic.Int64
	}
}

// rule is the reset and stall setting of one direction. Each setting has a
// generation that changes when it is set, so every stream counts its
// "n more bytes" from the moment it first sees the setting.
type rule struct {
	resetGen   uint64
	resetAfter int64 // < 0: no reset
	resetsLeft int   // resets still to do; < 0: unlimited

	stallGen   uint64
	stallAfter int64 // < 0: no stall
	stallsLeft int   // streams still to hold; < 0: unlimited
}

func dirIndex(d Direction) int {
	if d == Downstream {
		return 1
	}
	return 0
}

func eachDirection(dir Direction, f func(i int)) {
	for _, d := range []Direction{Upstream, Downstream} {
		if dir&d != 0 {
			f(dirIndex(d))
		}
	}
}

// Start listens on a free 127.0.0.1 port and forwards every connection to
// target (host:port).
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	p := &Proxy{
		target:  target,
		addr:    ln.Addr().String(),
		ln:      ln,
		conns:   map[*conn]struct{}{},
		changed: make(chan struct{}),
		limit:   [2]*rate.Limiter{rate.NewLimiter(rate.Inf, chunkSize), rate.NewLimiter(rate.Inf, chunkSize)},
		rules:   [2]rule{{resetAfter: -1, stallAfter: -1}, {resetAfter: -1, stallAfter: -1}},
	}
	p.wg.Add(1)
	go p.accept(ln)
	return p, nil
}

// Addr is the proxy's host:port; point the client there.
func (p *Proxy) Addr() string { return p.addr }

// Target is the address connections are forwarded to.
func (p *Proxy) Target() string { return p.target }

// Close stops listening, closes every connection and waits for the
// proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.abort(false)
	}
	p.notifyLocked()
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}

// SetLatency delays every chunk by d in each direction (0 removes it).
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = max(d, 0)
	p.notifyLocked()
	p.mu.Unlock()
}

// SetBandwidth caps dir at bytesPerSecond, shared by all connections;
// 0 removes the cap.
func (p *Proxy) SetBandwidth(dir Direction, bytesPerSecond int64) {
	eachDirection(dir, func(i int) {
		if bytesPerSecond <= 0 {
			p.limit[i].SetLimit(rate.Inf)
			return
		}
		// Writes are cut to a twentieth of a second's worth, so a cap
		// changed (or lifted) at run time takes effect within about
		// 50 ms, and no burst larger than that passes a low cap.
		p.limit[i].SetBurst(int(min(max(bytesPerSecond/20, 1), chunkSize)))
		p.limit[i].SetLimit(rate.Limit(bytesPerSecond))
	})
}

// ResetAfter resets connections (RST on both sides) once they have carried
// n more bytes in dir, counted for each connection from the moment this is
// called (or from its start, for connections opened later); n = 0 resets a
// connection at its next byte in dir. times bounds how many connections
// are reset; times <= 0 resets every one until Heal or ClearResets.
func (p *Proxy) ResetAfter(dir Direction, n int64, times int) {
	if times <= 0 {
		times = -1
	}
	p.update(dir, func(r *rule) { r.resetGen++; r.resetAfter, r.resetsLeft = max(n, 0), times })
}

// ClearResets disarms ResetAfter.
func (p *Proxy) ClearResets() {
	p.update(Both, func(r *rule) { r.resetGen++; r.resetAfter, r.resetsLeft = -1, 0 })
}

// ResetAll resets every open connection now and returns how many.
func (p *Proxy) ResetAll() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.conns {
		if c.abort(true) {
			n++
		}
	}
	return n
}

// StallAfter lets n more bytes through in dir on every connection, counted
// like ResetAfter, and then holds the stream (connections stay open, bytes
// wait) until Resume or Heal. A held stream is released by nothing else,
// not even its client going away: only Resume, Heal or Close end it.
// times bounds how many streams are held, like ResetAfter's: the first
// times streams to carry n bytes stay held and later ones pass, as when
// one connection to a server dies without a reset and new ones work;
// times <= 0 holds every one. Streams an earlier call holds stay held
// and do not count against times.
func (p *Proxy) StallAfter(dir Direction, n int64, times int) {
	if times <= 0 {
		times = -1
	}
	p.update(dir, func(r *rule) { r.stallGen++; r.stallAfter, r.stallsLeft = max(n, 0), times })
}

// Resume releases every stalled stream.
func (p *Proxy) Resume() {
	p.update(Both, func(r *rule) { r.stallGen++; r.stallAfter, r.stallsLeft = -1, 0 })
}

// Refuse closes the listener: connection attempts are refused until
// Accept. Open connections are left alone (ResetAll drops them, as a
// crashed server would).
func (p *Proxy) Refuse() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuseGen++
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
		p.stats.refused.Add(1)
	}
}

// RefuseFor refuses connections for d, then listens again, unless Refuse,
// Accept or Heal is called in between.
func (p *Proxy) RefuseFor(d time.Duration) {
	p.Refuse()
	p.mu.Lock()
	gen := p.refuseGen
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		t := time.NewTimer(d)
		defer t.Stop()
		for {
			p.mu.Lock()
			changed, over := p.changed, p.closed || p.refuseGen != gen
			p.mu.Unlock()
			if over {
				return
			}
			select {
			case <-t.C:
				p.mu.Lock()
				mine := !p.closed && p.refuseGen == gen
				p.mu.Unlock()
				if mine {
					p.Accept()
				}
				return
			case <-changed:
			}
		}
	}()
}

// Accept listens again on the proxy's address after Refuse.
func (p *Proxy) Accept() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuseGen++
	p.notifyLocked()
	if p.ln != nil || p.closed {
		return nil
	}
	deadline := time.Now().Add(relistenFor)
	for {
		ln, err := net.Listen("tcp", p.addr)
		if err == nil {
			p.ln = ln
			p.wg.Add(1)
			go p.accept(ln)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("faultproxy: listen again on %s: %w", p.addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Heal clears every fault (latency, bandwidth caps, resets and stalls)
// and listens again if refusing.
func (p *Proxy) Heal() error {
	p.SetLatency(0)
	p.SetBandwidth(Both, 0)
	p.ClearResets()
	p.Resume()
	return p.Accept()
}

// Stats returns the counters so far.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	open := len(p.conns)
	p.mu.Unlock()
	return Stats{
		Accepted: p.stats.accepted.Load(), DialFailures: p.stats.dialFailures.Load(),
		Resets: p.stats.resets.Load(), Stalls: p.stats.stalls.Load(), RefusedPeriods: p.stats.refused.Load(),
		BytesUp: p.stats.up.Load(), BytesDown: p.stats.down.Load(), Open: open,
	}
}

func (p *Proxy) update(dir Direction, f func(*rule)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	eachDirection(dir, func(i int) { f(&p.rules[i]) })
	p.notifyLocked()
}

func (p *Proxy) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return // the listener was closed by Refuse or Close
		}
		p.stats.accepted.Add(1)
		p.wg.Add(1)
		go p.serve(c.(*net.TCPConn))
	}
}

func (p *Proxy) serve(client *net.TCPConn) {
	defer p.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d, err := (&net.Dialer{Timeout: dialTimeout}).DialContext(ctx, "tcp", p.target)
	if err != nil {
		p.stats.dialFailures.Add(1)
		client.Close()
		return
	}
	c := &conn{p: p, client: client, target: d.(*net.TCPConn), ctx: ctx, cancel: cancel}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.abort(false)
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); c.pump(Upstream, c.client, c.target) }()
	go func() { defer wg.Done(); c.pump(Downstream, c.target, c.client) }()
	wg.Wait()
	c.abort(false)
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// conn is one proxied connection: the client's socket and the target's.
type conn struct {
	p              *Proxy
	client, target *net.TCPConn
	ctx            context.Context // ends when the connection is torn down
	cancel         context.CancelFunc
	once           sync.Once
}

// abort tears the connection down, with a reset when rst is set. It
// reports whether this call did it.
func (c *conn) abort(rst bool) bool {
	did := false
	c.once.Do(func() {
		did = true
		if rst {
			// SO_LINGER 0 makes close send RST instead of FIN.
			c.client.SetLinger(0)
			c.target.SetLinger(0)
			c.p.stats.resets.Add(1)
		}
		c.cancel()
		c.client.Close()
		c.target.Close()
	})
	return did
}

type chunk struct {
	data []byte
	at   time.Time // when it was read, for the latency
}

// pump copies src to dst, applying the direction's faults to every chunk.
func (c *conn) pump(dir Direction, src, dst *net.TCPConn) {
	chunks := make(chan chunk, readAhead)
	var readErr error
	c.p.wg.Add(1)
	go func() {
		defer c.p.wg.Done()
		defer close(chunks)
		for {
			buf := make([]byte, chunkSize)
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case chunks <- chunk{data: buf[:n], at: time.Now()}:
				case <-c.ctx.Done():
					return
				}
			}
			if err != nil {
				readErr = err
				return
			}
		}
	}()

	s := stream{c: c, idx: dirIndex(dir)}
	bytes := &c.p.stats.up
	if dir == Downstream {
		bytes = &c.p.stats.down
	}
	for ch := range chunks {
		if !s.delay(ch.at) {
			return
		}
		for data := ch.data; len(data) > 0; {
			n, ok := s.allowance(len(data))
			if !ok {
				return
			}
			if err := c.p.limit[s.idx].WaitN(c.ctx, n); err != nil {
				return
			}
			w, err := dst.Write(data[:n])
			s.sent += int64(w)
			bytes.Add(int64(w))
			if err != nil {
				c.abort(false)
				return
			}
			data = data[w:]
			if s.resetDue() {
				c.abort(true)
				return
			}
		}
	}
	if errors.Is(readErr, io.EOF) {
		// Pass the half-close on, so the other side sees the end of this
		// direction while the other one may still carry a response.
		dst.CloseWrite()
		return
	}
	c.abort(false) // src failed (reset, or torn down): so does the path
}

// stream is a pump's view of its direction's faults.
type stream struct {
	c    *conn
	idx  int
	sent int64 // bytes written to dst so far

	resetGen   uint64
	resetBase  int64 // sent when the current reset setting was first seen
	resetArmed bool  // the current setting may still reset this stream

	stallGen  uint64
	stallBase int64
	stallHeld bool // held by this setting (and counted in Stats.Stalls)
	stallFree bool // reached its bytes when the setting had no holds left
}

// observe reads the direction's rule (the caller holds p.mu), starting
// this stream's byte counts for settings it has not seen yet. A stream's
// generations start at zero, like the rules', so settings made before the
// connection opened count from its first byte.
func (s *stream) observe() rule {
	r := s.c.p.rules[s.idx]
	if s.resetGen != r.resetGen {
		s.resetGen, s.resetBase, s.resetArmed = r.resetGen, s.sent, r.resetAfter >= 0
	}
	if s.stallGen != r.stallGen {
		// A stream held by an earlier StallAfter stays held under a new
		// one, without taking one of its holds: only Resume and Heal,
		// which stall nothing, let it go.
		held := s.stallHeld && r.stallAfter >= 0
		s.stallGen, s.stallBase, s.stallHeld, s.stallFree = r.stallGen, s.sent, held, false
	}
	return r
}

// delay waits until the chunk read at at is as old as the current latency.
// It reports false when the connection was torn down meanwhile.
func (s *stream) delay(at time.Time) bool {
	for {
		p := s.c.p
		p.mu.Lock()
		lat, changed := p.latency, p.changed
		p.mu.Unlock()
		wait := time.Until(at.Add(lat))
		if wait <= 0 {
			return true
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
			return true
		case <-changed: // the latency may have changed: look again
			t.Stop()
		case <-s.c.ctx.Done():
			t.Stop()
			return false
		}
	}
}

// allowance returns how many of want bytes may be written now, waiting
// while the stream is stalled. It reports false when the connection was
// torn down meanwhile.
func (s *stream) allowance(want int) (int, bool) {
	p := s.c.p
	for {
		p.mu.Lock()
		r := s.observe()
		changed := p.changed
		n := int64(min(want, p.limit[s.idx].Burst()))
		if p.limit[s.idx].Limit() == rate.Inf {
			n = int64(min(want, chunkSize))
		}
		if s.resetArmed {
			n = min(n, s.resetBase+r.resetAfter-s.sent)
		}
		if r.stallAfter >= 0 && !s.stallFree {
			left := s.stallBase + r.stallAfter - s.sent
			if left <= 0 && !s.stallHeld {
				if rr := &p.rules[s.idx]; rr.stallsLeft == 0 {
					s.stallFree = true // the setting's holds are taken
				} else {
					if rr.stallsLeft > 0 {
						rr.stallsLeft--
					}
					s.stallHeld = true
					p.stats.stalls.Add(1)
				}
			}
			if s.stallHeld {
				p.mu.Unlock()
				select {
				case <-changed:
					continue
				case <-s.c.ctx.Done():
					return 0, false
				}
			}
			if !s.stallFree {
				n = min(n, left)
			}
		}
		p.mu.Unlock()
		if n > 0 {
			return int(n), true
		}
		// A reset is due before anything more may pass (ResetAfter 0,
		// or a count reached while another stream took the last reset).
		if s.resetDue() {
			s.c.abort(true)
			return 0, false
		}
	}
}

// resetDue reports whether the stream has carried its ResetAfter bytes and
// takes one of the setting's resets; a stream that finds none left stops
// counting until the next setting.
func (s *stream) resetDue() bool {
	p := s.c.p
	p.mu.Lock()
	defer p.mu.Unlock()
	s.observe()
	r := &p.rules[s.idx]
	if !s.resetArmed || s.sent-s.resetBase < r.resetAfter {
		return false
	}
	s.resetArmed = false
	if r.resetsLeft == 0 {
		return false
	}
	if r.resetsLeft > 0 {
		r.resetsLeft--
	}
	return true
}
