package server

import (
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/ratelimit"
)

// limits are the per-replica rate limits: failed authentications per
// client address (c.ClientIP, so behind FERRY_TRUSTED_PROXIES the
// forwarded one), and creates per user.
type limits struct {
	authFailures *ratelimit.Keyed
	creates      *ratelimit.Keyed
	refused      *prometheus.CounterVec
}

func newLimits(d Deps) *limits {
	l := &limits{
		authFailures: ratelimit.New(d.AuthFailureLimit, 0, time.Now),
		creates:      ratelimit.New(d.CreateLimit, 0, time.Now),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_rate_limited_total",
			Help: "Requests refused with 429 by a rate limit (auth_failures: per client address; creates: per user).",
		}, []string{"limit"}),
	}
	for _, name := range []string{"auth_failures", "creates"} {
		l.refused.WithLabelValues(name)
	}
	if d.Registerer != nil {
		d.Registerer.MustRegister(l.refused)
	}
	return l
}

// tooMany sets Retry-After and returns the 429 for limit.
func (l *limits) tooMany(c *gin.Context, limit string, wait time.Duration, detail string) error {
	l.refused.WithLabelValues(limit).Inc()
	secs := int(math.Ceil(wait.Seconds()))
	c.Header("Retry-After", strconv.Itoa(secs))
	return errkind.New(errkind.TooManyRequests, "rate_limited", "%s; retry in %d s", detail, secs).With("retry_after", secs)
}

// refuseIfLocked answers 429 when the client's address used up its failed
// authentications. It runs before any credential is looked at, so that a
// guesser learns nothing more until the bucket refills; a right token
// from that address waits too.
func (s *Server) refuseIfLocked(c *gin.Context) error {
	if locked, wait := s.lim.authFailures.Blocked(ratelimit.AddrKey(c.ClientIP())); locked {
		return s.lim.tooMany(c, "auth_failures", wait, "too many failed sign-ins from this address")
	}
	return nil
}

// authFailed counts a refused credential against the client's address.
// Only refusals count, not a database that is down.
func (s *Server) authFailed(c *gin.Context, err error) {
	if errors.Is(err, errkind.Unauthenticated) {
		s.lim.authFailures.Allow(ratelimit.AddrKey(c.ClientIP()))
	}
}

// limitCreates guards the routes that open something (an upload, a POST
// policy, an export) with the per-user limit. It runs behind requireUser.
func (s *Server) limitCreates(c *gin.Context) {
	if ok, wait := s.lim.creates.Allow(caller(c).ID); !ok {
		abort(c, s.lim.tooMany(c, "creates", wait, "too many uploads or exports started"))
		return
	}
	c.Next()
}
