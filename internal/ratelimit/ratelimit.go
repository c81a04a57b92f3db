package ratelimit

import (
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limit is Events per Per. The zero Limit is no limit.
type Limit struct {
	Events int
	Per    time.Duration
}

// Enabled reports whether l limits anything.
func (l Limit) Enabled() bool { return l.Events > 0 && l.Per > 0 }

// String writes l the way ParseLimit reads it.
func (l Limit) String() string {
	if !l.Enabled() {
		return "0"
	}
	per := l.Per.String()
	switch l.Per {
	case time.Second:
		per = "s"
	case time.Minute:
		per = "min"
	case time.Hour:
		per = "h"
	}
	return strconv.Itoa(l.Events) + "/" + per
}

// units are the names ParseLimit takes for a period besides Go durations.
var units = map[string]time.Duration{
	"s": time.Second, "sec": time.Second, "second": time.Second,
	"min": time.Minute, "minute": time.Minute,
	"h": time.Hour, "hour": time.Hour,
}

// ParseLimit reads "N/period": 10/min, 600/h, 5/30s. The period is s, min,
// h (or second, minute, hour) or a Go duration of at least a second. "0"
// (or 0 per anything) is no limit.
func ParseLimit(v string) (Limit, error) {
	v = strings.TrimSpace(v)
	if v == "0" {
		return Limit{}, nil
	}
	bad := fmt.Errorf("want N/period such as 10/min, 600/h or 5/30s (0 disables), got %q", v)
	num, per, ok := strings.Cut(v, "/")
	if !ok {
		return Limit{}, bad
	}
	n, err := strconv.Atoi(strings.TrimSpace(num))
	if err != nil || n < 0 || n > 1_000_000 {
		return Limit{}, bad
	}
	per = strings.TrimSpace(per)
	d, ok := units[per]
	if !ok {
		if d, err = time.ParseDuration(per); err != nil || d < time.Second {
			return Limit{}, bad
		}
	}
	if n == 0 {
		return Limit{}, nil
	}
	return Limit{Events: n, Per: d}, nil
}

// DefaultMaxKeys bounds the buckets a Keyed keeps (a few hundred bytes
// each).
const DefaultMaxKeys = 20_000

// sweepEvery is how often at most the keys are swept for full buckets, so
// that a flood of new keys costs O(1) each between sweeps.
const sweepEvery = time.Second

// Keyed is one Limit applied to each key separately. It is safe for
// concurrent use.
type Keyed struct {
	limit   rate.Limit
	burst   int
	maxKeys int
	now     func() time.Time

	mu        sync.Mutex
	buckets   map[string]*rate.Limiter
	lastSweep time.Time
}

// New returns a Keyed for l that keeps at most maxKeys buckets (0:
// DefaultMaxKeys). now is the clock (time.Now outside tests).
func New(l Limit, maxKeys int, now func() time.Time) *Keyed {
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	k := &Keyed{maxKeys: maxKeys, now: now, buckets: map[string]*rate.Limiter{}}
	if l.Enabled() {
		k.limit = rate.Limit(float64(l.Events) / l.Per.Seconds())
		k.burst = l.Events
	}
	return k
}

// Allow takes a token from key's bucket. When there is none it takes
// nothing and returns false with how long until there is one.
func (k *Keyed) Allow(key string) (bool, time.Duration) {
	if k.burst == 0 {
		return true, 0
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.now()
	b := k.bucket(key, now)
	if b.AllowN(now, 1) {
		return true, 0
	}
	return false, k.wait(b, now)
}

// Blocked reports, without taking a token, whether key's bucket is empty,
// and if so for how long. Keys never seen are not blocked and get no
// bucket.
func (k *Keyed) Blocked(key string) (bool, time.Duration) {
	if k.burst == 0 {
		return false, 0
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	b, ok := k.buckets[key]
	if !ok {
		return false, 0
	}
	now := k.now()
	if b.TokensAt(now) >= 1 {
		return false, 0
	}
	return true, k.wait(b, now)
}

// Len is the number of buckets kept.
func (k *Keyed) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.buckets)
}

// wait is how long until b holds a whole token, rounded up to a second
// (Retry-After counts seconds).
func (k *Keyed) wait(b *rate.Limiter, now time.Time) time.Duration {
	missing := 1 - b.TokensAt(now)
	secs := math.Ceil(missing / float64(k.limit))
	return time.Duration(max(secs, 1)) * time.Second
}

// bucket returns key's bucket, making room for it if needed. Called with
// k.mu held.
func (k *Keyed) bucket(key string, now time.Time) *rate.Limiter {
	if b, ok := k.buckets[key]; ok {
		return b
	}
	if len(k.buckets) >= k.maxKeys {
		if now.Sub(k.lastSweep) >= sweepEvery {
			k.lastSweep = now
			for key, b := range k.buckets {
				if b.TokensAt(now) >= float64(k.burst) {
					delete(k.buckets, key)
				}
			}
		}
		for key := range k.buckets {
			if len(k.buckets) < k.maxKeys {
				break
			}
			delete(k.buckets, key)
		}
	}
	b := rate.NewLimiter(k.limit, k.burst)
	k.buckets[key] = b
	return b
}

// AddrKey is the key for a client address: the address itself for IPv4,
// and its /64 for IPv6, since one host commonly holds a whole /64. Text
// that is not an address is its own key.
func AddrKey(addr string) string {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	a = a.Unmap()
	if a.Is4() {
		return a.String()
	}
	p, _ := a.WithZone("").Prefix(64)
	return p.String()
}
