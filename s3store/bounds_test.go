package s3store_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/faultproxy"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/s3store"
)

// Every call to a store that accepts and never answers ends within its
// bound, as an outage: a GET that gets no answer within the first-byte
// timeout, a body that stalls mid-stream for the idle timeout, a HEAD
// within the call timeout. A slow reader is not a stalled store.
func TestStoreCallsAreBounded(t *testing.T) {
	ctx := context.Background()
	data := randomBytes(32 << 20) // far more than socket buffers hold, so a stall leaves bytes unsent
	st, proxy := storeWithFaults(t, data)
	outage := func(what string, err error, start time.Time, bound time.Duration) {
		t.Helper()
		took := time.Since(start)
		if !errors.Is(err, s3store.ErrUnavailable) || !errors.Is(err, errkind.Unavailable) {
			t.Fatalf("%s: %v, want an outage", what, err)
		}
		if took > bound {
			t.Fatalf("%s took %s, over its bound of %s", what, took, bound)
		}
	}

	// A slow reader of a healthy store is fine: idle counts only the wait
	// inside Read.
	body, err := st.Get(ctx, "obj")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	if _, err := io.ReadFull(body, buf); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	rest, err := io.ReadAll(body)
	body.Close()
	if err != nil || !bytes.Equal(append(buf, rest...), data) {
		t.Fatalf("a slow reader: %v", err)
	}

	// The store stops answering anything: first byte, then the call bound.
	proxy.StallAfter(faultproxy.Downstream, 0, 0)
	start := time.Now()
	_, err = st.Get(ctx, "obj")
	outage("GET with no answer", err, start, 5*time.Second)
	start = time.Now()
	_, err = st.Head(ctx, "obj")
	outage("HEAD with no answer", err, start, 5*time.Second)
	proxy.Heal()

	// The store stalls mid-body.
	body, err = st.Get(ctx, "obj")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(body, buf); err != nil {
		t.Fatal(err)
	}
	proxy.StallAfter(faultproxy.Downstream, 0, 0)
	start = time.Now()
	_, err = io.ReadAll(body)
	body.Close()
	outage("a body that stalls", err, start, 5*time.Second)
	proxy.Heal()

	// Refused connections are an outage at once.
	proxy.Refuse()
	start = time.Now()
	_, err = st.Head(ctx, "obj")
	outage("HEAD refused", err, start, 15*time.Second)
	proxy.Accept()
}

// storeWithFaults puts data into a fresh bucket as "obj" and returns a
// Store that reaches it through a fault proxy, with every bound at one
// second.
func storeWithFaults(t *testing.T, data []byte) (*s3store.Store, *faultproxy.Proxy) {
	t.Helper()
	ctx := context.Background()
	direct := testenv.Store(t)
	if err := direct.Put(ctx, "obj", bytes.NewReader(data), int64(len(data)), ""); err != nil {
		t.Fatal(err)
	}
	srv, proxy := testenv.S3ThroughProxy(t)
	st, err := s3store.New(ctx, s3store.Config{
		Endpoint: srv.Endpoint, Region: "us-east-1", Bucket: direct.Bucket(), AccessKey: srv.AccessKey, SecretKey: srv.SecretKey,
		PathStyle: true, Timeout: time.Second, FirstByteTimeout: time.Second, IdleTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return st, proxy
}
