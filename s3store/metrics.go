package s3store

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/prometheus/client_golang/prometheus"
)

// requestMetrics times the requests ferry sends to S3. Every other latency
// ferry reports (a merge, a download's first byte, a route) has S3 inside
// it; this histogram says how much of it was the store's, by operation,
// so an operator can tell a slow store from a slow ferry, and which
// operation it is slow at (CompleteMultipartUpload copying on a POSIX
// backend, say).
type requestMetrics struct {
	duration *prometheus.HistogramVec
}

// Outcomes of a request: its answer's status class, or no answer at all (a
// refused or reset connection, a timeout, a caller that went away).
const (
	outcomeOK         = "ok"
	outcomeNoResponse = "no_response"
)

func newRequestMetrics(reg prometheus.Registerer) *requestMetrics {
	if reg == nil {
		return nil
	}
	m := &requestMetrics{duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "ferry_s3_request_duration_seconds",
		Help: "S3 requests ferry sent, from sending until the answer's headers (a GET's body not included; each retry counts), " +
			"by operation and outcome (ok, 3xx, 4xx, 5xx, no_response).",
		// From a HeadObject on loopback to a CompleteMultipartUpload that
		// copies a large object.
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
	}, []string{"operation", "outcome"})}
	reg.MustRegister(m.duration)
	return m
}

// observe records one request sent at start. status is the answer's
// HTTP status, or 0 when none came.
func (m *requestMetrics) observe(op string, start time.Time, status int) {
	if m == nil {
		return
	}
	m.duration.WithLabelValues(op, outcome(status)).Observe(time.Since(start).Seconds())
}

func outcome(status int) string {
	switch {
	case status == 0:
		return outcomeNoResponse
	case status < 300:
		return outcomeOK
	}
	return strconv.Itoa(status/100) + "xx"
}

// statusOf is the HTTP status of a request's answer, or 0 when none
// came (the send failed, or the context ended first).
func statusOf(raw any, err error) int {
	if r, ok := raw.(*smithyhttp.Response); ok && r != nil && r.Response != nil {
		return r.StatusCode
	}
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// middleware times each request of an SDK call: the first Deserialize
// step, so its time runs from the signed request's sending until its
// answer's headers are read (a GetObject's body is streamed later), and
// each of the SDK's retries is a request of its own. Presigning clears
// this step, so signing a URL records nothing.
func (m *requestMetrics) middleware(st *middleware.Stack) error {
	return st.Deserialize.Add(middleware.DeserializeMiddlewareFunc("ferryRequestMetrics",
		func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
			start := time.Now()
			out, md, err := next.HandleDeserialize(ctx, in)
			m.observe(middleware.GetOperationName(ctx), start, statusOf(out.RawResponse, err))
			return out, md, err
		}), middleware.Before)
}
