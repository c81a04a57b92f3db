package notify

import (
	"net/netip"
	"testing"
	"time"
)

func TestPublicAddr(t *testing.T) {
	for _, tc := range []struct {
		addr   string
		public bool
	}{
		{"127.0.0.1", false},
		{"127.8.9.10", false},
		{"::1", false},
		{"10.0.0.1", false},
		{"172.16.5.4", false},
		{"192.168.1.1", false},
		{"169.254.169.254", false}, // AWS, GCP, Azure metadata
		{"100.100.100.200", false}, // Alibaba metadata (shared address space)
		{"fd00:ec2::254", false},   // AWS metadata over IPv6
		{"0.0.0.0", false},
		{"::", false},
		{"255.255.255.255", false},
		{"224.0.0.1", false},
		{"fe80::1%eth0", false},
		{"::ffff:127.0.0.1", false}, // IPv4-mapped loopback
		{"::ffff:169.254.169.254", false},
		{"::127.0.0.1", false},       // IPv4-compatible
		{"64:ff9b::a00:1", false},    // NAT64 of 10.0.0.1
		{"2002:a9fe:a9fe::1", false}, // 6to4 of 169.254.169.254
		{"192.0.2.10", false},        // documentation
		{"93.184.215.14", true},
		{"8.8.8.8", true},
		{"2606:4700:4700::1111", true},
		{"64:ff9b::808:808", true}, // NAT64 of 8.8.8.8
	} {
		t.Run(tc.addr, func(t *testing.T) {
			if got := publicAddr(netip.MustParseAddr(tc.addr)); got != tc.public {
				t.Fatalf("publicAddr(%s) = %v, want %v", tc.addr, got, tc.public)
			}
		})
	}
}

func TestDelayAfterSteps(t *testing.T) {
	s := &Service{o: Options{Schedule: []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}}}
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
