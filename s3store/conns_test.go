package s3store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptrace"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/s3store"
	"github.com/ferry-io/ferry/s3store/embedded"
)

// A request canceled while its connection is being dialed leaves that
// connection open and unused in the transport's pool (net/http finishes
// the dial for a later request). The embedded store counts a connection
// that never carried a request as busy, and its shutdown waits ten
// seconds for it. Store.Close closes it, so the store stops at once.
//
// The store runs in a child process: VersityGW runs once per process, and
// this test's own (testenv.S3) serves the other tests.
func TestCloseLetsTheEmbeddedStoreStop(t *testing.T) {
	cmd := testenv.Child("TestStopEmbeddedStoreProcess", "FERRY_S3STORE_CHILD=1", "FERRY_S3STORE_CHILD_ADDR="+testenv.FreeAddr(t))
	// Bounded: a child that hangs is killed, and fails the test.
	kill := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
	out, err := cmd.CombinedOutput()
	kill.Stop()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`STOPPED (\S+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("child printed no stop time:\n%s", out)
	}
	d, err := time.ParseDuration(string(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	if d > 3*time.Second {
		t.Fatalf("the embedded store took %v to stop after Store.Close; want well under its 10 s drain", d)
	}
}

// TestStopEmbeddedStoreProcess is TestCloseLetsTheEmbeddedStoreStop's
// child: it leaves a Store's dialed, unused connection open, closes the
// Store, stops the embedded store and prints how long that took.
func TestStopEmbeddedStoreProcess(t *testing.T) {
	if os.Getenv("FERRY_S3STORE_CHILD") != "1" {
		t.Skip("helper process for TestCloseLetsTheEmbeddedStoreStop")
	}
	srvCtx, stopSrv := context.WithCancel(context.Background())
	defer stopSrv()
	gw, err := embedded.Start(srvCtx, t.TempDir(), os.Getenv("FERRY_S3STORE_CHILD_ADDR"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := s3store.New(context.Background(), s3store.Config{
		Endpoint: gw.Endpoint, Region: "us-east-1", Bucket: "ferry",
		AccessKey: gw.AccessKey, SecretKey: gw.SecretKey, PathStyle: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The Store's first request dials. Cancel it as soon as its dial
	// starts, and hold the dial back long enough for the request to see
	// the cancellation first.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dialed := make(chan struct{})
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		ConnectStart: func(string, string) {
			cancel()
			time.Sleep(100 * time.Millisecond)
		},
		ConnectDone: func(_, _ string, err error) {
			if err == nil {
				close(dialed)
			}
		},
	})
	if err := st.Ready(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Ready with a canceled dial = %v, want context.Canceled", err)
	}
	select {
	case <-dialed:
	case <-time.After(5 * time.Second):
		t.Fatal("the canceled request's dial never finished")
	}
	// ConnectDone runs inside the dial, before the Store sees its result.
	time.Sleep(200 * time.Millisecond)

	st.Close()
	start := time.Now()
	stopSrv()
	if err := gw.Wait(); err != nil {
		t.Log("embedded store:", err)
	}
	fmt.Printf("STOPPED %v\n", time.Since(start).Round(time.Millisecond))
}

// Store.Close ends the reads still in flight, over the SDK's pooled
// connections and over a direct GET's own (splice.go): neither keeps
// going on a connection the store's shutdown would wait for.
func TestCloseEndsReadsInFlight(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int // under 4 MiB, the GET goes through the SDK
	}{
		{"through the SDK", 2 << 20},
		{"on its own connection", 24 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := testenv.Store(t)
			data := randomBytes(tc.size)
			if err := st.Put(ctx, "obj", bytes.NewReader(data), int64(len(data)), ""); err != nil {
				t.Fatal(err)
			}
			r := st.Open(ctx, "obj", int64(len(data)), "")
			defer r.Close()
			if _, err := io.ReadFull(r, make([]byte, 64<<10)); err != nil {
				t.Fatal(err)
			}
			st.Close()
			n, err := io.Copy(io.Discard, r)
			if err == nil {
				t.Fatalf("the read went on after Store.Close: %d more bytes, no error", n)
			}
			if !strings.Contains(err.Error(), "closed") {
				t.Fatalf("read after Store.Close: %v, want the closed connection's error", err)
			}
		})
	}
}
