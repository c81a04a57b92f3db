package notify_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/notify"
)

// fenceDialer is the only way out for the SSRF tests: it records every
// address it is asked for and connects only to 127.0.0.1, so a broken
// guard fails the test instead of sending a packet off the machine.
type fenceDialer struct {
	mu    sync.Mutex
	asked []string
}

func (d *fenceDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.asked = append(d.asked, addr)
	d.mu.Unlock()
	if host, _, _ := net.SplitHostPort(addr); host != "127.0.0.1" {
		return nil, fmt.Errorf("test dialer refuses %s", addr)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

func (d *fenceDialer) dialled() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.asked...)
}

// fakeDNS answers from a table and never asks a real server.
type fakeDNS struct {
	mu    sync.Mutex
	hosts map[string][]string
}

func (r *fakeDNS) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	addrs, ok := r.hosts[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host (test resolver)", Name: host, IsNotFound: true}
	}
	var out []net.IPAddr
	for _, a := range addrs {
		out = append(out, net.IPAddr{IP: net.ParseIP(a)})
	}
	return out, nil
}

func (r *fakeDNS) set(host string, addrs ...string) {
	r.mu.Lock()
	r.hosts[host] = addrs
	r.mu.Unlock()
}

func TestSSRFGuard(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		t.Parallel()
		rec := newRecorder(t, status(http.StatusOK))
		port := rec.Listener.Addr().(*net.TCPAddr).Port
		dns := &fakeDNS{hosts: map[string][]string{
			"intranet.test":  {"10.20.30.40"},
			"localhost.test": {"127.0.0.1"},
			"metadata.test":  {"169.254.169.254"},
			"mixed.test":     {"93.184.215.14", "192.168.0.10"},
			"public.test":    {"93.184.215.14"},
			"rebind.test":    {"93.184.215.14"},
		}}
		cases := []struct {
			url  string
			dial string // the address the guard hands the dialer when private targets are allowed
		}{
			{fmt.Sprintf("http://127.0.0.1:%d/hook", port), fmt.Sprintf("127.0.0.1:%d", port)},
			{"http://169.254.169.254/latest/meta-data/", "169.254.169.254:80"},
			{"http://10.0.0.1/hook", "10.0.0.1:80"},
			{fmt.Sprintf("http://[::1]:%d/hook", port), fmt.Sprintf("[::1]:%d", port)},
			{"http://intranet.test/hook", "10.20.30.40:80"},
			{fmt.Sprintf("http://localhost.test:%d/hook", port), fmt.Sprintf("127.0.0.1:%d", port)},
			{"https://metadata.test/computeMetadata/v1/", "169.254.169.254:443"},
			{"http://mixed.test/hook", "192.168.0.10:80"},
			{fmt.Sprintf("http://[::ffff:127.0.0.1]:%d/hook", port), fmt.Sprintf("[::ffff:127.0.0.1]:%d", port)},
		}
		ctx := context.Background()

		t.Run("refused", func(t *testing.T) {
			dialer := &fenceDialer{}
			reg := prometheus.NewRegistry()
			opts := notify.Config{Resolver: dns, Dialer: dialer, MaxAttempts: 1, Registerer: reg}
			strict := newHarness(t, db.DB, opts)
			// Registration refuses every private target up front.
			for _, tc := range cases {
				_, _, err := strict.svc.CreateSubscription(ctx, tc.url, []string{notify.UploadCompleted})
				var e *errkind.Error
				if !errors.As(err, &e) || e.Code != "private_url" {
					t.Errorf("create %s: %v, want private_url", tc.url, err)
				}
			}
			// Subscriptions that got in anyway (made while private targets
			// were allowed, or whose name resolved elsewhere at the time)
			// are refused at dial time.
			lenientOpts := opts
			lenientOpts.AllowPrivate, lenientOpts.Registerer = true, nil
			lenient := newHarness(t, db.DB, lenientOpts)
			var blocked []notify.Subscription
			for _, tc := range cases {
				sub, _ := lenient.subscribe(tc.url)
				blocked = append(blocked, sub)
			}
			rebind, _ := strict.subscribe("http://rebind.test/hook") // public now
			blocked = append(blocked, rebind)
			public, _ := strict.subscribe("http://public.test/hook")
			dns.set("rebind.test", "127.0.0.1") // and loopback by delivery time

			strict.run()
			id, _ := strict.emit(notify.UploadCompleted, map[string]int{"n": 1})
			for _, sub := range blocked {
				d := strict.waitDelivery(sub.ID, id, notify.StateFailed, 30*time.Second)
				if len(d.Attempts) != 1 || d.Attempts[0].Status != 0 || !strings.Contains(d.Attempts[0].Error, "not a public address") {
					t.Errorf("%s: attempts %+v, want one refused by the guard", sub.URL, d.Attempts)
				}
			}
			// The public name reached the dialer, which refused it: the
			// guard lets public addresses through, and nothing else.
			d := strict.waitDelivery(public.ID, id, notify.StateFailed, 30*time.Second)
			if !strings.Contains(d.LastError, "test dialer refuses") {
				t.Errorf("public target: %q, want the test dialer's refusal", d.LastError)
			}
			if got := dialer.dialled(); !slices.Equal(got, []string{"93.184.215.14:80"}) {
				t.Fatalf("the dialer was asked for %v; want only the public address", got)
			}
			if n := len(rec.got()); n != 0 {
				t.Fatalf("the loopback receiver got %d requests", n)
			}
			if got := testenv.Counter(t, reg, "ferry_webhook_attempts_total", "outcome", "blocked"); got != float64(len(blocked)) {
				t.Errorf("blocked attempts metric = %v, want %d", got, len(blocked))
			}
		})

		t.Run("allowed", func(t *testing.T) {
			dialer := &fenceDialer{}
			dns.set("rebind.test", "93.184.215.14")
			h := newHarness(t, testenv.NewDB(t, db.Dialect).DB, notify.Config{Resolver: dns, Dialer: dialer, MaxAttempts: 1, AllowPrivate: true}).run()
			subs := map[string]notify.Subscription{}
			for _, tc := range cases {
				sub, _ := h.subscribe(tc.url)
				subs[tc.url] = sub
			}
			id, _ := h.emit(notify.UploadCompleted, map[string]int{"n": 1})
			for _, tc := range cases {
				u, _ := url.Parse(tc.url)
				want := notify.StateFailed // the test dialer refuses all but 127.0.0.1
				if host, _, _ := net.SplitHostPort(tc.dial); host == "127.0.0.1" {
					want = notify.StateDelivered
				}
				d := h.waitDelivery(subs[tc.url].ID, id, want, 30*time.Second)
				if want == notify.StateFailed && !strings.Contains(d.LastError, "test dialer refuses") {
					t.Errorf("%s: %q, want the test dialer's refusal", u, d.LastError)
				}
				if !slices.Contains(dialer.dialled(), tc.dial) {
					t.Errorf("%s: the dialer was never asked for %s (asked: %v)", u, tc.dial, dialer.dialled())
				}
			}
			if n := len(rec.got()); n != 2 {
				t.Errorf("the loopback receiver got %d requests, want 2 (127.0.0.1 and localhost.test)", n)
			}
		})
	})
}

// The targets an audit got past registration, each refused now, and with
// them every IPv4-embedding form of loopback and metadata.
func TestCreateRefusesSpecialPurposeTargets(t *testing.T) {
	db := testenv.NewDB(t, models.SQLite)
	h := newHarness(t, db.DB, notify.Config{Resolver: &fakeDNS{hosts: map[string][]string{}}, Dialer: &fenceDialer{}})
	for _, u := range []string{
		"http://[::ffff:0:7f00:1]/hook",                      // IPv4-translated 127.0.0.1
		"http://[fec0::1]/hook",                              // site-local
		"http://192.88.99.1/hook",                            // 6to4 relay anycast
		"http://[5f00::1]/hook",                              // SRv6 SIDs
		"http://[3fff::1]/hook",                              // documentation
		"http://[2001:2::1]/hook",                            // benchmarking
		"http://[2001:10::1]/hook",                           // ORCHID
		"http://[2001:20::1]/hook",                           // ORCHIDv2
		"http://[::ffff:169.254.169.254]/hook",               // IPv4-mapped metadata
		"http://[64:ff9b::a9fe:a9fe]/hook",                   // NAT64 metadata
		"http://[64:ff9b:1::a9fe:a9fe]/hook",                 // local-use NAT64 metadata
		"http://[2002:7f00:1::]/hook",                        // 6to4 loopback
		"http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/hook", // Teredo, client 127.0.0.1
		"http://[::7f00:1]/hook",                             // IPv4-compatible loopback
	} {
		_, _, err := h.svc.CreateSubscription(context.Background(), u, []string{notify.UploadCompleted})
		var e *errkind.Error
		if !errors.As(err, &e) || e.Code != "private_url" {
			t.Errorf("create %s: %v, want private_url", u, err)
		}
	}
}
