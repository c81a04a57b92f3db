package jobs

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports the queue's backlog (jobs by kind and state) at
// scrape time, so an operator sees work piling up or failing on any replica.
type Collector struct {
	q    *Queue
	desc *prometheus.Desc
}

// NewCollector returns a collector over q; register it once per process.
func NewCollector(q *Queue) *Collector {
	return &Collector{q: q, desc: prometheus.NewDesc("ferry_jobs", "Jobs in the queue by kind and state (all replicas).", []string{"kind", "state"}, nil)}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	stats, err := c.q.Stats(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for k, n := range stats {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
}
