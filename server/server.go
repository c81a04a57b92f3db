package server

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ferry-io/ferry/chat"
	"github.com/ferry-io/ferry/download"
	"github.com/ferry-io/ferry/erasure"
	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/export"
	"github.com/ferry-io/ferry/internal/ratelimit"
	"github.com/ferry-io/ferry/notify"
	"github.com/ferry-io/ferry/quota"
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
	Links      *download.Links   // signs chat attachments' links; nil: none
	Chat       *chat.Service
	Exports    *export.Service
	Quotas     *quota.Service
	Erasure    *erasure.Service // nil: no DELETE /admin/users/{id}
	Web        fs.FS            // the browser UI's files (package web); nil serves no UI
	Gatherer   prometheus.Gatherer
	Registerer prometheus.Registerer
	// MetricsElsewhere leaves /metrics out of this router, for when
	// FERRY_METRICS_ADDR serves it on a listener of its own.
	MetricsElsewhere bool
	Ready            []ReadyCheck

	MaxBodyBytes int64
	PublicURL    string   // how browsers reach ferry (scheme://host[:port])
	Origins      []string // ferry's browser origins, for the CSRF check and CORS
	// TrustedProxies are the peers whose X-Forwarded-For (or X-Real-IP)
	// names the client; nil means loopback only, an empty slice none.
	TrustedProxies []netip.Prefix
	SecureCookies  bool

	// AuthFailureLimit bounds refused credentials per client address
	// (FERRY_RATE_AUTH_FAILURES); CreateLimit bounds new uploads, POST
	// policies and exports per user (FERRY_RATE_CREATES). The zero Limit is
	// none. Both are kept in this process's memory.
	AuthFailureLimit ratelimit.Limit
	CreateLimit      ratelimit.Limit

	// JWT verifies the host app's tokens (FERRY_JWT_*); nil refuses every
	// bearer JWT with 401 jwt_not_accepted.
	JWT *users.JWTVerifier
}

// Server is ferry's HTTP API.
type Server struct {
	d      Deps
	engine *gin.Engine
	csrf   *http.CrossOriginProtection
	lim    *limits
}

// New builds the router. It fails on settings it cannot use, such as an
// origin that is not scheme://host[:port].
func New(d Deps) (*Server, error) {
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	e.HandleMethodNotAllowed = true
	e.RedirectTrailingSlash = false
	e.RedirectFixedPath = false
	e.ContextWithFallback = true
	// The client address (c.ClientIP) keys the download log, forwarded-
	// link detection and the rate limits, so X-Forwarded-For counts only
	// from a configured proxy; from anyone else it would let a client
	// pick its own address.
	proxies := []string{"127.0.0.1", "::1"}
	if d.TrustedProxies != nil {
		proxies = make([]string, len(d.TrustedProxies))
		for i, p := range d.TrustedProxies {
			proxies[i] = p.String()
		}
	}
	if err := e.SetTrustedProxies(proxies); err != nil {
		return nil, fmt.Errorf("server: trusted proxies: %w", err)
	}

	csrf, err := newCrossOrigin(d.Origins)
	if err != nil {
		return nil, err
	}
	s := &Server{d: d, engine: e, csrf: csrf, lim: newLimits(d)}
	m := newHTTPMetrics(d.Registerer)
	e.Use(requestID(), profileLabels(), recovery(d.Log), accessLog(d.Log, m), securityHeaders(), bodyLimit(d.MaxBodyBytes))
	e.Use(s.apiCORS())
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
	if !d.MetricsElsewhere {
		e.GET("/metrics", gin.WrapH(MetricsHandler(d.Gatherer)))
	}
	if d.Web != nil {
		s.routeWeb(e)
	}
	if err := s.routeOpenAPI(e); err != nil {
		return nil, err
	}

	api := e.Group("/", s.authenticate())
	api.POST("/session", s.refuseCrossOriginSignIn, h(s.createSession))
	api.DELETE("/session", h(s.deleteSession))

	authed := api.Group("/", requireUser)
	authed.GET("/me", h(s.me))
	if d.Uploads != nil {
		s.routeUploads(api, authed)
		s.routeCompanion(e)
		s.routeTickets(api)
		s.routeGrants(api)
	}

	adminAPI := api.Group("/admin")
	admin := adminAPI.Group("", requireAdmin)
	admin.GET("/users", h(s.listUsers))
	admin.POST("/users", h(s.createUser))
	admin.POST("/users/:id/deactivate", h(s.setActive(false)))
	admin.POST("/users/:id/activate", h(s.setActive(true)))
	admin.PATCH("/users/:id", h(s.patchUser))
	if d.Erasure != nil {
		admin.DELETE("/users/:id", h(s.eraseUser))
	}
	s.routeServiceKeys(admin)
	// A host app's backend manages its webhooks with a service key.
	if d.Webhooks != nil {
		s.routeWebhooks(adminAPI.Group("", adminOrScope(users.ScopeWebhooksManage)))
	}
	// Routes exist only for the services wired: a route to a nil service
	// would answer 500 (or panic) instead of 404.
	if d.Downloads != nil {
		s.routeDownloads(e)
	}
	if d.Chat != nil {
		s.routeChat(authed)
	}
	if d.Exports != nil {
		s.routeExports(authed, admin)
	}
	return s, nil
}

// Handler returns the http.Handler to serve.
func (s *Server) Handler() http.Handler { return s.engine }

// MetricsHandler answers GET /metrics in Prometheus' format from g, on the
// main router or on FERRY_METRICS_ADDR's listener.
func MetricsHandler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{})
}

func (s *Server) healthz(c *gin.Context) {
	c.PureJSON(http.StatusOK, gin.H{"status": "ok"})
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
		c.PureJSON(http.StatusServiceUnavailable, gin.H{"status": "unavailable", "checks": checks})
		return
	}
	c.PureJSON(http.StatusOK, gin.H{"status": "ok", "checks": checks})
}

// userJSON is a user as the API shows it.
type userJSON struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Admin     bool      `json:"admin"`
	Active    bool      `json:"active"`
	Issuer    string    `json:"issuer,omitempty"`  // a host app's user (from a JWT): its iss
	Subject   string    `json:"subject,omitempty"` // and its sub; both absent for ferry's own users
	CreatedAt time.Time `json:"created_at"`
	Token     string    `json:"token,omitempty"`
}

func toUserJSON(u users.User) userJSON {
	return userJSON{ID: u.ID, Name: u.Name, Admin: u.Admin, Active: u.Active, Issuer: u.Issuer, Subject: u.Subject, CreatedAt: u.CreatedAt}
}

// erasureJSON is DELETE /admin/users/{id}'s answer: what was removed.
type erasureJSON struct {
	UserID  string `json:"user_id"`
	Name    string `json:"name"`
	Files   int    `json:"files"`
	Uploads int    `json:"uploads"`
	Exports int    `json:"exports"`
	Objects int    `json:"objects"`
	// DeletedAt is when the erasure committed.
	DeletedAt time.Time `json:"deleted_at"`
}

func (s *Server) eraseUser(c *gin.Context) error {
	r, err := s.d.Erasure.Erase(c.Request.Context(), caller(c).ID, c.Param("id"))
	if err != nil {
		return err
	}
	c.PureJSON(http.StatusOK, erasureJSON{UserID: r.UserID, Name: r.Name, Files: r.Files, Uploads: r.Uploads, Exports: r.Exports, Objects: r.Objects, DeletedAt: r.DeletedAt})
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
	c.PureJSON(http.StatusOK, gin.H{"users": out})
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
	c.PureJSON(http.StatusCreated, out)
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
		c.PureJSON(http.StatusOK, toUserJSON(u))
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
	if err := s.refuseIfLocked(c); err != nil {
		return err
	}
	u, secret, expires, err := s.d.Users.CreateSession(c.Request.Context(), req.Token)
	if err != nil {
		s.authFailed(c, err)
		return err
	}
	s.setSessionCookie(c, secret, expires)
	c.PureJSON(http.StatusOK, gin.H{"user": toUserJSON(u), "expires_at": expires})
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
