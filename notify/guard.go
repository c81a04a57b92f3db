package notify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// ErrBlockedAddress means a webhook target resolved to an address ferry
// refuses to connect to (loopback, private, link-local, metadata and
// every other special-purpose range) while private targets are not
// allowed.
var ErrBlockedAddress = errors.New("notify: webhook target is not a public address")

// specialPurpose is the refused set: every block of the IANA IPv4 and
// IPv6 Special-Purpose Address Registries (iana-ipv4-special-registry,
// iana-ipv6-special-registry, as of 2025), the multicast blocks, and the
// IPv6 blocks outside global unicast that the IPv6 Address Space registry
// lists. Blocks the registries call globally reachable are refused too:
// they are anycast services (PCP, TURN, AS112, AMT) and overlay
// identifiers (ORCHIDv2, DETs), never a backend's webhook endpoint. The
// blocks that carry an IPv4 address inside are not here; embeddedIPv4
// judges them by that address.
var specialPurpose = func() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range []string{
		// IPv4 Special-Purpose Address Registry.
		"0.0.0.0/8",          // "this network" (RFC 791)
		"10.0.0.0/8",         // private use (RFC 1918)
		"100.64.0.0/10",      // shared address space (RFC 6598): carrier NAT, Alibaba metadata
		"127.0.0.0/8",        // loopback (RFC 1122)
		"169.254.0.0/16",     // link local (RFC 3927): AWS, GCP, Azure metadata
		"172.16.0.0/12",      // private use (RFC 1918)
		"192.0.0.0/24",       // IETF protocol assignments (RFC 6890), PCP and TURN anycast, NAT64 discovery
		"192.0.2.0/24",       // documentation, TEST-NET-1 (RFC 5737)
		"192.31.196.0/24",    // AS112-v4 (RFC 7535)
		"192.52.193.0/24",    // AMT (RFC 7450)
		"192.88.99.0/24",     // deprecated 6to4 relay anycast (RFC 7526)
		"192.168.0.0/16",     // private use (RFC 1918)
		"192.175.48.0/24",    // direct delegation AS112 service (RFC 7534)
		"198.18.0.0/15",      // benchmarking (RFC 2544)
		"198.51.100.0/24",    // documentation, TEST-NET-2 (RFC 5737)
		"203.0.113.0/24",     // documentation, TEST-NET-3 (RFC 5737)
		"240.0.0.0/4",        // reserved (RFC 1112)
		"255.255.255.255/32", // limited broadcast (RFC 919)
		// IPv4 multicast address space registry.
		"224.0.0.0/4",
		// IPv6 Special-Purpose Address Registry.
		"::/128",            // unspecified (RFC 4291)
		"::1/128",           // loopback (RFC 4291)
		"64:ff9b:1::/48",    // local-use IPv4/IPv6 translation (RFC 8215): a translator inside the network
		"100::/64",          // discard-only (RFC 6666)
		"100:0:0:1::/64",    // dummy prefix (RFC 9780)
		"2001::/23",         // IETF protocol assignments (RFC 2928), benchmarking, AMT, AS112, ORCHID, DETs
		"2001:db8::/32",     // documentation (RFC 3849)
		"2620:4f:8000::/48", // direct delegation AS112 service (RFC 7534)
		"3fff::/20",         // documentation (RFC 9637)
		"5f00::/16",         // SRv6 SIDs (RFC 9602)
		"fc00::/7",          // unique local (RFC 4193): AWS metadata at fd00:ec2::254
		"fe80::/10",         // link-local unicast (RFC 4291)
		// IPv6 Address Space registry: deprecated site-local (RFC 3879)
		// and multicast (RFC 4291). Everything else outside 2000::/3 is
		// unassigned; globalUnicast refuses it.
		"fec0::/10",
		"ff00::/8",
	} {
		out = append(out, netip.MustParsePrefix(p))
	}
	return out
}()

// IPv6 forms that carry an IPv4 address, with where it sits.
var (
	ipv4Mapped     = netip.MustParsePrefix("::ffff:0:0/96")   // RFC 4291
	ipv4Translated = netip.MustParsePrefix("::ffff:0:0:0/96") // SIIT, RFC 2765
	ipv4Compatible = netip.MustParsePrefix("::/96")           // deprecated, RFC 4291
	nat64          = netip.MustParsePrefix("64:ff9b::/96")    // well-known prefix, RFC 6052
	sixto4         = netip.MustParsePrefix("2002::/16")       // RFC 3056: bits 16–47
	teredo         = netip.MustParsePrefix("2001::/32")       // RFC 4380: server in bits 32–63, client inverted in 96–127
	globalUnicast  = netip.MustParsePrefix("2000::/3")
)

// embeddedIPv4 returns the IPv4 addresses an IPv6 address stands for, or
// nil when it carries none. Traffic to such an address ends at the IPv4
// address (or, for Teredo, passes through both), so that is what must be
// public.
func embeddedIPv4(a netip.Addr) []netip.Addr {
	if !a.Is6() {
		return nil
	}
	b := a.As16()
	v4 := func(i int) netip.Addr { return netip.AddrFrom4([4]byte(b[i : i+4])) }
	switch {
	case ipv4Mapped.Contains(a), ipv4Translated.Contains(a), ipv4Compatible.Contains(a), nat64.Contains(a):
		return []netip.Addr{v4(12)}
	case sixto4.Contains(a):
		return []netip.Addr{v4(2)}
	case teredo.Contains(a):
		client := [4]byte{^b[12], ^b[13], ^b[14], ^b[15]}
		return []netip.Addr{v4(4), netip.AddrFrom4(client)}
	}
	return nil
}

// publicAddr reports whether a is an address webhooks may reach when
// private targets are not allowed.
func publicAddr(a netip.Addr) bool {
	a = a.WithZone("")
	if !a.IsValid() {
		return false
	}
	if v4s := embeddedIPv4(a); v4s != nil {
		for _, v4 := range v4s {
			if !publicAddr(v4) {
				return false
			}
		}
		return true
	}
	if a.Is6() && !globalUnicast.Contains(a) {
		return false
	}
	for _, p := range specialPurpose {
		if p.Contains(a) {
			return false
		}
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
// https, a host, a port from 1 to 65535, no spaces or control characters,
// no interface zone, and, unless private targets are allowed, a host that
// does not resolve to a blocked address right now. The dial-time check is
// the one that counts; this one gives the admin an early, clear answer. A
// name that does not resolve yet is accepted.
func (g *guard) checkURL(ctx context.Context, raw string) (*url.URL, error) {
	if len(raw) > 2048 {
		return nil, errURLTooLong
	}
	// url.Parse keeps a space in a path or query; Go's client would then
	// send a URL the receiver never registered, or none at all.
	if strings.ContainsFunc(raw, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return nil, errURLSpace
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.Opaque != "" {
		return nil, errInvalidURL
	}
	if u.User != nil {
		return nil, errURLUserinfo
	}
	if port := u.Port(); port != "" || strings.HasSuffix(u.Host, ":") {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, errURLPort
		}
	}
	// A zone names an interface of one machine (fe80::1%eth0); other
	// replicas have other interfaces, and the guard never allows it.
	if strings.Contains(u.Hostname(), "%") {
		return nil, errURLZone
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
