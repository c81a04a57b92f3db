package server

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/quota"
)

// meJSON is GET /me: the caller, what they use and what they may.
type meJSON struct {
	userJSON
	Usage *usageJSON `json:"usage,omitempty"`
	Quota *quotaJSON `json:"quota,omitempty"`
}

// usageJSON is what a user holds: bytes their files store (content held
// in several files once), bytes their unfinished uploads reserve, files,
// uploads still uploading, and exports created in the last 24 hours.
type usageJSON struct {
	Bytes         int64 `json:"bytes"`
	ReservedBytes int64 `json:"reserved_bytes"`
	Files         int64 `json:"files"`
	OpenUploads   int64 `json:"open_uploads"`
	Exports24h    int   `json:"exports_24h"`
}

// quotaJSON is a user's limits; 0 is unlimited.
type quotaJSON struct {
	Bytes         int64 `json:"bytes"`
	ExportsPerDay int   `json:"exports_per_day"`
	OpenUploads   int   `json:"open_uploads"`
	// MaxFileSize is FERRY_MAX_UPLOAD_SIZE, so a client refuses a larger
	// file before reading it.
	MaxFileSize int64 `json:"max_file_size,omitempty"`
}

// overridesJSON are an administrator's per-user settings; null takes the
// server's.
type overridesJSON struct {
	Bytes         *int64 `json:"bytes"`
	ExportsPerDay *int   `json:"exports_per_day"`
}

func (s *Server) me(c *gin.Context) error {
	u := caller(c)
	out := meJSON{userJSON: toUserJSON(u)}
	if s.d.Uploads == nil {
		c.PureJSON(http.StatusOK, out)
		return nil
	}
	ctx := c.Request.Context()
	use, err := s.d.Uploads.Usage(ctx, u.ID)
	if err != nil {
		return err
	}
	out.Usage = &usageJSON{Bytes: use.Bytes, ReservedBytes: use.Reserved, Files: use.Files, OpenUploads: use.OpenUploads}
	if s.d.Exports != nil {
		if out.Usage.Exports24h, err = s.d.Exports.RecentCount(ctx, u.ID); err != nil {
			return err
		}
	}
	out.Quota = &quotaJSON{OpenUploads: s.d.Uploads.MaxOpen(), MaxFileSize: s.d.Uploads.MaxSize()}
	if s.d.Quotas != nil {
		l, err := s.d.Quotas.For(ctx, u.ID)
		if err != nil {
			return err
		}
		out.Quota.Bytes, out.Quota.ExportsPerDay = l.Bytes, l.ExportsPerDay
	}
	c.Header("Cache-Control", "no-store")
	c.PureJSON(http.StatusOK, out)
	return nil
}

// patchUser changes a user's settings: for now their quotas,
// {quota_bytes, quota_exports_per_day}, each a number (0 is unlimited)
// or null (back to the server's setting); an absent field is left as it
// is.
func (s *Server) patchUser(c *gin.Context) error {
	if s.d.Quotas == nil {
		return errkind.New(errkind.NotFound, "route_not_found", "no such route")
	}
	var req struct {
		QuotaBytes         json.RawMessage `json:"quota_bytes"`
		QuotaExportsPerDay json.RawMessage `json:"quota_exports_per_day"`
	}
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	var ch quota.Change
	var err error
	if ch.Bytes, err = quotaField[int64](req.QuotaBytes, "quota_bytes"); err != nil {
		return err
	}
	if ch.ExportsPerDay, err = quotaField[int](req.QuotaExportsPerDay, "quota_exports_per_day"); err != nil {
		return err
	}
	ctx := c.Request.Context()
	u, err := s.d.Users.Get(ctx, c.Param("id"))
	if err != nil {
		return err
	}
	l, o, err := s.d.Quotas.Set(ctx, u.ID, ch)
	if err != nil {
		return err
	}
	c.PureJSON(http.StatusOK, gin.H{"user": toUserJSON(u),
		"quota":           quotaJSON{Bytes: l.Bytes, ExportsPerDay: l.ExportsPerDay, OpenUploads: s.openLimit()},
		"quota_overrides": overridesJSON{Bytes: o.Bytes, ExportsPerDay: o.ExportsPerDay}})
	return nil
}

func (s *Server) openLimit() int {
	if s.d.Uploads == nil {
		return 0
	}
	return s.d.Uploads.MaxOpen()
}

// quotaField reads one field of a PATCH: absent, null, or a whole number
// of at least 0.
func quotaField[T int | int64](raw json.RawMessage, name string) (quota.Field[T], error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0:
		return quota.Field[T]{}, nil
	case string(raw) == "null":
		return quota.Field[T]{Set: true}, nil
	}
	n, ok := parseWhole(string(raw), 0)
	if !ok || int64(T(n)) != n {
		return quota.Field[T]{}, errkind.Invalidf("invalid_"+name, "%s must be a whole number of at least 0 (0 is unlimited), or null for the server's setting", name)
	}
	v := T(n)
	return quota.Field[T]{Set: true, Value: &v}, nil
}
