package faultproxy_test

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-io/ferry/internal/faultproxy"
	"github.com/ferry-io/ferry/internal/testenv"
)

// Every test bounds its sockets with deadlines, so a proxy that holds or
// drops bytes it should not fails the test instead of hanging it.
const bound = 10 * time.Second

// upstream is a target for the proxy: each connection sends an 8-byte
// length n and gets n random bytes back (a download), then anything more
// it sends is echoed (requests and answers). It counts the bytes it
// received, to show what got past the proxy.
type upstream struct {
	addr     string
	received atomic.Int64
	finished atomic.Int64 // connections it is done with
}

// waitFinished waits until the target has finished n connections.
func (u *upstream) waitFinished(t *testing.T, n int64) {
	t.Helper()
	for deadline := time.Now().Add(bound); u.finished.Load() < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the target finished %d connections, want %d", u.finished.Load(), n)
		}
	}
}

func startUpstream(t *testing.T) *upstream {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{addr: l.Addr().String()}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer u.finished.Add(1)
				defer c.Close()
				c.SetDeadline(time.Now().Add(bound))
				var hdr [8]byte
				n, err := io.ReadFull(c, hdr[:])
				u.received.Add(int64(n))
				if err != nil {
					return
				}
				if _, err := io.CopyN(c, rand.Reader, int64(binary.BigEndian.Uint64(hdr[:]))); err != nil {
					return
				}
				// Keep reading after a failed echo: what arrived before a
				// reset is still counted.
				buf := make([]byte, 32<<10)
				echo := true
				for {
					n, err := c.Read(buf)
					u.received.Add(int64(n))
					if n > 0 && echo {
						_, werr := c.Write(buf[:n])
						echo = werr == nil
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return u
}

// dial connects through p and asks for a download of n bytes (0: none,
// the connection only echoes).
func dial(t *testing.T, p *faultproxy.Proxy, n int64) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(bound))
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], uint64(n))
	if _, err := c.Write(hdr[:]); err != nil {
		t.Fatal(err)
	}
	return c
}

// roundTrip sends msg and reads the echo, returning how long it took.
func roundTrip(t *testing.T, c net.Conn, msg []byte) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatal("echo differs from what was sent")
	}
	return time.Since(start)
}

// readFor reads c until an error or until d passes without a byte, and
// returns how much it read and the error (a timeout when the stream went
// quiet).
func readFor(c net.Conn, d time.Duration) (int64, error) {
	var total int64
	buf := make([]byte, 64<<10)
	for {
		c.SetReadDeadline(time.Now().Add(d))
		n, err := c.Read(buf)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
}

func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// heldAt fails t unless c reads exactly n bytes and then nothing for half
// a second: a stream the proxy holds.
func heldAt(t *testing.T, what string, c net.Conn, n int64) {
	t.Helper()
	if got, err := readFor(c, 500*time.Millisecond); got != n || !isTimeout(err) {
		t.Fatalf("%s: read %d bytes then %v; want exactly %d then silence", what, got, err, n)
	}
}

func TestForwardsBothWays(t *testing.T) {
	u := startUpstream(t)
	p := testenv.FaultProxy(t, u.addr)
	c := dial(t, p, 300<<10)
	if n, err := io.CopyN(io.Discard, c, 300<<10); err != nil || n != 300<<10 {
		t.Fatalf("download: %d bytes, %v", n, err)
	}
	roundTrip(t, c, []byte("hello through the proxy"))
	// A byte counts once the write that carried it returns, which can be
	// just after the peer has read it: wait briefly for the last chunk.
	want := faultproxy.Stats{Accepted: 1, Open: 1, BytesDown: 300<<10 + 23, BytesUp: 8 + 23}
	var st faultproxy.Stats
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if st = p.Stats(); st == want {
			return
		}
	}
	t.Fatalf("stats %+v, want %+v", st, want)
}

// The bounds of the timed tests leave room for a loaded CI machine (the
// race detector, other packages' tests on the same two cores); each stays
// well clear of what the behaviour it rules out would cost.
func TestLatencyIsOneWayPerDirectionAndSwitchable(t *testing.T) {
	u := startUpstream(t)
	p := testenv.FaultProxy(t, u.addr)
	c := dial(t, p, 0)
	if d := roundTrip(t, c, []byte("warm")); d > 250*time.Millisecond {
		t.Fatalf("round trip without latency took %s", d)
	}
	// Set on an open connection: the next round trip pays it twice.
	p.SetLatency(150 * time.Millisecond)
	if d := roundTrip(t, c, []byte("slow")); d < 300*time.Millisecond || d > 2*time.Second {
		t.Fatalf("round trip with 150ms one-way latency took %s, want about 300ms", d)
	}
	// Latency delays, it does not throttle: 2 MiB arrive in about one
	// latency, not one latency per chunk (32 chunks: 4.8 s).
	d2 := dial(t, p, 2<<20)
	start := time.Now()
	if _, err := io.CopyN(io.Discard, d2, 2<<20); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("2 MiB under 150ms latency took %s: latency is serialising chunks", el)
	}
	p.SetLatency(0)
	if d := roundTrip(t, c, []byte("fast again")); d > 250*time.Millisecond {
		t.Fatalf("round trip after removing the latency took %s", d)
	}
}

func TestBandwidthCapAndLiftAtRunTime(t *testing.T) {
	u := startUpstream(t)
	p := testenv.FaultProxy(t, u.addr)
	p.SetBandwidth(faultproxy.Downstream, 256<<10)
	c := dial(t, p, 512<<10)
	start := time.Now()
	if _, err := io.CopyN(io.Discard, c, 512<<10); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 1700*time.Millisecond || el > 5*time.Second {
		t.Fatalf("512 KiB at 256 KiB/s took %s, want about 2s", el)
	}
	// The cap is shared: two downloads at once take as long as one twice
	// the size. And lifting it mid-transfer takes effect at once (capped,
	// the rest would take about 30 s).
	c1, c2 := dial(t, p, 4<<20), dial(t, p, 4<<20)
	time.Sleep(500 * time.Millisecond)
	p.SetBandwidth(faultproxy.Both, 0)
	start = time.Now()
	for _, c := range []net.Conn{c1, c2} {
		if _, err := io.CopyN(io.Discard, c, 4<<20); err != nil {
			t.Fatal(err)
		}
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("8 MiB after lifting the cap took %s", el)
	}
	// The upstream direction was never capped (capped, 4 s).
	if d := roundTrip(t, c1, make([]byte, 1<<20)); d > 2500*time.Millisecond {
		t.Fatalf("1 MiB echo took %s", d)
	}
}

func TestResetAfterBytes(t *testing.T) {
	u := startUpstream(t)
	p := testenv.FaultProxy(t, u.addr)
	// A connection already open when the fault is armed counts from then.
	live := dial(t, p, 0)
	roundTrip(t, live, make([]byte, 5000))
	p.ResetAfter(faultproxy.Downstream, 100_000, 2)

	first := dial(t, p, 1<<20)
	n, err := readFor(first, 2*time.Second)
	if n != 100_000 || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read %d bytes then %v; want exactly 100000 then connection reset", n, err)
	}
	if _, err := live.Write(make([]byte, 150_000)); err != nil {
		t.Fatal(err)
	}
	n, err = readFor(live, 2*time.Second)
	if n != 100_000 || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("open connection: read %d bytes then %v; want 100000 then reset", n, err)
	}
	// times = 2: the third connection passes untouched.
	third := dial(t, p, 1<<20)
	if n, err := io.CopyN(io.Discard, third, 1<<20); err != nil {
		t.Fatalf("third connection: %d bytes, %v", n, err)
	}
	if st := p.Stats(); st.Resets != 2 {
		t.Fatalf("resets = %d, want 2", st.Resets)
	}
}

func TestResetAfterUpstreamCutsARequestBody(t *testing.T) {
	u := startUpstream(t)
	p := testenv.FaultProxy(t, u.addr)
	p.ResetAfter(faultproxy.Upstream, 64<<10, 0)
	c := dial(t, p, 0)
	var werr error
	for i := 0; i < 100 && werr == nil; i++ { // up to 3.2 MiB
		_, werr = c.Write(make([]byte, 32<<10))
	}
	_, rerr := readFor(c, 2*time.Second)
	if !errors.Is(werr, syscall.ECONNRESET) && !errors.Is(werr, syscall.EPIPE) && !errors.Is(rerr, syscall.ECONNRESET) {
		t.Fatalf("write: %v, read: %v; want the connection reset", werr, rerr)
	}
	// The target saw exactly the allowed bytes (the header among them).
	u.waitFinished(t, 1)
	if got := u.received.Load(); got != 64<<10 {
		t.Fatalf("target received %d bytes, want %d", got, 64<<10)
	}
}

func TestResetAll(t *testing.T) {
	u := startUpstream(t)
	p := testenv.FaultProxy(t, u.addr)
	a, b := dial(t, p, 0), dial(t, p, 0)
	roundTrip(t, a, []byte("a"))
	roundTrip(t, b, []byte("b"))
	if n := p.ResetAll(); n != 2 {
		t.Fatalf("ResetAll reset %d connections, want 2", n)
	}
	for _, c := range []net.Conn{a, b} {
		if _, err := readFor(c, 2*time.Second); !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("after ResetAll: %v, want connection reset", err)
		}
	}
	// New connections work.
	roundTrip(t, dial(t, p, 0), []byte("again"))
}

func TestStallAcceptsAndNeverAnswersUntilResumed(t *testing.T) {
	u := startUpstream(t)
	p := testenv.FaultProxy(t, u.addr)
	p.StallAfter(faultproxy.Upstream, 0, 0)
	c := dial(t, p, 10) // the request is held: not even the header passes
	n, err := readFor(c, 500*time.Millisecond)
	if n != 0 || !isTimeout(err) {
		t.Fatalf("stalled: read %d bytes, %v; want nothing and a timeout", n, err)
	}
	if got := u.received.Load(); got != 0 {
		t.Fatalf("target received %d bytes through a stalled proxy", got)
	}
	if st := p.Stats(); st.Stalls != 1 || st.Open != 1 {
		t.Fatalf("stats %+v, want one held stream on one open connection", st)
	}
	p.Resume()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.CopyN(io.Discard, c, 10); err != nil {
		t.Fatalf("after Resume the held request was not answered: %v", err)
	}
}

func TestStallMidStreamHoldsThenDelivers(t *testing.T) {
	u := startUpstream(t)
	p := testenv.FaultProxy(t, u.addr)
	p.StallAfter(faultproxy.Downstream, 50_000, 0)
	c := dial(t, p, 1<<20)
	heldAt(t, "the connection", c, 50_000)
	// Silence, not a closed connection: Heal lets the rest through.
	if err := p.Heal(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if rest, err := io.CopyN(io.Discard, c, 1<<20-50_000); err != nil {
		t.Fatalf("after Heal got %d more bytes: %v", rest, err)
	}
	roundTrip(t, c, []byte("still the same connection"))
}

// StallAfter with a count holds only the first streams to carry their
// bytes: later connections, and the held one's other direction, go on.
func TestStallHoldsOnlyTheFirstStreams(t *testing.T) {
	u := startUpstream(t)
	p := testenv.FaultProxy(t, u.addr)
	p.StallAfter(faultproxy.Downstream, 50_000, 1)
	held := dial(t, p, 1<<20)
	heldAt(t, "first connection", held, 50_000)
	free := dial(t, p, 1<<20)
	free.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := io.CopyN(io.Discard, free, 1<<20); err != nil {
		t.Fatalf("second connection got %d bytes of 1 MiB: %v", n, err)
	}
	if n, err := readFor(held, 200*time.Millisecond); n != 0 || !isTimeout(err) {
		t.Fatalf("the held connection read %d more bytes (%v) while the second one passed", n, err)
	}
	if st := p.Stats(); st.Stalls != 1 {
		t.Fatalf("stalls = %d, want 1", st.Stalls)
	}
	p.Resume()
	held.SetReadDeadline(time.Now().Add(5 * time.Second))
	if rest, err := io.CopyN(io.Discard, held, 1<<20-50_000); err != nil {
		t.Fatalf("after Resume the held connection got %d more bytes: %v", rest, err)
	}
}

// A second StallAfter leaves the stream the first one holds held, and its
// hold goes to the next stream to carry the bytes. Before, the new
// setting counted the held stream's bytes afresh and let them through,
// so a held connection whose client had gone could take the new hold
// and leave the connection under test alone.
func TestStallAgainKeepsTheHeldStream(t *testing.T) {
	u := startUpstream(t)
	p := testenv.FaultProxy(t, u.addr)
	p.StallAfter(faultproxy.Downstream, 50_000, 1)
	first := dial(t, p, 1<<20)
	heldAt(t, "first connection", first, 50_000)
	p.StallAfter(faultproxy.Downstream, 50_000, 1)
	if n, err := readFor(first, 300*time.Millisecond); n != 0 || !isTimeout(err) {
		t.Fatalf("after a second StallAfter the held connection read %d more bytes (%v)", n, err)
	}
	second := dial(t, p, 1<<20)
	heldAt(t, "second connection", second, 50_000)
	if st := p.Stats(); st.Stalls != 2 {
		t.Fatalf("stalls = %d, want 2", st.Stalls)
	}
	p.Resume()
	for i, c := range []net.Conn{first, second} {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if rest, err := io.CopyN(io.Discard, c, 1<<20-50_000); err != nil {
			t.Fatalf("after Resume connection %d got %d more bytes: %v", i+1, rest, err)
		}
	}
}

func TestRefuseThenAcceptOnTheSamePort(t *testing.T) {
	u := startUpstream(t)
	p := testenv.FaultProxy(t, u.addr)
	open := dial(t, p, 0)
	roundTrip(t, open, []byte("before"))

	p.Refuse()
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial while refusing: %v, want connection refused", err)
	}
	// Refusing leaves open connections alone.
	roundTrip(t, open, []byte("during"))
	if err := p.Accept(); err != nil {
		t.Fatal(err)
	}
	roundTrip(t, dial(t, p, 0), []byte("after"))

	p.RefuseFor(400 * time.Millisecond)
	start := time.Now()
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial during RefuseFor: %v, want connection refused", err)
	}
	for {
		c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Since(start) > 3*time.Second {
			t.Fatalf("still refused %s after RefuseFor(400ms): %v", time.Since(start), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if el := time.Since(start); el < 350*time.Millisecond {
		t.Fatalf("accepting again after %s, before the 400ms were over", el)
	}
	if st := p.Stats(); st.RefusedPeriods != 2 {
		t.Fatalf("refused periods = %d, want 2", st.RefusedPeriods)
	}
}

func TestTargetDownClosesTheClient(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	p := testenv.FaultProxy(t, dead)
	c := dial(t, p, 0)
	if _, err := readFor(c, 2*time.Second); isTimeout(err) || err == nil {
		t.Fatalf("read through a proxy whose target is down: %v, want the connection closed", err)
	}
	if st := p.Stats(); st.DialFailures != 1 {
		t.Fatalf("dial failures = %d, want 1", st.DialFailures)
	}
}

func TestCloseEndsHeldStreams(t *testing.T) {
	u := startUpstream(t)
	p, err := faultproxy.Start(u.addr)
	if err != nil {
		t.Fatal(err)
	}
	p.StallAfter(faultproxy.Both, 0, 0)
	p.SetLatency(time.Hour)
	c := dial(t, p, 1<<20)
	time.Sleep(100 * time.Millisecond)
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Fatal("Close did not return with a stalled connection open")
	}
	if _, err := readFor(c, 2*time.Second); isTimeout(err) {
		t.Fatal("the client's connection stayed open after Close")
	}
}
