package server

import (
	"bytes"
	_ "embed"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"
	"go.yaml.in/yaml/v3"
)

// openapiYAML is ferry's API contract, the source of truth for
// /openapi.json and /openapi.yaml (and the tests that hold the router and
// the e2e traffic to it).
//
//go:embed openapi.yaml
var openapiYAML []byte

// OpenAPIYAML returns the OpenAPI 3.1 document as written.
func OpenAPIYAML() []byte { return bytes.Clone(openapiYAML) }

// OpenAPIJSON returns the OpenAPI 3.1 document as JSON, with the YAML's
// anchors and merge keys expanded (the Companion routes are written once
// for /s3 and /tickets/{ticket}/s3) and its x-companion-operations
// scaffolding left out.
func OpenAPIJSON() ([]byte, error) {
	var doc any
	if err := yaml.Unmarshal(openapiYAML, &doc); err != nil {
		return nil, fmt.Errorf("server: openapi.yaml: %w", err)
	}
	root, ok := fromYAML(doc).(map[string]any)
	if !ok {
		return nil, fmt.Errorf("server: openapi.yaml is not a mapping")
	}
	delete(root, "x-companion-operations")
	return marshal(root)
}

// fromYAML makes a decoded YAML value one encoding/json can write:
// mappings with keys that are not strings become objects keyed by the
// keys' text.
func fromYAML(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = fromYAML(e)
		}
	case map[any]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[fmt.Sprint(k)] = fromYAML(e)
		}
		return out
	case []any:
		for i, e := range t {
			t[i] = fromYAML(e)
		}
	}
	return v
}

// docsPolicy is the reference page's Content-Security-Policy. Redoc
// styles itself with inline <style> elements and runs its search index in
// a blob: worker; it reaches nothing but ferry (connect-src 'self': the
// document).
const docsPolicy = "default-src 'self'; script-src 'self'; worker-src 'self' blob:; style-src 'self' 'unsafe-inline'; " +
	"img-src 'self' data:; font-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// routeOpenAPI serves the contract, converted to JSON once here at
// start-up, and the reference page over it when ferry serves its UI.
func (s *Server) routeOpenAPI(e *gin.Engine) error {
	doc, err := OpenAPIJSON()
	if err != nil {
		return err
	}
	e.GET("/openapi.json", func(c *gin.Context) {
		c.Header("Cache-Control", "no-cache")
		c.Data(http.StatusOK, "application/json", doc)
	})
	e.GET("/openapi.yaml", func(c *gin.Context) {
		c.Header("Cache-Control", "no-cache")
		c.Data(http.StatusOK, "application/yaml", openapiYAML)
	})
	if s.d.Web != nil {
		e.GET("/docs", func(c *gin.Context) { s.serveAsset(c, "docs.html", docsPolicy) })
	}
	return nil
}
