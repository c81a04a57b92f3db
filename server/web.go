package server

import (
	"io"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ferry-io/ferry/errkind"
)

// contentSecurityPolicy keeps the UI to its own scripts. connect-src stays
// open because parts go straight to the bucket, whose public endpoint is
// another origin; wasm-unsafe-eval lets the hashing worker run hash-wasm.
const contentSecurityPolicy = "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; worker-src 'self'; " +
	"connect-src *; img-src 'self' data:; style-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// routeWeb serves the browser UI at / and its files under /assets/.
func (s *Server) routeWeb(e *gin.Engine) {
	page := func(c *gin.Context) { s.serveAsset(c, "index.html", contentSecurityPolicy) }
	e.GET("/", page)
	e.HEAD("/", page)
	asset := func(c *gin.Context) { s.serveAsset(c, strings.TrimPrefix(c.Param("file"), "/"), contentSecurityPolicy) }
	e.GET("/assets/*file", asset)
	e.HEAD("/assets/*file", asset)
}

// serveAsset serves one of the UI's files under the page policy csp.
func (s *Server) serveAsset(c *gin.Context, name, csp string) {
	notFound := errkind.New(errkind.NotFound, "asset_not_found", "no such file")
	if name == "" || strings.Contains(name, "..") || !fs.ValidPath(name) {
		abort(c, notFound)
		return
	}
	f, err := s.d.Web.Open(name)
	if err != nil {
		abort(c, notFound)
		return
	}
	defer f.Close()
	rs, ok := f.(io.ReadSeeker)
	if st, err := f.Stat(); err != nil || st.IsDir() || !ok {
		abort(c, notFound)
		return
	}
	h := c.Writer.Header()
	h.Set("Content-Type", mime.TypeByExtension(path.Ext(name)))
	// File names carry no content hash, so browsers revalidate; the files
	// are small.
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Frame-Options", "DENY")
	http.ServeContent(c.Writer, c.Request, name, time.Time{}, rs)
}
