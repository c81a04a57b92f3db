package testenv

import (
	"net/url"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/ferry-io/ferry/internal/faultproxy"
)

// FaultProxy starts a fault proxy on 127.0.0.1 in front of target
// (host:port), closed when the test ends.
func FaultProxy(t testing.TB, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// S3ThroughProxy returns the test S3 server as reached through a new fault
// proxy, and the proxy. Presigned URLs signed for the returned endpoint
// work through the proxy too: it forwards bytes and leaves the Host header
// alone.
func S3ThroughProxy(t testing.TB) (S3Server, *faultproxy.Proxy) {
	t.Helper()
	srv := S3(t)
	u, err := url.Parse(srv.Endpoint)
	if err != nil || u.Host == "" {
		t.Fatalf("S3 endpoint %q is not a URL: %v", srv.Endpoint, err)
	}
	p := FaultProxy(t, u.Host)
	u.Host = p.Addr()
	srv.Endpoint = u.String()
	return srv, p
}

// MySQLThroughProxy creates a fresh database (dropped when the test ends)
// and returns a DSN that reaches it through a new fault proxy, and the
// proxy. It skips like MySQLDatabase when MySQL is unavailable.
func MySQLThroughProxy(t testing.TB) (string, *faultproxy.Proxy) {
	t.Helper()
	cfg, err := mysql.ParseDSN(MySQLDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	p := FaultProxy(t, cfg.Addr)
	cfg.Addr = p.Addr()
	return cfg.FormatDSN(), p
}
