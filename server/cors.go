package server

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/ferry-io/ferry/download"
	"github.com/ferry-io/ferry/errkind"
)

// exposedHeaders are the answer headers a page on another origin may
// read: the version of a resource, where a new one is, and what a problem
// answer says beyond its body (when to retry, which request to quote).
// Content-Range, Accept-Ranges and Content-Disposition are for ranged
// downloads through the proxy.
const exposedHeaders = "ETag, Location, Retry-After, X-Request-Id, Content-Range, Accept-Ranges, Content-Disposition"

// apiCORS lets ferry's configured origins (FERRY_PUBLIC_URL's and
// FERRY_CORS_ORIGINS) call the native JSON API from their pages with a
// bearer token or an upload ticket: the JS SDK on a host app's page. It
// never allows credentials: a cookie is ferry's own pages' credential
// (authenticate refuses one sent from another origin), so a page
// elsewhere can act only with a credential its backend chose to give it.
// The Companion routes have their own grant (companionCORS); sign-in and
// sign-out are for ferry's own pages and get none.
func (s *Server) apiCORS() gin.HandlerFunc {
	api := s.cors(false, "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS",
		"Authorization, Content-Type, Accept, Idempotency-Key, If-Match, If-None-Match, If-Range, Range")
	assets := s.cors(false, "GET, HEAD, OPTIONS", "Accept, Range")
	return func(c *gin.Context) {
		switch p := c.Request.URL.Path; {
		case strings.HasPrefix(p, "/assets/"):
			// The SDK (/assets/ferry.js) and its hashing worker, which
			// a page elsewhere imports, and fetches to start the worker
			// from a Blob URL of its own origin.
			assets(c)
		case nativeAPIPath(p):
			api(c)
		default:
			c.Next()
		}
	}
}

// nativeAPIRoots are the first path segments of the native JSON API that
// a page on another origin may call.
var nativeAPIRoots = map[string]bool{
	"uploads": true, "files": true, "grants": true, "exports": true, "me": true,
	"tickets": true, "conversations": true, "admin": true,
	strings.Trim(download.PathPrefix, "/"): true,
}

func nativeAPIPath(p string) bool {
	root, rest, _ := strings.Cut(strings.TrimPrefix(p, "/"), "/")
	if root == "tickets" && rest != "" {
		return false // /tickets/{ticket}/s3/…: the Companion routes
	}
	return nativeAPIRoots[root]
}

// cors grants ferry's configured origins access, with cookies when
// credentials is set, and answers their preflights for methods and
// headers; other origins get no CORS header at all, and their preflights
// a 403.
func (s *Server) cors(credentials bool, methods, headers string) gin.HandlerFunc {
	return func(c *gin.Context) {
		origin := c.GetHeader("Origin")
		allowed := origin != "" && s.allowedOrigin(origin)
		hd := c.Writer.Header()
		hd.Add("Vary", "Origin")
		if allowed {
			hd.Set("Access-Control-Allow-Origin", origin)
			hd.Set("Access-Control-Expose-Headers", exposedHeaders)
			if credentials {
				hd.Set("Access-Control-Allow-Credentials", "true")
			}
		}
		if c.Request.Method != http.MethodOptions {
			c.Next()
			return
		}
		if !allowed {
			abort(c, errkind.New(errkind.Forbidden, "cross_origin", "this origin may not call ferry"))
			return
		}
		hd.Set("Access-Control-Allow-Methods", methods)
		hd.Set("Access-Control-Allow-Headers", headers)
		hd.Set("Access-Control-Max-Age", "600")
		c.AbortWithStatus(http.StatusNoContent)
	}
}

func (s *Server) allowedOrigin(origin string) bool {
	for _, o := range s.d.Origins {
		if o == origin {
			return true
		}
	}
	return false
}

// fromOwnOrigin says a request comes from one of ferry's own pages, or
// from no browser at all: what a session cookie is accepted from on the
// native API. Browsers say so in Sec-Fetch-Site; one too old for it sends
// Origin on every cross-origin request, which must then be ferry's public
// origin or the Host it asked.
func (s *Server) fromOwnOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return true
	case "":
	default:
		return false
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	if pu, err := url.Parse(s.d.PublicURL); err == nil && pu.Host != "" && o == pu.Scheme+"://"+pu.Host {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}
