package notify

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// ianaSpecial is the IANA IPv4 and IPv6 Special-Purpose Address
// Registries, entry by entry, plus the multicast and non-global-unicast
// blocks of the address space registries. It is written out here, apart
// from guard.go's list, so that a block dropped there fails here. Blocks
// that carry an IPv4 address are in embeddingForms instead.
var ianaSpecial = []struct{ block, name string }{
	{"0.0.0.0/8", "this network"},
	{"0.0.0.0/32", "this host on this network"},
	{"10.0.0.0/8", "private use"},
	{"100.64.0.0/10", "shared address space"},
	{"127.0.0.0/8", "loopback"},
	{"169.254.0.0/16", "link local"},
	{"172.16.0.0/12", "private use"},
	{"192.0.0.0/24", "IETF protocol assignments"},
	{"192.0.0.0/29", "IPv4 service continuity prefix"},
	{"192.0.0.8/32", "IPv4 dummy address"},
	{"192.0.0.9/32", "port control protocol anycast"},
	{"192.0.0.10/32", "TURN anycast"},
	{"192.0.0.170/32", "NAT64/DNS64 discovery"},
	{"192.0.0.171/32", "NAT64/DNS64 discovery"},
	{"192.0.2.0/24", "documentation TEST-NET-1"},
	{"192.31.196.0/24", "AS112-v4"},
	{"192.52.193.0/24", "AMT"},
	{"192.88.99.0/24", "deprecated 6to4 relay anycast"},
	{"192.88.99.2/32", "6a44 relay anycast"},
	{"192.168.0.0/16", "private use"},
	{"192.175.48.0/24", "direct delegation AS112 service"},
	{"198.18.0.0/15", "benchmarking"},
	{"198.51.100.0/24", "documentation TEST-NET-2"},
	{"203.0.113.0/24", "documentation TEST-NET-3"},
	{"240.0.0.0/4", "reserved"},
	{"255.255.255.255/32", "limited broadcast"},
	{"224.0.0.0/4", "multicast"},
	{"::1/128", "loopback"},
	{"::/128", "unspecified"},
	{"64:ff9b:1::/48", "local-use IPv4/IPv6 translation"},
	{"100::/64", "discard-only"},
	{"100:0:0:1::/64", "dummy IPv6 prefix"},
	{"2001::/23", "IETF protocol assignments"},
	{"2001:1::1/128", "port control protocol anycast"},
	{"2001:1::2/128", "TURN anycast"},
	{"2001:1::3/128", "DNS-SD service registration protocol anycast"},
	{"2001:2::/48", "benchmarking"},
	{"2001:3::/32", "AMT"},
	{"2001:4:112::/48", "AS112-v6"},
	{"2001:10::/28", "deprecated ORCHID"},
	{"2001:20::/28", "ORCHIDv2"},
	{"2001:30::/28", "drone remote ID entity tags"},
	{"2001:db8::/32", "documentation"},
	{"2620:4f:8000::/48", "direct delegation AS112 service"},
	{"3fff::/20", "documentation"},
	{"5f00::/16", "segment routing SIDs"},
	{"fc00::/7", "unique local"},
	{"fe80::/10", "link-local unicast"},
	{"fec0::/10", "deprecated site-local"},
	{"ff00::/8", "multicast"},
	{"4000::/3", "unassigned, outside global unicast"},
	{"e000::/4", "unassigned, outside global unicast"},
}

// embeddingForms are the IPv6 forms that carry an IPv4 address: each
// turns an IPv4 address into one.
var embeddingForms = []struct {
	name  string
	embed func(v4 [4]byte) string
}{
	{"IPv4-mapped", func(b [4]byte) string { return fmt.Sprintf("::ffff:%d.%d.%d.%d", b[0], b[1], b[2], b[3]) }},
	{"IPv4-translated", func(b [4]byte) string { return fmt.Sprintf("::ffff:0:%02x%02x:%02x%02x", b[0], b[1], b[2], b[3]) }},
	{"IPv4-compatible", func(b [4]byte) string { return fmt.Sprintf("::%02x%02x:%02x%02x", b[0], b[1], b[2], b[3]) }},
	{"NAT64", func(b [4]byte) string { return fmt.Sprintf("64:ff9b::%02x%02x:%02x%02x", b[0], b[1], b[2], b[3]) }},
	{"6to4", func(b [4]byte) string { return fmt.Sprintf("2002:%02x%02x:%02x%02x::1", b[0], b[1], b[2], b[3]) }},
	{"Teredo server", func(b [4]byte) string {
		return fmt.Sprintf("2001:0:%02x%02x:%02x%02x::5db8:28ea", b[0], b[1], b[2], b[3])
	}}, // client 162.71.215.21
	{"Teredo client", func(b [4]byte) string { // server 65.54.227.120
		return fmt.Sprintf("2001:0:4136:e378:8000:63bf:%02x%02x:%02x%02x", ^b[0], ^b[1], ^b[2], ^b[3])
	}},
}

// samples returns a block's first and last address and one between.
func samples(p netip.Prefix) []netip.Addr {
	first := p.Masked().Addr()
	b := first.AsSlice()
	last, mid := slices.Clone(b), slices.Clone(b)
	for i := range b {
		for bit := range 8 {
			if i*8+bit < p.Bits() {
				continue
			}
			m := byte(0x80 >> bit)
			last[i] |= m
			if (i+bit)%3 == 0 {
				mid[i] |= m
			}
		}
	}
	l, _ := netip.AddrFromSlice(last)
	md, _ := netip.AddrFromSlice(mid)
	return []netip.Addr{first, md, l}
}

// Every special-purpose block is refused, at its edges and inside, and so
// is every IPv4-embedding form of every refused IPv4 address.
func TestPublicAddrRefusesSpecialPurpose(t *testing.T) {
	for _, e := range ianaSpecial {
		t.Run(e.block+" "+e.name, func(t *testing.T) {
			p := netip.MustParsePrefix(e.block)
			for _, a := range samples(p) {
				if publicAddr(a) {
					t.Errorf("%s (%s) is public", a, e.name)
				}
				if !a.Is4() {
					continue
				}
				for _, f := range embeddingForms {
					in6 := netip.MustParseAddr(f.embed(a.As4()))
					if publicAddr(in6) {
						t.Errorf("%s, the %s form of %s (%s), is public", in6, f.name, a, e.name)
					}
				}
			}
		})
	}
}

// Public addresses pass, in every form, and so do the neighbours of the
// refused blocks.
func TestPublicAddrAcceptsPublic(t *testing.T) {
	for _, a := range []string{
		"93.184.215.14", "8.8.8.8", "1.1.1.1", "9.255.255.255", "11.0.0.0", "100.63.255.255", "100.128.0.0",
		"126.255.255.255", "128.0.0.0", "169.253.255.255", "169.255.0.0", "172.15.255.255", "172.32.0.0",
		"192.0.1.0", "192.0.3.0", "192.88.98.255", "192.88.100.0", "192.167.255.255", "192.169.0.0",
		"198.17.255.255", "198.20.0.0", "223.255.255.255",
		"2606:4700:4700::1111", "2a00:1450:4001:82b::200e", "2001:200::1", "2001:4860:4860::8888",
		"2620:4f:7fff:ffff::1", "2620:4f:8001::1", "3ffe::1", "3fff:1000::1", "2003::1",
	} {
		t.Run(a, func(t *testing.T) {
			addr := netip.MustParseAddr(a)
			if !publicAddr(addr) {
				t.Fatalf("publicAddr(%s) = false, want true", a)
			}
			if !addr.Is4() {
				return
			}
			for _, f := range embeddingForms[:5] { // Teredo needs its other half public too; see below
				in6 := netip.MustParseAddr(f.embed(addr.As4()))
				if !publicAddr(in6) {
					t.Errorf("%s, the %s form of %s, is refused", in6, f.name, a)
				}
			}
		})
	}
	// A Teredo address with a public server and a public client.
	if a := netip.MustParseAddr("2001:0:4136:e378:8000:63bf:5db8:28ea"); !publicAddr(a) {
		t.Errorf("Teredo %s (server 65.54.227.120, client 162.71.215.21) is refused", a)
	}
}

// The addresses an attacker would try first, each in the form written.
func TestPublicAddrKnownTargets(t *testing.T) {
	for _, tc := range []struct {
		addr   string
		public bool
	}{
		{"127.0.0.1", false},
		{"::1", false},
		{"169.254.169.254", false}, // AWS, GCP, Azure metadata
		{"100.100.100.200", false}, // Alibaba metadata (shared address space)
		{"fd00:ec2::254", false},   // AWS metadata over IPv6
		{"fe80::1%eth0", false},
		{"::ffff:127.0.0.1", false},   // IPv4-mapped loopback
		{"::ffff:0:7f00:1", false},    // IPv4-translated loopback
		{"::127.0.0.1", false},        // IPv4-compatible
		{"64:ff9b::a00:1", false},     // NAT64 of 10.0.0.1
		{"64:ff9b:1::808:808", false}, // local-use NAT64, even of 8.8.8.8
		{"2002:a9fe:a9fe::1", false},  // 6to4 of 169.254.169.254
		{"fec0::1", false},            // site-local
		{"5f00::1", false},            // SRv6 SID
		{"3fff::1", false},            // documentation
		{"2001:2::1", false},          // benchmarking
		{"2001:10::1", false},         // ORCHID
		{"2001:20::1", false},         // ORCHIDv2
		{"192.88.99.1", false},        // 6to4 relay anycast
		{"64:ff9b::808:808", true},    // NAT64 of 8.8.8.8
	} {
		t.Run(tc.addr, func(t *testing.T) {
			if got := publicAddr(netip.MustParseAddr(tc.addr)); got != tc.public {
				t.Fatalf("publicAddr(%s) = %v, want %v", tc.addr, got, tc.public)
			}
		})
	}
}

func TestDelayAfterSteps(t *testing.T) {
	s := &Service{o: Config{Schedule: []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}}}
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 3 * time.Second, 4: 3 * time.Second, 9: 3 * time.Second} {
		if got := s.delayAfter(n); got != want {
			t.Errorf("delay after attempt %d = %s, want %s", n, got, want)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":                              0,
		"7":                             7 * time.Second,
		"-3":                            0,
		"nonsense":                      0,
		"99999999999":                   maxRetryAfter,
		"Mon, 02 Nov 2026 10:02:00 GMT": 2 * time.Minute,
		"Mon, 02 Nov 2026 09:00:00 GMT": 0,
	} {
		if got := parseRetryAfter(v, now); got != want {
			t.Errorf("Retry-After %q = %s, want %s", v, got, want)
		}
	}
}
