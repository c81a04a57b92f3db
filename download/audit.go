package download

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
)

// DefaultLogRetention is how long download-log rows are kept unless
// Config.LogRetention says otherwise.
const DefaultLogRetention = 30 * 24 * time.Hour

// KindPruneLog is the periodic job that deletes download-log rows older
// than the retention.
const KindPruneLog = "download_log_prune"

// entry is one download-log row in the making.
type entry struct {
	resourceID, userID, method, code   string
	status                             int
	bytes                              int64
	rangeHeader, remoteAddr, userAgent string
	linkHash, requestID                string
	// refusedLink says why the link itself was refused ("invalid" for a
	// malformed, unknown-key or forged signature, "expired"), or "" when
	// ferry signed it and it is still valid. Only the latter are logged.
	refusedLink string
}

type metrics struct {
	requests  *prometheus.CounterVec
	bytes     prometheus.Counter
	spliced   prometheus.Counter
	forwarded prometheus.Counter
	changed   prometheus.Counter
	refused   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_downloads_total", Help: "Download proxy requests by HTTP status.",
		}, []string{"status"}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_download_bytes_total", Help: "Content bytes sent by the download proxy.",
		}),
		spliced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_download_spliced_bytes_total",
			Help: "Of ferry_download_bytes_total, the bytes moved from the store's connection to the client's inside the kernel (splice(2)), never copied through ferry: a plain-HTTP store, a plain-TCP client, one range of at least 4 MiB per answer.",
		}),
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_download_forwarded_links_total",
			Help: "Download links seen from more distinct client addresses than FERRY_DOWNLOAD_LINK_MAX_ADDRS (counted once per link).",
		}),
		changed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_download_object_changed_total",
			Help: "Downloads refused because the object's ETag is no longer the one recorded when it was verified; any count is a bug or an outside write to the bucket.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_download_refused_links_total",
			Help: "Download requests whose link was refused before any other check, by reason (invalid: malformed, unknown key or forged; expired). They are not written to the download log.",
		}, []string{"reason"}),
	}
	// Export the statuses dashboards watch even before the first request.
	for _, st := range []int{200, 206, 304, 403, 404, 410, 412, 416} {
		m.requests.WithLabelValues(strconv.Itoa(st))
	}
	for _, reason := range []string{"invalid", "expired"} {
		m.refused.WithLabelValues(reason)
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.bytes, m.spliced, m.forwarded, m.changed, m.refused)
	}
	return m
}

// record counts the request, writes its download-log row and checks the
// link for forwarding. It runs after the answer is sent, on a context that
// outlives a client that hung up. A request whose link ferry did not sign,
// or signed but expired, is counted only: anyone can send those, as many
// as they like, and a row for each would let them fill the table.
func (s *Service) record(ctx context.Context, e entry) {
	s.m.requests.WithLabelValues(strconv.Itoa(e.status)).Inc()
	s.m.bytes.Add(float64(e.bytes))
	if e.refusedLink != "" {
		s.m.refused.WithLabelValues(e.refusedLink).Inc()
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	row := models.DownloadLog{
		ResourceID: e.resourceID, UserID: clip(e.userID, 40), Method: clip(e.method, 8), Status: e.status, Code: e.code,
		BytesSent: e.bytes, RangeHeader: e.rangeHeader, RemoteAddr: e.remoteAddr, UserAgent: e.userAgent,
		RequestID: clip(e.requestID, 64), CreatedAt: models.Time(s.c.Now()),
	}
	if e.linkHash != "" {
		row.LinkHash = &e.linkHash
	}
	if err := s.c.DB.WithContext(ctx).Create(&row).Error; err != nil {
		s.c.Log.ErrorContext(ctx, "download log write failed", "resource_id", e.resourceID, "err", err)
		return
	}
	if e.linkHash != "" {
		s.checkForwarded(ctx, e)
	}
}

// checkForwarded warns when the link of e has now been used from more
// distinct addresses than allowed, and this request's address is a new
// one. The count comes from the download log, so it covers every replica.
func (s *Service) checkForwarded(ctx context.Context, e entry) {
	var got struct {
		Addrs int64
		Mine  int64
	}
	err := s.c.DB.WithContext(ctx).Raw(`SELECT COUNT(DISTINCT remote_addr) AS addrs,
		COALESCE(SUM(CASE WHEN remote_addr = ? THEN 1 ELSE 0 END), 0) AS mine
		FROM download_log WHERE link_hash = ?`, e.remoteAddr, e.linkHash).Scan(&got).Error
	if err != nil {
		s.c.Log.ErrorContext(ctx, "download link address count failed", "err", err)
		return
	}
	limit := int64(s.c.MaxLinkAddrs)
	if got.Addrs <= limit || got.Mine != 1 {
		return
	}
	if got.Addrs == limit+1 {
		s.m.forwarded.Inc()
	}
	s.c.Log.WarnContext(ctx, "download link used from too many addresses; forwarded?",
		"resource_id", e.resourceID, "user_id", e.userID, "addresses", got.Addrs, "limit", limit,
		"remote", e.remoteAddr, "link", e.linkHash[:16])
}

// Register adds the download-log pruning job to r, every
// Config.PruneEvery. Call it before r.Run. Every replica registers it; the
// job queue's unique key per window makes it one run across them, and a
// second run would find nothing left to delete.
func (s *Service) Register(r *jobs.Runner) {
	r.Handle(KindPruneLog, func(ctx context.Context, _ *jobs.Job) error {
		n, err := s.PruneLog(ctx)
		r.CountPruned("download_log", n)
		return err
	}, jobs.Options{Every: s.c.PruneEvery, MaxAttempts: 1})
}

// PruneLog deletes download-log rows older than the retention and returns
// how many it deleted.
func (s *Service) PruneLog(ctx context.Context) (int64, error) {
	cutoff := models.Time(s.c.Now().Add(-s.c.LogRetention))
	n, err := models.DeleteInBatches[int64](ctx, s.c.DB, &models.DownloadLog{}, "id", "created_at < ?", cutoff)
	if err != nil {
		return n, fmt.Errorf("download: prune log: %w", err)
	}
	if n > 0 {
		s.c.Log.InfoContext(ctx, "download log pruned", "rows", n, "before", cutoff)
	}
	return n, nil
}
