package notify

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"github.com/ferry-io/ferry/models"
)

type metrics struct {
	attempts   *prometheus.CounterVec
	deliveries *prometheus.CounterVec
	latency    prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, db *gorm.DB) *metrics {
	m := &metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_webhook_attempts_total",
			Help: "Webhook delivery attempts by outcome: delivered, http_error, gone, network_error, blocked, error.",
		}, []string{"outcome"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_webhook_deliveries_total",
			Help: "Webhook deliveries that ended a round, by final state (delivered, failed).",
		}, []string{"state"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ferry_webhook_delivery_latency_seconds",
			Help:    "Time from an event's commit to its successful delivery, retries included.",
			Buckets: prometheus.ExponentialBuckets(0.05, 4, 10), // 50ms … ~3.6h
		}),
	}
	if reg != nil {
		reg.MustRegister(m.attempts, m.deliveries, m.latency, backlog{db: db})
	}
	return m
}

// backlog reports, at scrape time, what is waiting: outbox events not yet
// fanned out, and deliveries not yet delivered or failed. Every replica
// reports the same shared numbers.
type backlog struct{ db *gorm.DB }

var backlogDesc = prometheus.NewDesc("ferry_webhook_backlog",
	"Webhook work waiting, by stage: outbox (events not yet dispatched), pending (deliveries still being attempted).",
	[]string{"stage"}, nil)

func (b backlog) Describe(ch chan<- *prometheus.Desc) { ch <- backlogDesc }

func (b backlog) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	db := b.db.WithContext(ctx)
	var outbox, pending int64
	if err := db.Model(&models.OutboxEvent{}).Where("dispatched_at IS NULL").Count(&outbox).Error; err != nil {
		ch <- prometheus.NewInvalidMetric(backlogDesc, err)
		return
	}
	if err := db.Model(&models.WebhookDelivery{}).Where("state = ?", StatePending).Count(&pending).Error; err != nil {
		ch <- prometheus.NewInvalidMetric(backlogDesc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(backlogDesc, prometheus.GaugeValue, float64(outbox), "outbox")
	ch <- prometheus.MustNewConstMetric(backlogDesc, prometheus.GaugeValue, float64(pending), "pending")
}
