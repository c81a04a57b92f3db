package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	verrors "github.com/pb33f/libopenapi-validator/errors"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/server"
)

// The API contract (server/openapi.yaml) checked on the e2e traffic: the
// harness's client (Ferry.HTTP, behind Ferry.Do) sends every request to
// ferry through contractTransport, which validates the request and the
// answer against the document. So does http.DefaultTransport, which
// TestMain replaces: a test's bare http.Get of a download link, and the
// in-process Go client's API calls, are held to the document as soon as
// they go to a ferry the harness started (watchContract). A request the
// document accepts must get an answer it describes (status, content type,
// body schema); a request the document refuses (tests send bad input on
// purpose) must get a 4xx, so a request ferry takes that the document does
// not describe still fails. Requests to other hosts (presigned URLs to the
// bucket, the metrics listener, the example backend) pass unchecked. What
// Chromium exchanges with ferry in the browser tests is recorded by
// e2e/browser/run.mjs and checked the same way (checkBrowserExchanges).

var (
	contractOnce sync.Once
	contractV    validator.Validator
	contractErr  error
	// contractMu serialises validation: the validator caches compiled
	// schemas, and the tests send from many goroutines.
	contractMu sync.Mutex
)

// contractValidator is the validator over the document ferry serves at
// /openapi.json, built once per test process.
func contractValidator() (validator.Validator, error) {
	contractOnce.Do(func() {
		raw, err := server.OpenAPIJSON()
		if err != nil {
			contractErr = err
			return
		}
		doc, err := libopenapi.NewDocument(raw)
		if err != nil {
			contractErr = err
			return
		}
		v, errs := validator.NewValidator(doc, config.WithFormatAssertions())
		if len(errs) > 0 {
			contractErr = errors.Join(errs...)
			return
		}
		contractV = v
	})
	return contractV, contractErr
}

// contractTransport validates the exchanges with the ferry at origin, or
// with every ferry watchContract registered when origin is empty.
type contractTransport struct {
	origin string // scheme://host:port of the ferry under test
	base   http.RoundTripper
}

// plainTransport is http.DefaultTransport as the process started, before
// TestMain put a contractTransport in its place.
var plainTransport = http.DefaultTransport

// contractOrigins are the origins (scheme://host:port) of the ferry
// servers running in this test process: http.DefaultTransport checks the
// exchanges with them.
var contractOrigins sync.Map

// watchContract holds the default transport's exchanges with the ferry
// at origin to the document until the test ends.
func watchContract(t interface{ Cleanup(func()) }, origin string) {
	contractOrigins.Store(origin, true)
	t.Cleanup(func() { contractOrigins.Delete(origin) })
}

// newContractClient is an HTTP client whose exchanges with ferry at
// origin are held to the document.
func newContractClient(origin string) *http.Client {
	return &http.Client{Transport: &contractTransport{origin: origin, base: plainTransport}}
}

func (t *contractTransport) covers(origin string) bool {
	if t.origin != "" {
		return origin == t.origin
	}
	_, ok := contractOrigins.Load(origin)
	return ok
}

func (t *contractTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.covers(req.URL.Scheme + "://" + req.URL.Host) {
		return t.base.RoundTrip(req)
	}
	reqBody := func() []byte { return nil }
	switch {
	case req.Body == nil || req.Body == http.NoBody:
	case req.GetBody != nil:
		// A body in memory (http.NewRequest with a bytes or strings
		// reader): a copy of it is the validator's.
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(body)
		body.Close()
		if err != nil {
			return nil, err
		}
		reqBody = func() []byte { return b }
	default:
		// A streaming body (a pipe a test trickles into): sent as it
		// comes, and copied on its way for the validator, so the request
		// reaches ferry exactly when it would without the check.
		var cp testenv.SyncBuffer
		req = req.Clone(req.Context())
		req.Body = struct {
			io.Reader
			io.Closer
		}{io.TeeReader(req.Body, &cp), req.Body}
		reqBody = cp.Bytes
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	// The copy the validator reads; the caller gets req and resp intact.
	vreq := req.Clone(req.Context())
	vreq.Body = io.NopCloser(bytes.NewReader(reqBody()))
	vresp := *resp
	vresp.Body = http.NoBody
	if checkedBody(resp) {
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(b))
		vresp.Body = io.NopCloser(bytes.NewReader(b))
	}
	if err := checkExchange(vreq, &vresp); err != nil {
		resp.Body.Close()
		return nil, err
	}
	return resp, nil
}

// browserExchange is one request Chromium finished with ferry, as
// e2e/browser/run.mjs records it.
type browserExchange struct {
	Method      string            `json:"method"`
	URL         string            `json:"url"`
	Headers     map[string]string `json:"headers"`
	Body        string            `json:"body"`
	Status      int               `json:"status"`
	RespHeaders map[string]string `json:"respHeaders"`
	RespBody    string            `json:"respBody"`
}

// checkBrowserExchanges holds what Chromium sent ferry in a browser
// scenario, and ferry's answers, to the document, as contractTransport
// does for the test process's own requests. A mismatch fails the test.
func checkBrowserExchanges(t testing.TB, raw string) {
	t.Helper()
	n, errs, err := browserMismatches(raw)
	if err != nil {
		t.Fatalf("browser exchanges: %v", err)
	}
	for i, err := range errs {
		if i == 10 {
			t.Errorf("and %d more of Chromium's exchanges with ferry", len(errs)-10)
			break
		}
		t.Errorf("from Chromium: %v", err)
	}
	t.Logf("%d of Chromium's exchanges with ferry checked against the contract, %d mismatches", n, len(errs))
}

// browserMismatches checks the exchanges run.mjs recorded (a JSON array
// of browserExchange) and returns how many there were and the mismatches.
func browserMismatches(raw string) (int, []error, error) {
	var xs []browserExchange
	if err := json.Unmarshal([]byte(raw), &xs); err != nil {
		return 0, nil, err
	}
	var errs []error
	for _, x := range xs {
		req, err := http.NewRequest(x.Method, x.URL, strings.NewReader(x.Body))
		if err != nil {
			return 0, nil, fmt.Errorf("%s %s: %w", x.Method, x.URL, err)
		}
		for k, v := range x.Headers {
			if !strings.HasPrefix(k, ":") {
				req.Header.Set(k, v)
			}
		}
		resp := &http.Response{StatusCode: x.Status, Header: http.Header{}, Body: http.NoBody, Request: req}
		for k, v := range x.RespHeaders {
			resp.Header.Set(k, v)
		}
		if checkedBody(resp) {
			resp.Body = io.NopCloser(strings.NewReader(x.RespBody))
		}
		if err := checkExchange(req, resp); err != nil {
			errs = append(errs, err)
		}
	}
	return len(xs), errs, nil
}

// checkedBody says whether resp's body is read and validated: JSON
// answers (problems included). Others (downloads, the UI's files) stream
// on untouched and are checked for status and content type only.
func checkedBody(resp *http.Response) bool {
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return mt == "application/json" || mt == "application/problem+json"
}

// checkExchange holds one request and its answer to the document.
func checkExchange(req *http.Request, resp *http.Response) error {
	v, err := contractValidator()
	if err != nil {
		return fmt.Errorf("openapi contract: %w", err)
	}
	contractMu.Lock()
	defer contractMu.Unlock()
	reqOK, reqErrs := v.ValidateHttpRequestSync(req)
	if !reqOK {
		if resp.StatusCode >= 400 && resp.StatusCode < 500 {
			return nil // refused by both
		}
		return fmt.Errorf("openapi contract: ferry answered %d to %s %s, which server/openapi.yaml refuses:\n%s",
			resp.StatusCode, req.Method, redact(req.URL), describe(reqErrs))
	}
	if ok, errs := v.ValidateHttpResponse(req, resp); !ok {
		return fmt.Errorf("openapi contract: %s %s answered %d %s, not as server/openapi.yaml says:\n%s",
			req.Method, redact(req.URL), resp.StatusCode, resp.Header.Get("Content-Type"), describe(errs))
	}
	return nil
}

// redact keeps signatures and tickets out of test logs.
func redact(u *url.URL) string {
	p := u.Path
	if strings.HasPrefix(p, "/tickets/") {
		if rest, ok := strings.CutPrefix(p, "/tickets/"); ok {
			if i := strings.Index(rest, "/"); i > 0 {
				p = "/tickets/{ticket}" + rest[i:]
			}
		}
	}
	if u.RawQuery != "" && strings.Contains(u.RawQuery, "sig=") {
		return p + "?…"
	}
	if u.RawQuery != "" {
		return p + "?" + u.RawQuery
	}
	return p
}

func describe(errs []*verrors.ValidationError) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "  - %s: %s\n", e.Message, e.Reason)
		for _, se := range e.SchemaValidationErrors {
			fmt.Fprintf(&b, "      %s (at %s)\n", se.Reason, se.FieldPath+" "+se.KeywordLocation)
		}
	}
	return b.String()
}
