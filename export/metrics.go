package export

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	runDuration prometheus.Histogram
	duration    prometheus.Histogram
	runShards   *prometheus.HistogramVec
	shards      *prometheus.CounterVec
	reruns      prometheus.Counter
	finished    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		runDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ferry_export_run_duration_seconds", Help: "Duration of one export worker run (an export may take several after crashes).",
			Buckets: prometheus.ExponentialBuckets(0.05, 3, 10),
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ferry_export_duration_seconds", Help: "Time from an export's creation to its artifact being done.",
			Buckets: prometheus.ExponentialBuckets(0.1, 3, 10),
		}),
		runShards: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ferry_export_run_shards", Help: "Shards per export run by result: written (new), rewritten (missing or altered in the bucket), skipped (verified).",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10),
		}, []string{"result"}),
		shards: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_export_shards_total", Help: "Export shards handled, by result: written, rewritten, skipped.",
		}, []string{"result"}),
		reruns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_export_reruns_total", Help: "Export runs that resumed an export an earlier run had started.",
		}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_exports_total", Help: "Exports reaching a final or terminal state: done, failed, revoked, expired.",
		}, []string{"state"}),
	}
	if reg != nil {
		reg.MustRegister(m.runDuration, m.duration, m.runShards, m.shards, m.reruns, m.finished)
	}
	return m
}
