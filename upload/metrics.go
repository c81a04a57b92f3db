package upload

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-io/ferry/models"
)

type metrics struct {
	transitions      *prometheus.CounterVec
	mergeDuration    *prometheus.HistogramVec
	verifyBytes      prometheus.Counter
	verifyThroughput prometheus.Histogram
	presigned        prometheus.Counter
	instant          prometheus.Counter
	proofs           *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, count func(context.Context) (map[string]int64, error)) *metrics {
	m := &metrics{
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_upload_transitions_total", Help: "Uploads entering each state, counted by this process.",
		}, []string{"state"}),
		mergeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ferry_upload_merge_duration_seconds", Help: "Merge job run time (complete + verification), by outcome.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2.5, 12),
		}, []string{"outcome"}),
		verifyBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_upload_verify_bytes_total", Help: "Bytes read back and hashed by merge verification.",
		}),
		verifyThroughput: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ferry_upload_verify_throughput_bytes_per_second", Help: "Throughput of each merge verification.",
			Buckets: prometheus.ExponentialBuckets(1<<20, 2, 14),
		}),
		presigned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_upload_parts_presigned_total", Help: "Part URLs presigned.",
		}),
		instant: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_upload_instant_total", Help: "Files created by instant upload (dedup).",
		}),
		proofs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_upload_proofs_total", Help: "Proof-of-possession answers, by result (right, wrong).",
		}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(m.transitions, m.mergeDuration, m.verifyBytes, m.verifyThroughput, m.presigned, m.instant, m.proofs,
			&stateCollector{count: count})
	}
	return m
}

func (m *metrics) transition(state string) { m.transitions.WithLabelValues(state).Inc() }

// stateCollector reports uploads by state from the database at scrape
// time, so every replica shows the shared truth rather than its own share.
type stateCollector struct {
	count func(context.Context) (map[string]int64, error)
}

var uploadsDesc = prometheus.NewDesc("ferry_uploads", "Uploads in the database by state.", []string{"state"}, nil)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- uploadsDesc }

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	counts, err := c.count(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(uploadsDesc, err)
		return
	}
	for _, st := range []string{StateUploading, StatePending, StateMerging, StateSuccess, StateFailed, StateAborted, StateExpired} {
		ch <- prometheus.MustNewConstMetric(uploadsDesc, prometheus.GaugeValue, float64(counts[st]), st)
	}
}

func (s *Service) countByState(ctx context.Context) (map[string]int64, error) {
	var rows []struct {
		State string
		N     int64
	}
	err := s.db.WithContext(ctx).Model(&models.Upload{}).Select("state, COUNT(*) AS n").Group("state").Scan(&rows).Error
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.State] = r.N
	}
	return out, err
}
