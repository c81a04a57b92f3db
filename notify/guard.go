package notify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"time"
)

// ErrBlockedAddress means a webhook target resolved to an address ferry
// refuses to connect to (loopback, private, link-local, metadata and
// other non-public ranges) while private targets are not allowed.
var ErrBlockedAddress = errors.New("notify: webhook target is not a public address")

// blocked lists the non-public ranges beyond what netip's predicates
// cover. Cloud metadata services live in them: 169.254.169.254
// (link-local), fd00:ec2::254 (unique local), 100.100.100.200 (shared
// address space).
var blocked = func() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range []string{
		"0.0.0.0/8",       // "this network"
		"100.64.0.0/10",   // shared address space (carrier NAT, Alibaba metadata)
		"192.0.0.0/24",    // IETF protocol assignments
		"192.0.2.0/24",    // documentation
		"198.18.0.0/15",   // benchmarking
		"198.51.100.0/24", // documentation
		"203.0.113.0/24",  // documentation
		"240.0.0.0/4",     // reserved, and broadcast
		"::/96",           // unspecified, loopback, IPv4-compatible
		"64:ff9b:1::/48",  // local-use NAT64
		"100::/64",        // discard
		"2001::/32",       // Teredo: hides an IPv4 address
		"2001:db8::/32",   // documentation
	} {
		out = append(out, netip.MustParsePrefix(p))
	}
	return out
}()

var (
	nat64  = netip.MustParsePrefix("64:ff9b::/96")
	sixto4 = netip.MustParsePrefix("2002::/16")
)

// publicAddr reports whether a is an address webhooks may reach when
// private targets are not allowed.
func publicAddr(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	if !a.IsValid() || a.IsLoopback() || a.IsPrivate() || a.IsUnspecified() || a.IsMulticast() ||
		a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() {
		return false
	}
	for _, p := range blocked {
		if p.Contains(a) {
			return false
		}
	}
	// Translation prefixes carry an IPv4 address inside; judge that one.
	b := a.As16()
	switch {
	case nat64.Contains(a):
		return publicAddr(netip.AddrFrom4([4]byte(b[12:16])))
	case sixto4.Contains(a):
		return publicAddr(netip.AddrFrom4([4]byte(b[2:6])))
	}
	return true
}

// guard is the SSRF check. It sits in the HTTP transport's dial function,
// so it judges the addresses actually dialled: the host is resolved once,
// every address is checked, and the connection goes to a checked address
// literal. A name that resolved to a public address when the subscription
// was made and to a private one now (DNS rebinding) is refused now.
type guard struct {
	allowPrivate bool
	resolver     Resolver
	dialer       Dialer
}

// resolve returns host's addresses, refusing all of them if any is not
// public: a name mixing public and private answers is an attack, not a
// misconfiguration to route around.
func (g *guard) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		ips, err := g.resolver.LookupIPAddr(ctx, host)
		if err != nil {
			return nil, err
		}
		for _, ip := range ips {
			if a, ok := netip.AddrFromSlice(ip.IP); ok {
				addrs = append(addrs, a.Unmap())
			}
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("notify: %s has no addresses", host)
		}
	}
	if !g.allowPrivate {
		for _, a := range addrs {
			if !publicAddr(a) {
				return nil, fmt.Errorf("%w: %s is %s", ErrBlockedAddress, host, a)
			}
		}
	}
	return addrs, nil
}

// DialContext resolves, checks and dials, trying each address in turn.
func (g *guard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	addrs, err := g.resolve(ctx, host)
	if err != nil {
		return nil, err
	}
	var last error
	for _, a := range addrs {
		c, err := g.dialer.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return c, nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, last
}

// checkURL validates a subscription URL when it is registered: http or
// https, a host, and, unless private targets are allowed, a host that does
// not resolve to a blocked address right now. The dial-time check is the
// one that counts; this one gives the admin an early, clear answer. A name
// that does not resolve yet is accepted.
func (g *guard) checkURL(ctx context.Context, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return nil, errInvalidURL
	}
	if u.User != nil {
		return nil, errURLUserinfo
	}
	if len(raw) > 2048 {
		return nil, errURLTooLong
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := g.resolve(ctx, u.Hostname()); errors.Is(err, ErrBlockedAddress) {
		return nil, errPrivateURL
	}
	return u, nil
}

// newClient is the HTTP client for deliveries: the guard dials, no proxy
// (a proxy would make the guard judge the proxy's address instead of the
// target's), no redirects (a redirect could point anywhere), and a hard
// timeout per attempt.
func newClient(g *guard, timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           g.DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          64,
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   timeout,
			ExpectContinueTimeout: time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
