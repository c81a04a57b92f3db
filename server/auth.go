package server

import (
	"net/http"
	"net/url"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/users"
)

// SessionCookie is the name of ferry's browser session cookie.
const SessionCookie = "ferry_session"

const userKey = "ferry.user"

var errForbiddenOrigin = errkind.New(errkind.Forbidden, "cross_origin", "cookie-authenticated requests must come from ferry's own origin")

// authenticate resolves the caller from a bearer token or the session
// cookie, against the database on every request. A request with neither
// continues anonymously; requireUser refuses it. A request whose
// credentials are present but bad is refused here, so a stale token never
// silently degrades to anonymous.
func (s *Server) authenticate() gin.HandlerFunc {
	return func(c *gin.Context) {
		ctx := c.Request.Context()
		if tok := bearer(c.Request); tok != "" {
			u, err := s.d.Users.Authenticate(ctx, tok)
			if err != nil {
				abort(c, err)
				return
			}
			c.Set(userKey, u)
			c.Next()
			return
		}
		if ck, err := c.Request.Cookie(SessionCookie); err == nil && ck.Value != "" {
			u, err := s.d.Users.SessionUser(ctx, ck.Value)
			if err != nil {
				if c.Request.Method == http.MethodPost && c.FullPath() == "/session" {
					c.Next() // signing in again with a stale cookie is fine
					return
				}
				abort(c, err)
				return
			}
			// SameSite=Lax already keeps the cookie off cross-site POSTs;
			// this also stops same-site attackers (a sibling subdomain).
			if !safeMethod(c.Request.Method) && !s.sameOrigin(c.Request) {
				abort(c, errForbiddenOrigin)
				return
			}
			c.Set(userKey, u)
		}
		c.Next()
	}
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// sameOrigin accepts a request whose Origin (or, failing that, Referer) is
// one of ferry's origins. Browsers always send Origin on cross-origin and on
// same-origin non-GET fetches; a request with neither is not from a browser
// page and cannot be a CSRF.
func (s *Server) sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		if ref := r.Header.Get("Referer"); ref != "" {
			if u, err := url.Parse(ref); err == nil {
				origin = u.Scheme + "://" + u.Host
			}
		}
	}
	if origin == "" {
		return true
	}
	for _, o := range s.d.Origins {
		if o == origin {
			return true
		}
	}
	return false
}

func requireUser(c *gin.Context) {
	if _, ok := c.Get(userKey); !ok {
		c.Header("WWW-Authenticate", `Bearer realm="ferry"`)
		abort(c, users.ErrUnauthenticated)
		return
	}
	c.Next()
}

func requireAdmin(c *gin.Context) {
	u, ok := c.Get(userKey)
	if !ok {
		c.Header("WWW-Authenticate", `Bearer realm="ferry"`)
		abort(c, users.ErrUnauthenticated)
		return
	}
	if !u.(users.User).Admin {
		abort(c, errkind.New(errkind.Forbidden, "admin_only", "this endpoint is for administrators"))
		return
	}
	c.Next()
}

// caller returns the authenticated user. Only call it behind requireUser.
func caller(c *gin.Context) users.User {
	return c.MustGet(userKey).(users.User)
}

func (s *Server) setSessionCookie(c *gin.Context, value string, expires time.Time) {
	maxAge := int(time.Until(expires).Seconds())
	if value == "" {
		maxAge = -1
	}
	http.SetCookie(c.Writer, &http.Cookie{
		Name: SessionCookie, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: s.d.SecureCookies, SameSite: http.SameSiteLaxMode,
	})
}
