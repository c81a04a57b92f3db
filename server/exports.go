package server

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ferry-io/ferry/export"
)

// exportBodyLimit caps POST /exports bodies, far below the global limit:
// the body is one short field.
const exportBodyLimit = 4 << 10

// routeExports registers the export API (docs/exports.md). The download
// route is the download proxy's.
func (s *Server) routeExports(authed, admin *gin.RouterGroup) {
	authed.POST("/exports", s.limitCreates, h(s.createExport))
	authed.GET("/exports", h(s.listExports))
	authed.GET("/exports/:id", h(s.getExport))
	authed.DELETE("/exports/:id", h(s.revokeExport(false)))
	admin.POST("/exports/:id/revoke", h(s.revokeExport(true)))
}

type exportJSON struct {
	JobID       string     `json:"job_id"`
	State       string     `json:"state"`
	Scope       string     `json:"scope"`
	CreatedAt   time.Time  `json:"created_at"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
	Messages    *int64     `json:"messages,omitempty"`
	SHA256      string     `json:"sha256,omitempty"`
	Bytes       int64      `json:"bytes,omitempty"`
	DownloadURL string     `json:"download_url,omitempty"`
	LinkExpires *time.Time `json:"download_url_expires_at,omitempty"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`
	Error       string     `json:"error,omitempty"`
}

func toExportJSON(v export.View) exportJSON {
	out := exportJSON{JobID: v.ID, State: v.State, Scope: v.Scope, CreatedAt: v.CreatedAt, FinishedAt: v.FinishedAt,
		Messages: v.Messages, SHA256: v.SHA256, Bytes: v.Bytes, DownloadURL: v.DownloadURL, ExpiresAt: v.ExpiresAt, Error: v.Error}
	if v.DownloadURL != "" {
		out.LinkExpires = &v.LinkExpires
	}
	return out
}

func (s *Server) createExport(c *gin.Context) error {
	key, err := parseIdempotencyKey(c.Request.Header.Values("Idempotency-Key"))
	if err != nil {
		return err
	}
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, exportBodyLimit)
	var req struct {
		Scope string `json:"scope"`
	}
	if err := bindStrict(c, &req, nil); err != nil {
		return err
	}
	v, replayed, err := s.d.Exports.Create(c.Request.Context(), caller(c).ID, key, export.Request{Scope: req.Scope})
	if err != nil {
		return err
	}
	status := http.StatusAccepted
	if replayed {
		status = http.StatusOK
	}
	c.Header("Location", "/exports/"+v.ID)
	c.PureJSON(status, gin.H{"job_id": v.ID, "state": v.State, "replayed": replayed})
	return nil
}

func (s *Server) listExports(c *gin.Context) error {
	cursor, limit, err := pageQuery(c)
	if err != nil {
		return err
	}
	list, next, err := s.d.Exports.List(c.Request.Context(), caller(c).ID, cursor, limit)
	if err != nil {
		return err
	}
	out := make([]exportJSON, len(list))
	for i, v := range list {
		out[i] = toExportJSON(v)
		out[i].DownloadURL, out[i].LinkExpires = "", nil // links come one export at a time
	}
	c.PureJSON(http.StatusOK, pageBody("exports", out, next))
	return nil
}

func (s *Server) getExport(c *gin.Context) error {
	v, err := s.d.Exports.Get(c.Request.Context(), caller(c).ID, c.Param("id"))
	if err != nil {
		return err
	}
	c.Header("Cache-Control", "no-store") // the answer carries a signed link
	c.PureJSON(http.StatusOK, toExportJSON(v))
	return nil
}

func (s *Server) revokeExport(asAdmin bool) func(*gin.Context) error {
	return func(c *gin.Context) error {
		owner := caller(c).ID
		if asAdmin {
			owner = ""
		}
		v, err := s.d.Exports.Revoke(c.Request.Context(), owner, c.Param("id"))
		if err != nil {
			return err
		}
		c.PureJSON(http.StatusOK, toExportJSON(v))
		return nil
	}
}
