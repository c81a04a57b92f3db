package server

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-io/ferry/chat"
	"github.com/ferry-io/ferry/download"
	"github.com/ferry-io/ferry/erasure"
	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/export"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/notify"
	"github.com/ferry-io/ferry/quota"
	"github.com/ferry-io/ferry/upload"
	"github.com/ferry-io/ferry/users"
	"github.com/ferry-io/ferry/web"
)

// fullServer is ferry's router with every optional part wired, as
// `ferry serve` runs it. Registering routes reads only whether each
// service is there, never calls it, so empty values stand in for the
// services; no request is sent to this router.
func fullServer(t *testing.T) *Server {
	t.Helper()
	reg := prometheus.NewRegistry()
	s, err := New(Deps{
		Log: testenv.Logger(t), Users: &users.Service{}, Webhooks: &notify.Service{}, Uploads: &upload.Service{},
		Downloads: &download.Service{}, Links: &download.Links{}, Chat: &chat.Service{}, Exports: &export.Service{},
		Quotas: &quota.Service{}, Erasure: &erasure.Service{}, Web: web.Assets(), Gatherer: reg, Registerer: reg, MaxBodyBytes: 1 << 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// routeParam is a gin path parameter (:id) or catch-all (*file).
var routeParam = regexp.MustCompile(`[:*]([A-Za-z_][A-Za-z0-9_]*)`)

// engineOperations are the router's routes as "METHOD /path/{param}".
func engineOperations(s *Server) []string {
	var out []string
	for _, r := range s.engine.Routes() {
		out = append(out, r.Method+" "+routeParam.ReplaceAllString(r.Path, "{$1}"))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// documentOperations are the document's operations as "METHOD /path".
func documentOperations(t *testing.T) []string {
	t.Helper()
	raw, err := OpenAPIJSON()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var out []string
	for path, item := range doc.Paths {
		for method := range item {
			switch method {
			case "get", "put", "post", "delete", "options", "head", "patch", "trace":
				out = append(out, strings.ToUpper(method)+" "+path)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Every route ferry registers is in the document, and the document
// describes no route ferry does not register.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	routes := engineOperations(fullServer(t))
	documented := documentOperations(t)
	if len(routes) < 70 {
		t.Fatalf("only %d routes registered; is every service wired?", len(routes))
	}
	for _, r := range routes {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is not in server/openapi.yaml", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(routes, d) {
			t.Errorf("server/openapi.yaml documents %s, which ferry does not register", d)
		}
	}
}

// The check above would pass on two empty lists; it does fail when the
// router gains a route the document lacks.
func TestOpenAPIRouteCheckSeesAnExtraRoute(t *testing.T) {
	s := fullServer(t)
	s.engine.GET("/undocumented/:id", func(*gin.Context) {})
	if slices.Contains(documentOperations(t), "GET /undocumented/{id}") ||
		!slices.Contains(engineOperations(s), "GET /undocumented/{id}") {
		t.Fatal("an extra route is not told apart")
	}
}

// The document is OpenAPI 3.1 by the specification's own schema, every
// $ref resolves, and operation ids are unique.
func TestOpenAPIDocumentIsValid31(t *testing.T) {
	raw, err := OpenAPIJSON()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := libopenapi.NewDocument(raw)
	if err != nil {
		t.Fatal(err)
	}
	if v := doc.GetVersion(); !strings.HasPrefix(v, "3.1.") {
		t.Fatalf("openapi %q, want 3.1.x", v)
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		t.Fatalf("build the model: %v", err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("validator: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("%s: %s", e.Message, e.Reason)
			for _, se := range e.SchemaValidationErrors {
				t.Errorf("  %s at %s", se.Reason, se.FieldPath+" "+se.KeywordLocation)
			}
		}
	}
	ids := map[string]string{}
	for path, item := range model.Model.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			if op.OperationId == "" {
				t.Errorf("%s %s has no operationId", method, path)
			}
			if prev, dup := ids[op.OperationId]; dup {
				t.Errorf("operationId %s on %s and %s %s", op.OperationId, prev, method, path)
			}
			ids[op.OperationId] = method + " " + path
		}
	}
}

// GET /openapi.json is the YAML converted, /openapi.yaml the source, and
// /docs the reference page with its script served from ferry itself.
func TestOpenAPIServed(t *testing.T) {
	db := testenv.NewDB(t, "sqlite")
	reg := prometheus.NewRegistry()
	s, err := New(Deps{Log: testenv.Logger(t), Users: testenv.Must(users.New(users.Config{DB: db.DB, Now: time.Now, SessionTTL: time.Hour})), Gatherer: reg, Registerer: reg,
		MaxBodyBytes: 1 << 10, Web: web.Assets()})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	get := func(path string) (*http.Response, string) {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := get("/openapi.json")
	var doc map[string]any
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal([]byte(body), &doc) != nil {
		t.Fatalf("/openapi.json: %d %q %.100s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if want, _ := OpenAPIJSON(); body != string(want) {
		t.Fatal("/openapi.json is not the converted document")
	}
	if doc["openapi"] != "3.1.0" || doc["x-companion-operations"] != nil {
		t.Fatalf("/openapi.json: openapi %v, scaffolding %v", doc["openapi"], doc["x-companion-operations"] != nil)
	}
	// The anchors are expanded: the ticket's Companion routes have their
	// operations in full.
	op, _ := doc["paths"].(map[string]any)["/tickets/{ticket}/s3/multipart"].(map[string]any)["post"].(map[string]any)
	if op["operationId"] != "ticketCompanionCreate" || op["responses"] == nil {
		t.Fatalf("ticket companion create = %v", op)
	}
	if resp, body := get("/openapi.yaml"); resp.StatusCode != 200 || !strings.HasPrefix(body, "openapi: 3.1.0") {
		t.Fatalf("/openapi.yaml: %d %.40s", resp.StatusCode, body)
	}
	resp, body = get("/docs")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(body, `spec-url="/openapi.json"`) || !strings.Contains(body, `src="/assets/redoc.standalone.js"`) {
		t.Fatalf("/docs: %d %.300s", resp.StatusCode, body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "connect-src 'self'") || strings.Contains(csp, "http") {
		t.Fatalf("/docs CSP %q: the page may reach only ferry", csp)
	}
	resp, body = get("/assets/redoc.standalone.js")
	if resp.StatusCode != 200 || len(body) < 100_000 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/javascript") {
		t.Fatalf("redoc bundle: %d %q %d bytes", resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
	}
}

// problemSchema is the served document's Problem schema, as far as the
// tests read it: the description, where the statuses and codes are listed
// for people, and the code's alternatives (the enum, the pattern).
type problemSchema struct {
	Description string `json:"description"`
	Properties  map[string]struct {
		AnyOf []struct {
			Enum    []string `json:"enum"`
			Pattern string   `json:"pattern"`
		} `json:"anyOf"`
	} `json:"properties"`
}

func readProblemSchema(t *testing.T) problemSchema {
	t.Helper()
	raw, err := OpenAPIJSON()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas map[string]problemSchema `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Components.Schemas["Problem"]
}

// problemDescription is the Problem schema's description.
func problemDescription(t *testing.T) string { return readProblemSchema(t).Description }

// The Problem schema lists every status an errkind kind maps to, with its
// default code, so a kind added to errkind and problem.go is added to the
// contract too.
func TestOpenAPIListsEveryProblemStatus(t *testing.T) {
	desc := problemDescription(t)
	for _, k := range errkind.Kinds() {
		status := statusOf[k]
		line := ""
		for _, l := range strings.Split(desc, "\n- ") {
			if strings.HasPrefix(l, strconv.Itoa(status)+" ") {
				line = l
			}
		}
		if line == "" {
			t.Errorf("kind %q (%d) is not in the Problem schema's list", k, status)
			continue
		}
		if code := defaultCode[status]; !regexp.MustCompile(`\b` + code + `\b`).MatchString(line) {
			t.Errorf("status %d's default code %s is not in its line %q", status, code, line)
		}
	}
}

// Every problem code ferry can answer is in the Problem schema's enum of
// codes (the invalid_<field> family by its pattern), and named in the
// schema's description by status; and the enum holds no code ferry never
// makes. The codes are found by parsing the module's Go source (not its
// tests): the codes given to errkind.New and errkind.Invalidf, directly,
// through a constant (quota.Code) or through a helper that passes its
// parameter on (users' jwtError), the Code of errkind.Error and Problem
// literals, and each status's default code. The e2e suites then validate
// every problem ferry answers against the enum.
func TestOpenAPIListsEveryProblemCode(t *testing.T) {
	desc := problemDescription(t)
	if !strings.Contains(desc, "invalid_<field>") {
		t.Fatal("the Problem schema no longer lists the invalid_<field> family")
	}
	enum, pattern := problemCodeSchema(t)
	if pattern != "^invalid_[a-z0-9_]+$" {
		t.Fatalf("the invalid_<field> family's pattern is %q", pattern)
	}
	codes := sourceProblemCodes(t)
	for _, code := range defaultCode {
		codes[code] = "server/problem.go (a status's default code)"
	}
	if len(codes) < 80 {
		t.Fatalf("found only %d problem codes in the source; the scan is broken", len(codes))
	}
	inEnum := map[string]bool{}
	for _, c := range enum {
		inEnum[c] = true
	}
	for code, at := range codes {
		if strings.HasPrefix(code, "invalid_") {
			if !regexp.MustCompile(pattern).MatchString(code) {
				t.Errorf("problem code %s (%s) does not match the invalid_<field> pattern", code, at)
			}
			continue
		}
		if !inEnum[code] {
			t.Errorf("problem code %s (%s) is not in the Problem schema's enum", code, at)
		}
		if !regexp.MustCompile(`\b` + regexp.QuoteMeta(code) + `\b`).MatchString(desc) {
			t.Errorf("problem code %s (%s) is not in the Problem schema's list by status", code, at)
		}
	}
	for _, c := range enum {
		if _, ok := codes[c]; !ok {
			t.Errorf("the Problem schema's enum has %s, which ferry never answers", c)
		}
	}
}

// problemCodeSchema is the served document's schema of Problem.code: the
// enum of codes and the pattern of the invalid_<field> family.
func problemCodeSchema(t *testing.T) (enum []string, pattern string) {
	t.Helper()
	for _, alt := range readProblemSchema(t).Properties["code"].AnyOf {
		enum = append(enum, alt.Enum...)
		if alt.Pattern != "" {
			pattern = alt.Pattern
		}
	}
	if len(enum) == 0 {
		t.Fatal("Problem.code has no enum of codes")
	}
	return enum, pattern
}

// sourceProblemCodes parses the module's non-test Go source and returns
// each problem code it makes, with where.
func sourceProblemCodes(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	var files []*ast.File
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	str := func(e ast.Expr) (string, bool) {
		if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			v, err := strconv.Unquote(lit.Value)
			return v, err == nil
		}
		return "", false
	}
	// String constants, as pkg.Name; and helpers that hand one of their
	// parameters to errkind.New as the code, as pkg.func → its index.
	consts := map[string]string{}
	type helper struct {
		index int    // of the parameter that is the code
		param string // its name
	}
	helpers := map[string]helper{}
	isErrkind := func(call *ast.CallExpr) (int, bool) {
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return 0, false
		}
		if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "errkind" {
			return 0, false
		}
		switch sel.Sel.Name {
		case "New":
			return 1, true
		case "Invalidf":
			return 0, true
		}
		return 0, false
	}
	for _, f := range files {
		pkg := f.Name.Name
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				if d.Tok != token.CONST {
					continue
				}
				for _, spec := range d.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, name := range vs.Names {
						if i < len(vs.Values) {
							if v, ok := str(vs.Values[i]); ok {
								consts[pkg+"."+name.Name] = v
							}
						}
					}
				}
			case *ast.FuncDecl:
				var params []string
				for _, fld := range d.Type.Params.List {
					for _, n := range fld.Names {
						params = append(params, n.Name)
					}
				}
				ast.Inspect(d, func(n ast.Node) bool {
					call, ok := n.(*ast.CallExpr)
					if !ok {
						return true
					}
					if arg, ok := isErrkind(call); ok && len(call.Args) > arg {
						if id, ok := call.Args[arg].(*ast.Ident); ok {
							if i := slices.Index(params, id.Name); i >= 0 {
								helpers[pkg+"."+d.Name.Name] = helper{i, id.Name}
							}
						}
					}
					return true
				})
			}
		}
	}
	codes := map[string]string{}
	for _, f := range files {
		pkg := f.Name.Name
		resolve := func(e ast.Expr) (string, bool) {
			if v, ok := str(e); ok {
				return v, true
			}
			switch e := e.(type) {
			case *ast.Ident:
				v, ok := consts[pkg+"."+e.Name]
				return v, ok
			case *ast.SelectorExpr:
				if x, ok := e.X.(*ast.Ident); ok {
					v, ok := consts[x.Name+"."+e.Sel.Name]
					return v, ok
				}
			}
			return "", false
		}
		record := func(e ast.Expr, what string) {
			if v, ok := resolve(e); ok {
				codes[v] = fset.Position(e.Pos()).String()
				return
			}
			switch e := e.(type) {
			case *ast.Ident:
				if h, ok := helpers[pkg+"."+enclosingFunc(f, e)]; ok && h.param == e.Name {
					return // a helper's own parameter: its callers are scanned
				}
			case *ast.BinaryExpr:
				if v, ok := str(e.X); ok && e.Op == token.ADD && v == "invalid_" {
					return // "invalid_" + field: the family the pattern covers
				}
			}
			t.Errorf("%s: a problem code made by %s that the scan cannot read; give it as a literal or a constant", fset.Position(e.Pos()), what)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if arg, ok := isErrkind(n); ok && len(n.Args) > arg {
					record(n.Args[arg], "errkind")
				}
				var name string
				switch fn := n.Fun.(type) {
				case *ast.Ident:
					name = pkg + "." + fn.Name
				case *ast.SelectorExpr:
					if x, ok := fn.X.(*ast.Ident); ok {
						name = x.Name + "." + fn.Sel.Name
					}
				}
				if h, ok := helpers[name]; ok && len(n.Args) > h.index {
					record(n.Args[h.index], name)
				}
			case *ast.CompositeLit:
				var typ string
				switch ty := n.Type.(type) {
				case *ast.Ident:
					typ = ty.Name
				case *ast.SelectorExpr:
					typ = ty.Sel.Name
				}
				if typ != "Error" && typ != "Problem" {
					return true
				}
				for _, el := range n.Elts {
					if kv, ok := el.(*ast.KeyValueExpr); ok {
						if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Code" {
							if _, ok := resolve(kv.Value); ok {
								record(kv.Value, typ+" literal")
							}
						}
					}
				}
			}
			return true
		})
	}
	return codes
}

// enclosingFunc is the name of the function declaration in f that holds e.
func enclosingFunc(f *ast.File, e ast.Node) string {
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Pos() <= e.Pos() && e.End() <= fd.End() {
			return fd.Name.Name
		}
	}
	return ""
}
