package server

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ferry-io/ferry/download"
)

// routeDownloads registers the download proxy. It sits outside the
// authenticated groups: the signed link is the credential, so curl, wget
// and aria2 need nothing else, and a browser with a stale session cookie
// can still download. Gin's GET does not answer HEAD, hence both.
func (s *Server) routeDownloads(e *gin.Engine) {
	e.GET(download.PathPrefix+":id", s.download)
	e.HEAD(download.PathPrefix+":id", s.download)
}

func (s *Server) download(c *gin.Context) {
	req := download.Request{ID: c.Param("id"), Caller: s.optionalCaller(c), RemoteAddr: c.ClientIP()}
	sent := s.d.Downloads.Serve(c.Writer, c.Request, req, func(w http.ResponseWriter, err error) {
		_ = c.Error(err)
		writeProblemTo(w, c.Request.URL.Path, problemFor(c.Request.Context(), err))
	})
	if sent > 0 {
		// Serve may have sent most of the body past gin's writer.
		c.Set(bodyBytesKey, sent)
	}
}

// optionalCaller returns the id of the user a valid bearer token or
// session cookie names, or "". Bad credentials are not an error here: the
// link decides.
func (s *Server) optionalCaller(c *gin.Context) string {
	ctx := c.Request.Context()
	if tok := bearer(c.Request); tok != "" {
		if u, err := s.d.Users.Authenticate(ctx, tok); err == nil {
			return u.ID
		}
		return ""
	}
	if ck, err := c.Request.Cookie(SessionCookie); err == nil && ck.Value != "" {
		if u, err := s.d.Users.SessionUser(ctx, ck.Value); err == nil {
			return u.ID
		}
	}
	return ""
}
