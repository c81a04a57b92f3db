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
	blobMismatch     prometheus.Counter
	claimsCorrected  prometheus.Counter
	restarts         prometheus.Counter
	verifyDuration   prometheus.Histogram
	cleanedPosts     prometheus.Counter
	waiting          prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, count func(context.Context) (map[string]int64, error)) *metrics {
	m := &metrics{
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_upload_transitions_total", Help: "Uploads entering each state, counted by this process.",
		}, []string{"state"}),
		mergeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ferry_upload_merge_duration_seconds", Help: "Merge job run time (CompleteMultipartUpload, or the copy of a posted object), by outcome.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2.5, 12),
		}, []string{"outcome"}),
		verifyBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_upload_verify_bytes_total", Help: "Bytes read back and hashed by verification.",
		}),
		verifyThroughput: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ferry_upload_verify_throughput_bytes_per_second", Help: "Throughput of each verification.",
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
		blobMismatch: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_upload_blob_mismatch_total",
			Help: "Blob objects found changed since ferry verified them (refused for deduplication); any count is a bug or an outside write to the bucket.",
		}),
		claimsCorrected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_upload_sha256_claims_corrected_total",
			Help: "Files whose client-declared SHA-256 did not match the bytes; the file records the SHA-256 ferry computed.",
		}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_upload_restarts_total",
			Help: "Uploads put back to uploading on a new multipart upload because the store lost theirs before the merge.",
		}),
		verifyDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ferry_upload_verify_duration_seconds", Help: "Background verification (read-back and SHA-256) of each merged file.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2.5, 12),
		}),
		cleanedPosts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_upload_stray_posts_deleted_total",
			Help: "Objects POSTed under a policy after their upload ended, deleted by cleanup.",
		}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ferry_upload_waiting_requests",
			Help: "Status requests (GET /uploads/{id}?wait=) this process holds open until their upload settles.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.transitions, m.mergeDuration, m.verifyBytes, m.verifyThroughput, m.presigned, m.instant, m.proofs,
			m.blobMismatch, m.claimsCorrected, m.restarts, m.verifyDuration, m.cleanedPosts, m.waiting, &stateCollector{count: count})
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
