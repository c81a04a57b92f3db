package s3store_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/faultproxy"
	"github.com/ferry-io/ferry/s3store"
)

// tcpPair returns the two ends of a loopback TCP connection: what a
// download proxy writes to, and its client.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server := <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return server.(*net.TCPConn), client.(*net.TCPConn)
}

// receive reads n bytes from c on its own goroutine, pausing for pause
// after the first 64 KiB (a slow client).
func receive(c net.Conn, n int64, pause time.Duration) <-chan []byte {
	out := make(chan []byte, 1)
	go func() {
		b := make([]byte, n)
		k, _ := io.ReadFull(c, b[:min(n, 64<<10)])
		time.Sleep(pause)
		m, _ := io.ReadFull(c, b[k:])
		out <- b[:k+m]
	}()
	return out
}

// ObjectReader.SendTo moves an object's bytes from the store's connection
// to a TCP connection inside the kernel (splice(2)) when the store is
// reached over plain HTTP, for the whole object and for a range of at
// least 4 MiB, and copies them for a smaller range or when the writer
// cannot take a socket. A client that stops
// reading for longer than the idle timeout is not a stalled store; a store
// that stalls mid-body is an outage within its bound.
func TestSendToSplices(t *testing.T) {
	ctx := context.Background()
	data := randomBytes(24 << 20) // far more than the sockets between store and client hold
	st, proxy := storeWithFaults(t, data)
	open := func() *s3store.ObjectReader {
		return st.Open(ctx, "obj", int64(len(data)), "").(*s3store.ObjectReader)
	}
	// What the header read buffered is written, not spliced.
	const headerRead = 16 << 10

	t.Run("whole object, slow client", func(t *testing.T) {
		w, c := tcpPair(t)
		r := open()
		defer r.Close()
		got := receive(c, int64(len(data)), 2500*time.Millisecond)
		n, err := r.SendTo(w, int64(len(data)), make([]byte, 1<<20))
		if err != nil || n != int64(len(data)) {
			t.Fatalf("SendTo: %d, %v", n, err)
		}
		if !bytes.Equal(<-got, data) {
			t.Fatal("the client received other bytes")
		}
		if r.Spliced() < n-headerRead || r.GETs() != 1 {
			t.Fatalf("%d of %d bytes spliced in %d GETs, want all but the header read's, in 1", r.Spliced(), n, r.GETs())
		}
	})

	t.Run("one range", func(t *testing.T) {
		w, c := tcpPair(t)
		r := open()
		defer r.Close()
		start, length := int64(3<<20+7), int64(9<<20)
		r.Expect(start, length)
		r.Seek(start, io.SeekStart)
		got := receive(c, length, 0)
		n, err := r.SendTo(w, length, make([]byte, 1<<20))
		if err != nil || n != length {
			t.Fatalf("SendTo: %d, %v", n, err)
		}
		if !bytes.Equal(<-got, data[start:start+length]) {
			t.Fatal("the client received other bytes")
		}
		if r.Spliced() < n-headerRead {
			t.Fatalf("%d of %d bytes spliced", r.Spliced(), n)
		}
	})

	t.Run("a small range", func(t *testing.T) {
		// Below 4 MiB a GET takes one of the SDK's pooled connections.
		w, c := tcpPair(t)
		r := open()
		defer r.Close()
		start, length := int64(100), int64(4<<20-1)
		r.Expect(start, length)
		r.Seek(start, io.SeekStart)
		got := receive(c, length, 0)
		n, err := r.SendTo(w, length, make([]byte, 1<<20))
		if err != nil || n != length || !bytes.Equal(<-got, data[start:start+length]) {
			t.Fatalf("SendTo: %d, %v, or other bytes", n, err)
		}
		if r.Spliced() != 0 {
			t.Fatalf("%d bytes of a small range spliced", r.Spliced())
		}
	})

	t.Run("a writer that cannot take a socket", func(t *testing.T) {
		var buf bytes.Buffer
		r := open()
		defer r.Close()
		n, err := r.SendTo(struct{ io.Writer }{&buf}, int64(len(data)), make([]byte, 1<<20))
		if err != nil || n != int64(len(data)) || !bytes.Equal(buf.Bytes(), data) {
			t.Fatalf("SendTo: %d, %v, same bytes %v", n, err, bytes.Equal(buf.Bytes(), data))
		}
		if r.Spliced() != 0 {
			t.Fatalf("%d bytes spliced into a plain writer", r.Spliced())
		}
	})

	t.Run("the store stalls mid-body", func(t *testing.T) {
		w, c := tcpPair(t)
		r := open()
		defer r.Close()
		go io.Copy(io.Discard, c)
		// Start the GET and let the first bytes through, then stall.
		if _, err := r.SendTo(w, 1<<20, make([]byte, 1<<20)); err != nil {
			t.Fatal(err)
		}
		proxy.StallAfter(faultproxy.Downstream, 0, 0)
		defer proxy.Heal()
		start := time.Now()
		n, err := r.SendTo(w, int64(len(data))-1<<20, make([]byte, 1<<20))
		if !errors.Is(err, s3store.ErrUnavailable) || !errors.Is(err, errkind.Unavailable) {
			t.Fatalf("SendTo after %d bytes: %v, want an outage", n, err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("the stall took %s to notice, over 5s", took)
		}
	})
}
