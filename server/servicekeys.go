package server

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ferry-io/ferry/users"
)

// routeServiceKeys registers the service-key admin API. Only
// administrators reach it: a service key cannot mint or revoke keys.
func (s *Server) routeServiceKeys(admin *gin.RouterGroup) {
	admin.POST("/service-keys", h(s.createServiceKey))
	admin.GET("/service-keys", h(s.listServiceKeys))
	admin.DELETE("/service-keys/:id", h(s.revokeServiceKey))
}

// serviceKeyJSON is a service key as the API shows it. Key is present only
// in the answer to create.
type serviceKeyJSON struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Scopes     []string   `json:"scopes"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	Key        string     `json:"key,omitempty"`
}

func toServiceKeyJSON(k users.ServiceKey) serviceKeyJSON {
	return serviceKeyJSON{ID: k.ID, Name: k.Name, Scopes: k.Scopes, CreatedAt: k.CreatedAt, LastUsedAt: k.LastUsedAt}
}

func (s *Server) createServiceKey(c *gin.Context) error {
	var req struct {
		Name   string   `json:"name"`
		Scopes []string `json:"scopes"`
	}
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	k, secret, err := s.d.Users.CreateServiceKey(c.Request.Context(), req.Name, req.Scopes)
	if err != nil {
		return err
	}
	out := toServiceKeyJSON(k)
	out.Key = secret
	c.Header("Cache-Control", "no-store")
	c.PureJSON(http.StatusCreated, out)
	return nil
}

func (s *Server) listServiceKeys(c *gin.Context) error {
	list, err := s.d.Users.ListServiceKeys(c.Request.Context())
	if err != nil {
		return err
	}
	out := make([]serviceKeyJSON, len(list))
	for i, k := range list {
		out[i] = toServiceKeyJSON(k)
	}
	c.PureJSON(http.StatusOK, gin.H{"service_keys": out})
	return nil
}

func (s *Server) revokeServiceKey(c *gin.Context) error {
	if err := s.d.Users.RevokeServiceKey(c.Request.Context(), c.Param("id")); err != nil {
		return err
	}
	c.Status(http.StatusNoContent)
	return nil
}
