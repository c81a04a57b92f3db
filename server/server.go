package server

import (
	"context"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ferry-io/ferry/chat"
	"github.com/ferry-io/ferry/download"
	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/export"
	"github.com/ferry-io/ferry/notify"
	"github.com/ferry-io/ferry/upload"
	"github.com/ferry-io/ferry/users"
)

// ReadyCheck is one dependency /readyz checks.
type ReadyCheck struct {
	Name  string
	Check func(context.Context) error
}

// Deps is everything the HTTP layer uses. Domain services are interfaces
// or concrete types from their own packages; server never touches the
// database or S3 itself.
type Deps struct {
	Log        *slog.Logger
	Users      *users.Service
	Webhooks   *notify.Service   // nil: no webhook routes
	Uploads    *upload.Service   // nil leaves the upload and files routes out
	Downloads  *download.Service // nil: no /download route
	Chat       *chat.Service
	Exports    *export.Service
	Web        fs.FS // the browser UI's files (package web); nil serves no UI
	Gatherer   prometheus.Gatherer
	Registerer prometheus.Registerer
	Ready      []ReadyCheck

	MaxBodyBytes  int64
	PublicURL     string   // how browsers reach ferry (scheme://host[:port])
	Origins       []string // ferry's browser origins, for the CSRF check and CORS
	SecureCookies bool
	SessionTTL    time.Duration
}

// Server is ferry's HTTP API.
type Server struct {
	d      Deps
	engine *gin.Engine
}

// New builds the router.
func New(d Deps) *Server {
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	e.HandleMethodNotAllowed = true
	e.RedirectTrailingSlash = false
	e.RedirectFixedPath = false
	e.ContextWithFallback = true
	// Only trust X-Forwarded-For from a local proxy.
	_ = e.SetTrustedProxies([]string{"127.0.0.1", "::1"})

	s := &Server{d: d, engine: e}
	m := newHTTPMetrics(d.Registerer)
	e.Use(requestID(), recovery(d.Log), accessLog(d.Log, m), securityHeaders(), bodyLimit(d.MaxBodyBytes))
	e.NoRoute(func(c *gin.Context) {
		writeProblem(c, Problem{Type: "about:blank", Status: 404, Title: "Not Found", Code: "route_not_found",
			Detail: "no such route", RequestID: c.Writer.Header().Get("X-Request-Id")})
	})
	e.NoMethod(func(c *gin.Context) {
		writeProblem(c, Problem{Type: "about:blank", Status: 405, Title: "Method Not Allowed", Code: "method_not_allowed",
			Detail: c.Request.Method + " is not allowed here", RequestID: c.Writer.Header().Get("X-Request-Id")})
	})

	e.GET("/healthz", s.healthz)
	e.HEAD("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.HEAD("/readyz", s.readyz)
	e.GET("/metrics", gin.WrapH(promhttp.HandlerFor(d.Gatherer, promhttp.HandlerOpts{})))
	if d.Web != nil {
		s.routeWeb(e)
	}

	api := e.Group("/", s.authenticate())
	api.POST("/session", h(s.createSession))
	api.DELETE("/session", h(s.deleteSession))

	authed := api.Group("/", requireUser)
	authed.GET("/me", h(s.me))
	if d.Uploads != nil {
		s.routeUploads(authed)
		s.routeCompanion(e)
	}

	admin := api.Group("/admin", requireAdmin)
	admin.GET("/users", h(s.listUsers))
	admin.POST("/users", h(s.createUser))
	admin.POST("/users/:id/deactivate", h(s.setActive(false)))
	admin.POST("/users/:id/activate", h(s.setActive(true)))
	s.routeWebhooks(admin)
	s.routeDownloads(e)
	s.routeChat(authed)
	s.routeExports(authed, admin)
	return s
}

// Handler returns the http.Handler to serve.
func (s *Server) Handler() http.Handler { return s.engine }

func (s *Server) healthz(c *gin.Context) {
	c.JSON(http.StatusOK, gin.H{"status": "ok"})
}

// readyz checks every dependency with a short timeout and names the ones
// that failed, so an operator sees which one is down.
func (s *Server) readyz(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), 3*time.Second)
	defer cancel()
	checks := gin.H{}
	ok := true
	for _, rc := range s.d.Ready {
		if err := rc.Check(ctx); err != nil {
			ok = false
			checks[rc.Name] = "fail"
			s.d.Log.WarnContext(ctx, "readiness check failed", "check", rc.Name, "err", err)
		} else {
			checks[rc.Name] = "ok"
		}
	}
	if !ok {
		c.JSON(http.StatusServiceUnavailable, gin.H{"status": "unavailable", "checks": checks})
		return
	}
	c.JSON(http.StatusOK, gin.H{"status": "ok", "checks": checks})
}

// userJSON is a user as the API shows it.
type userJSON struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Admin     bool      `json:"admin"`
	Active    bool      `json:"active"`
	CreatedAt time.Time `json:"created_at"`
	Token     string    `json:"token,omitempty"`
}

func toUserJSON(u users.User) userJSON {
	return userJSON{ID: u.ID, Name: u.Name, Admin: u.Admin, Active: u.Active, CreatedAt: u.CreatedAt}
}

func (s *Server) me(c *gin.Context) error {
	c.JSON(http.StatusOK, toUserJSON(caller(c)))
	return nil
}

func (s *Server) listUsers(c *gin.Context) error {
	list, err := s.d.Users.List(c.Request.Context())
	if err != nil {
		return err
	}
	out := make([]userJSON, len(list))
	for i, u := range list {
		out[i] = toUserJSON(u)
	}
	c.JSON(http.StatusOK, gin.H{"users": out})
	return nil
}

func (s *Server) createUser(c *gin.Context) error {
	var req struct {
		Name  string `json:"name"`
		Admin bool   `json:"admin"`
	}
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	u, token, err := s.d.Users.Create(c.Request.Context(), req.Name, req.Admin)
	if err != nil {
		return err
	}
	out := toUserJSON(u)
	out.Token = token
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusCreated, out)
	return nil
}

func (s *Server) setActive(active bool) func(*gin.Context) error {
	return func(c *gin.Context) error {
		if !active && c.Param("id") == caller(c).ID {
			return errkind.New(errkind.Conflict, "self_deactivation", "an admin cannot deactivate their own account")
		}
		u, err := s.d.Users.SetActive(c.Request.Context(), c.Param("id"), active)
		if err != nil {
			return err
		}
		c.JSON(http.StatusOK, toUserJSON(u))
		return nil
	}
}

func (s *Server) createSession(c *gin.Context) error {
	var req struct {
		Token string `json:"token"`
	}
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	if req.Token == "" {
		return errkind.Invalidf("missing_token", "token is required")
	}
	u, secret, expires, err := s.d.Users.CreateSession(c.Request.Context(), req.Token)
	if err != nil {
		return err
	}
	s.setSessionCookie(c, secret, expires)
	c.JSON(http.StatusOK, gin.H{"user": toUserJSON(u), "expires_at": expires})
	return nil
}

func (s *Server) deleteSession(c *gin.Context) error {
	if ck, err := c.Request.Cookie(SessionCookie); err == nil && ck.Value != "" {
		if err := s.d.Users.DeleteSession(c.Request.Context(), ck.Value); err != nil {
			return err
		}
	}
	s.setSessionCookie(c, "", time.Time{})
	c.Status(http.StatusNoContent)
	return nil
}
