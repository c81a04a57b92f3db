package server_test

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"testing"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/server"
)

// remoteLog keeps the remote address of every access-log line.
type remoteLog struct {
	mu      sync.Mutex
	remotes []string
}

func (l *remoteLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *remoteLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "http request" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "remote" {
			l.mu.Lock()
			l.remotes = append(l.remotes, a.Value.String())
			l.mu.Unlock()
		}
		return true
	})
	return nil
}
func (l *remoteLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *remoteLog) WithGroup(string) slog.Handler      { return l }
func (l *remoteLog) last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.remotes) == 0 {
		return ""
	}
	return l.remotes[len(l.remotes)-1]
}

func prefixes(t *testing.T, ps ...string) []netip.Prefix {
	out := []netip.Prefix{}
	for _, p := range ps {
		out = append(out, netip.MustParsePrefix(p))
	}
	return out
}

// Issue 11, item 12: the client address comes from X-Forwarded-For only
// when the connection's peer (here 127.0.0.1) is a trusted proxy, and then
// it is the nearest address in the chain that is not itself trusted. A
// client talking to ferry directly cannot choose its address.
func TestClientAddressBehindProxies(t *testing.T) {
	db := testenv.NewDB(t, "sqlite")
	for _, c := range []struct {
		name    string
		trusted []netip.Prefix
		xff     string
		want    string
	}{
		{"default: loopback proxy", nil, "203.0.113.9", "203.0.113.9"},
		{"peer not trusted", prefixes(t, "10.0.0.0/8"), "203.0.113.9", "127.0.0.1"},
		{"none trusted", prefixes(t), "203.0.113.9", "127.0.0.1"},
		{"peer trusted by prefix", prefixes(t, "127.0.0.0/8"), "203.0.113.9", "203.0.113.9"},
		{"chain through trusted hops", prefixes(t, "127.0.0.1/32", "10.0.0.0/8"), "198.51.100.1, 10.1.2.3, 10.9.9.9", "198.51.100.1"},
		{"forged hop before an untrusted one", prefixes(t, "127.0.0.1/32"), "1.2.3.4, 198.51.100.1", "198.51.100.1"},
		{"no header", prefixes(t, "127.0.0.1/32"), "", "127.0.0.1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			logs := &remoteLog{}
			f := newFixtureWith(t, db, func(d *server.Deps) {
				d.Log = slog.New(logs)
				d.TrustedProxies = c.trusted
			})
			hdr := map[string]string{}
			if c.xff != "" {
				hdr["X-Forwarded-For"] = c.xff
			}
			f.do(t, "GET", "/healthz", "", hdr)
			if got := logs.last(); got != c.want {
				t.Fatalf("client address %q, want %q", got, c.want)
			}
		})
	}
}
