package server

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ferry-io/ferry/upload"
	"github.com/ferry-io/ferry/users"
)

// routeGrants adds download grants: a file's owner, or a service key with
// grants:create, lets another user download it.
func (s *Server) routeGrants(api *gin.RouterGroup) {
	g := userOrScope(users.ScopeGrantsCreate)
	api.POST("/files/:id/grants", g, h(s.createGrant))
	api.GET("/files/:id/grants", g, h(s.listGrants))
	api.GET("/grants/:id", g, h(s.getGrant))
	api.DELETE("/grants/:id", g, h(s.revokeGrant))
}

// grantJSON is a grant as the API shows it. download_url, a link signed
// for the grantee, is given while the grant is active, one grant at a
// time (not in lists).
type grantJSON struct {
	GrantID     string     `json:"grant_id"`
	FileID      string     `json:"file_id"`
	UserID      string     `json:"user_id"`
	State       string     `json:"state"`
	CreatedAt   time.Time  `json:"created_at"`
	ExpiresAt   *time.Time `json:"expires_at"`
	RevokedAt   *time.Time `json:"revoked_at,omitempty"`
	DownloadURL string     `json:"download_url,omitempty"`
	LinkExpires *time.Time `json:"download_url_expires_at,omitempty"`
}

func toGrantJSON(g upload.Grant) grantJSON {
	out := grantJSON{GrantID: g.ID, FileID: g.FileID, UserID: g.UserID, State: g.State, CreatedAt: g.CreatedAt,
		ExpiresAt: g.ExpiresAt, RevokedAt: g.RevokedAt, DownloadURL: g.DownloadURL}
	if g.DownloadURL != "" {
		out.LinkExpires = &g.LinkExpires
	}
	return out
}

// grantActor is who calls a grant route: a user (owner checks apply) or a
// service key ("": any file), and how the record names them.
func grantActor(c *gin.Context) (owner, by string) {
	if k, ok := serviceKey(c); ok {
		return "", k.ID
	}
	u := caller(c)
	return u.ID, u.ID
}

func (s *Server) createGrant(c *gin.Context) error {
	var req struct {
		UserID    string `json:"user_id"`
		Subject   string `json:"subject"`
		ExpiresIn *int64 `json:"expires_in"`
	}
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	ttl, err := seconds(req.ExpiresIn, "expires_in")
	if err != nil {
		return err
	}
	owner, by := grantActor(c)
	grantee, err := s.subjectUser(c, req.UserID, req.Subject)
	if err != nil {
		return err
	}
	g, err := s.d.Uploads.CreateGrant(c.Request.Context(), upload.GrantRequest{
		Owner: owner, FileID: c.Param("id"), UserID: grantee.ID, CreatedBy: by, TTL: ttl,
	})
	if err != nil {
		return err
	}
	c.Header("Cache-Control", "no-store")
	c.PureJSON(http.StatusCreated, toGrantJSON(g))
	return nil
}

func (s *Server) listGrants(c *gin.Context) error {
	owner, _ := grantActor(c)
	list, err := s.d.Uploads.Grants(c.Request.Context(), owner, c.Param("id"))
	if err != nil {
		return err
	}
	out := make([]grantJSON, len(list))
	for i, g := range list {
		out[i] = toGrantJSON(g)
	}
	c.PureJSON(http.StatusOK, gin.H{"grants": out})
	return nil
}

func (s *Server) getGrant(c *gin.Context) error {
	viewer, _ := grantActor(c)
	g, err := s.d.Uploads.Grant(c.Request.Context(), viewer, c.Param("id"))
	if err != nil {
		return err
	}
	c.Header("Cache-Control", "no-store")
	c.PureJSON(http.StatusOK, toGrantJSON(g))
	return nil
}

func (s *Server) revokeGrant(c *gin.Context) error {
	owner, _ := grantActor(c)
	if _, err := s.d.Uploads.RevokeGrant(c.Request.Context(), owner, c.Param("id")); err != nil {
		return err
	}
	c.Status(http.StatusNoContent)
	return nil
}
