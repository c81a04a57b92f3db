package download

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-io/ferry/models"
)

// entry is one download-log row in the making.
type entry struct {
	resourceID, userID, method, code   string
	status                             int
	bytes                              int64
	rangeHeader, remoteAddr, userAgent string
	linkHash, requestID                string
}

type metrics struct {
	requests  *prometheus.CounterVec
	bytes     prometheus.Counter
	forwarded prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_downloads_total", Help: "Download proxy requests by HTTP status.",
		}, []string{"status"}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_download_bytes_total", Help: "Content bytes sent by the download proxy.",
		}),
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_download_forwarded_links_total",
			Help: "Download links seen from more distinct client addresses than FERRY_DOWNLOAD_LINK_MAX_ADDRS (counted once per link).",
		}),
	}
	// Export the statuses dashboards watch even before the first request.
	for _, st := range []int{200, 206, 304, 403, 404, 410, 412, 416} {
		m.requests.WithLabelValues(strconv.Itoa(st))
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.bytes, m.forwarded)
	}
	return m
}

// record counts the request, writes its download-log row and checks the
// link for forwarding. It runs after the answer is sent, on a context that
// outlives a client that hung up.
func (s *Service) record(ctx context.Context, e entry) {
	s.m.requests.WithLabelValues(strconv.Itoa(e.status)).Inc()
	s.m.bytes.Add(float64(e.bytes))
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
