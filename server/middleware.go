package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/logctx"
	"github.com/ferry-io/ferry/internal/random"
	"github.com/ferry-io/ferry/users"
)

var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// routeOf is the template of the route c matched (/uploads/:id), or
// "unmatched": the label metrics and profiles use, never the raw path.
func routeOf(c *gin.Context) string {
	if r := c.FullPath(); r != "" {
		return r
	}
	return "unmatched"
}

// profileLabels runs the rest of the chain with the request's route and
// method as profile labels, on its goroutine and on any the handler
// starts, so a CPU profile of the process (FERRY_PPROF) splits its time
// by route (and background work by job kind, see package jobs) instead of
// pooling every request under gin and net/http.
func profileLabels() gin.HandlerFunc {
	return func(c *gin.Context) {
		pprof.Do(c.Request.Context(), pprof.Labels("route", routeOf(c), "method", c.Request.Method), func(ctx context.Context) {
			c.Request = c.Request.WithContext(ctx)
			c.Next()
		})
	}
}

// requestID adopts a sane incoming X-Request-Id (from a proxy) or makes
// one, echoes it, and puts it in the request context for logs.
func requestID() gin.HandlerFunc {
	return func(c *gin.Context) {
		id := c.GetHeader("X-Request-Id")
		if !requestIDPattern.MatchString(id) {
			id = random.Hex(8)
		}
		c.Header("X-Request-Id", id)
		c.Request = c.Request.WithContext(logctx.WithRequestID(c.Request.Context(), id))
		c.Next()
	}
}

// recovery turns a handler panic into a logged 500 problem.
func recovery(log *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				log.ErrorContext(c.Request.Context(), "handler panic", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				if !c.Writer.Written() {
					writeProblem(c, problemFor(c.Request.Context(), fmt.Errorf("panic: %v", p)))
				}
				c.Abort()
			}
		}()
		c.Next()
	}
}

type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_http_requests_total", Help: "HTTP requests by route, method and status.",
		}, []string{"route", "method", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ferry_http_request_duration_seconds", Help: "HTTP request latency by route and method.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route", "method"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.duration)
	}
	return m
}

// bodyBytesKey is set by a handler that writes part of its body past
// gin's writer (the download proxy's splice), to the body's true size,
// which accessLog logs instead of gin's count.
const bodyBytesKey = "ferry.body_bytes"

// accessLog writes one JSON line per request and records the metrics.
// Routes are labelled by their template (/uploads/:id), never the raw path,
// so metric cardinality stays bounded.
func accessLog(log *slog.Logger, m *httpMetrics) gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		elapsed := time.Since(start)
		route := routeOf(c)
		status := c.Writer.Status()
		size := int64(c.Writer.Size())
		if n, ok := c.Get(bodyBytesKey); ok {
			size = n.(int64)
		}
		m.requests.WithLabelValues(route, c.Request.Method, strconv.Itoa(status)).Inc()
		m.duration.WithLabelValues(route, c.Request.Method).Observe(elapsed.Seconds())

		attrs := []any{
			"method", c.Request.Method, "route", route, "path", logPath(route, c.Request.URL.Path),
			"status", status, "bytes", size, "duration_ms", float64(elapsed.Microseconds()) / 1000,
			"remote", c.ClientIP(), "user_agent", c.Request.UserAgent(),
		}
		if u, ok := c.Get(userKey); ok {
			attrs = append(attrs, "user_id", u.(users.User).ID)
		}
		if k, ok := serviceKey(c); ok {
			attrs = append(attrs, "service_key_id", k.ID)
		}
		level := slog.LevelInfo
		if len(c.Errors) > 0 {
			attrs = append(attrs, "err", c.Errors.Last().Err.Error())
			if status >= 500 {
				level = slog.LevelError
			}
		}
		if route == "/healthz" || route == "/readyz" || route == "/metrics" {
			level = slog.LevelDebug
		}
		log.Log(c.Request.Context(), level, "http request", attrs...)
	}
}

// logPath is the path to log: a ticket in the path (Uppy 6's routes) is
// a credential, and stays out of the logs.
func logPath(route, path string) string {
	if !strings.HasPrefix(route, ticketPathPrefix+"/") {
		return path
	}
	rest := strings.TrimPrefix(path, "/tickets/")
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		return "/tickets/REDACTED" + rest[i:]
	}
	return "/tickets/REDACTED"
}

// bodyLimit caps request bodies. ferry's API takes JSON only; file bytes go
// straight to S3, so a small limit loses nothing.
func bodyLimit(n int64) gin.HandlerFunc {
	return func(c *gin.Context) {
		if c.Request.ContentLength > n {
			abort(c, errkind.New(errkind.TooLarge, "body_too_large", "request body exceeds %d bytes", n))
			return
		}
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, n)
		c.Next()
	}
}

// securityHeaders sets headers every answer should carry.
func securityHeaders() gin.HandlerFunc {
	return func(c *gin.Context) {
		h := c.Writer.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		c.Next()
	}
}

func bearer(r *http.Request) string {
	a := r.Header.Get("Authorization")
	if len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return strings.TrimSpace(a[7:])
	}
	return ""
}
