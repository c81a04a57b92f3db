package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/upload"
	"github.com/ferry-io/ferry/users"
)

// SessionCookie is the name of ferry's browser session cookie.
const SessionCookie = "ferry_session"

const (
	userKey       = "ferry.user"
	serviceKeyKey = "ferry.service_key"
)

var (
	errForbiddenOrigin = errkind.New(errkind.Forbidden, "cross_origin", "cookie-authenticated requests must come from ferry's own origin")
	errCookieOrigin    = errkind.New(errkind.Forbidden, "cross_origin", "the session cookie is accepted from ferry's own pages only; from another origin send a bearer token or an upload ticket")
	errSignInOrigin    = errkind.New(errkind.Forbidden, "cross_origin", "sign in from a page of ferry's own origin")
)

// newCrossOrigin returns the CSRF check for ferry's browser origins:
// net/http's CrossOriginProtection, which trusts Sec-Fetch-Site (sent by
// every browser since 2023) and falls back to comparing Origin with Host.
// It lets safe methods and requests without either header (curl, the Go
// client) through; FERRY_PUBLIC_URL and FERRY_CORS_ORIGINS are trusted as
// well, so a page behind a proxy that rewrites Host still signs in.
func newCrossOrigin(origins []string) (*http.CrossOriginProtection, error) {
	p := http.NewCrossOriginProtection()
	for _, o := range origins {
		if err := p.AddTrustedOrigin(o); err != nil {
			return nil, fmt.Errorf("server: origin %q: %w", o, err)
		}
	}
	return p, nil
}

// refuseCrossOriginSignIn guards POST /session whether or not a cookie
// came along: without it, a page elsewhere could sign the visitor's
// browser in as the attacker (login CSRF), and whatever the visitor then
// uploads lands in the attacker's account.
func (s *Server) refuseCrossOriginSignIn(c *gin.Context) {
	if s.csrf.Check(c.Request) != nil {
		abort(c, errSignInOrigin)
		return
	}
	c.Next()
}

// authenticate resolves the caller from a bearer credential or the
// session cookie, against the database on every request. A bearer is a
// user's API token (fry_…), a service key (fsk_…), a host app's JWT or an
// upload ticket (ftk_…, tickets.go), which opens only its one upload. A request with
// neither continues anonymously; the route's guard refuses it. A request
// whose credentials are present but bad is refused here, so a stale token
// never silently degrades to anonymous, and counts against its client
// address's failed-authentication limit.
func (s *Server) authenticate() gin.HandlerFunc {
	return func(c *gin.Context) {
		ctx := c.Request.Context()
		tok := bearer(c.Request)
		ck, _ := c.Request.Cookie(SessionCookie)
		if tok == "" && (ck == nil || ck.Value == "") {
			c.Next()
			return
		}
		// An address that used up its failed authentications waits. Signing
		// out with a cookie is never refused (it answers 204 whatever the
		// cookie), and signing in checks the token it is given itself.
		if tok != "" || c.FullPath() != "/session" {
			if err := s.refuseIfLocked(c); err != nil {
				abort(c, err)
				return
			}
		}
		if tok != "" {
			if err := s.authenticateBearer(c, tok); err != nil {
				s.authFailed(c, err)
				abort(c, err)
				return
			}
			c.Next()
			return
		}
		u, err := s.d.Users.SessionUser(ctx, ck.Value)
		if err != nil {
			if errors.Is(err, errkind.Unauthenticated) && c.FullPath() == "/session" {
				// Signing in again or signing out with an expired or
				// unknown cookie is fine: the handler replaces or clears
				// it, and a sign-out that answered 401 would leave the
				// stale cookie in the browser.
				c.Next()
				return
			}
			s.authFailed(c, err)
			abort(c, err)
			return
		}
		// A cookie is ferry's own pages' credential. The native API answers
		// CORS to FERRY_CORS_ORIGINS without credentials, but a request's
		// effects happen whether or not its page may read the answer, so a
		// cookie sent from another origin, even an allowed one, is refused:
		// pages elsewhere use a bearer token or a ticket. The Companion
		// routes, which Uppy 6 calls with cookies, grant credentials to
		// ferry's origins and keep the CSRF check below.
		if !c.GetBool(companionStyle) && !s.fromOwnOrigin(c.Request) {
			abort(c, errCookieOrigin)
			return
		}
		// SameSite=Lax already keeps the cookie off cross-site POSTs; this
		// also stops same-site attackers (a sibling subdomain).
		if s.csrf.Check(c.Request) != nil {
			abort(c, errForbiddenOrigin)
			return
		}
		c.Set(userKey, u)
		c.Next()
	}
}

// authenticateBearer resolves a bearer credential by its kind, told by its
// prefix, and records the caller on c.
func (s *Server) authenticateBearer(c *gin.Context, tok string) error {
	ctx := c.Request.Context()
	if strings.HasPrefix(tok, upload.TicketPrefix) {
		return s.authenticateTicket(c, tok)
	}
	if strings.HasPrefix(tok, users.ServiceKeyPrefix) {
		k, err := s.d.Users.AuthenticateServiceKey(ctx, tok)
		if err != nil {
			return err
		}
		c.Set(serviceKeyKey, k)
		return nil
	}
	var u users.User
	var err error
	if users.LooksLikeJWT(tok) {
		u, err = s.jwtUser(ctx, tok)
	} else {
		u, err = s.d.Users.Authenticate(ctx, tok)
	}
	if err != nil {
		return err
	}
	c.Set(userKey, u)
	return nil
}

var errJWTNotAccepted = errkind.New(errkind.Unauthenticated, "jwt_not_accepted", "this ferry accepts no JWTs (FERRY_JWT_ISSUER is not set)")

// jwtUser verifies a host app's JWT and returns the ferry user it names,
// created on first sight.
func (s *Server) jwtUser(ctx context.Context, tok string) (users.User, error) {
	if s.d.JWT == nil {
		return users.User{}, errJWTNotAccepted
	}
	id, err := s.d.JWT.Verify(ctx, tok)
	if err != nil {
		return users.User{}, err
	}
	return s.d.Users.External(ctx, id)
}

var (
	errUserRequired       = errkind.New(errkind.Forbidden, "user_required", "a service key cannot call this endpoint; it needs a user's credentials")
	errServiceKeyRequired = errkind.New(errkind.Forbidden, "service_key_required", "this endpoint is for service keys")
	errAdminOnly          = errkind.New(errkind.Forbidden, "admin_only", "this endpoint is for administrators")
)

// refuseAnonymous answers 401 with the challenge RFC 9110 asks for.
func refuseAnonymous(c *gin.Context) {
	c.Header("WWW-Authenticate", `Bearer realm="ferry"`)
	abort(c, users.ErrUnauthenticated)
}

// requireUser admits people: an API token, a session or a JWT. A service
// key is refused with 403, as it is no user: it acts for one only on the
// routes whose guard says so.
func requireUser(c *gin.Context) {
	switch _, isKey := serviceKey(c); {
	case isUser(c):
		c.Next()
	case isKey:
		abort(c, errUserRequired)
	default:
		refuseAnonymous(c)
	}
}

func requireAdmin(c *gin.Context) {
	switch _, isKey := serviceKey(c); {
	case isUser(c) && caller(c).Admin:
		c.Next()
	case isUser(c) || isKey:
		abort(c, errAdminOnly)
	default:
		refuseAnonymous(c)
	}
}

// requireScope admits only service keys that hold scope: 403 missing_scope
// (naming the scope) for a key without it, 403 service_key_required for a
// user, 401 without credentials. Routes that users call too take
// userOrScope or adminOrScope instead.
func requireScope(scope string) gin.HandlerFunc {
	return admit(scope, func(*gin.Context) error { return errServiceKeyRequired })
}

// userOrScope admits every user (the handler applies its own rule, such as
// "only the owner") and the service keys that hold scope.
func userOrScope(scope string) gin.HandlerFunc {
	return admit(scope, func(*gin.Context) error { return nil })
}

// adminOrScope admits administrators and the service keys that hold scope.
func adminOrScope(scope string) gin.HandlerFunc {
	return admit(scope, func(c *gin.Context) error {
		if !caller(c).Admin {
			return errAdminOnly
		}
		return nil
	})
}

// admit is the guard behind requireScope, userOrScope and adminOrScope: a
// service key must hold scope, and a user passes when userOK says so.
func admit(scope string, userOK func(*gin.Context) error) gin.HandlerFunc {
	missing := errkind.New(errkind.Forbidden, "missing_scope", "this service key lacks the scope %s", scope).With("scope", scope)
	return func(c *gin.Context) {
		if k, ok := serviceKey(c); ok {
			if !k.Has(scope) {
				abort(c, missing)
				return
			}
			c.Next()
			return
		}
		if !isUser(c) {
			refuseAnonymous(c)
			return
		}
		if err := userOK(c); err != nil {
			abort(c, err)
			return
		}
		c.Next()
	}
}

func isUser(c *gin.Context) bool {
	_, ok := c.Get(userKey)
	return ok
}

// caller returns the authenticated user. Only call it behind a guard that
// admitted a user.
func caller(c *gin.Context) users.User {
	return c.MustGet(userKey).(users.User)
}

// serviceKey returns the service key that authenticated the request, if a
// service key did.
func serviceKey(c *gin.Context) (users.ServiceKey, bool) {
	k, ok := c.Get(serviceKeyKey)
	if !ok {
		return users.ServiceKey{}, false
	}
	return k.(users.ServiceKey), true
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
