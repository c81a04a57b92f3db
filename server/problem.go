package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/logctx"
)

// Problem is an RFC 9457 problem detail with ferry's extension members.
type Problem struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail,omitempty"`
	Instance  string `json:"instance,omitempty"`
	Code      string `json:"code"`
	RequestID string `json:"request_id,omitempty"`
	// Extra holds extension members such as missing_parts.
	Extra map[string]any `json:"-"`
}

// MarshalJSON flattens Extra into the object, as RFC 9457 extension
// members are siblings of the standard ones.
func (p Problem) MarshalJSON() ([]byte, error) {
	type plain Problem
	b, err := marshal(plain(p))
	if err != nil || len(p.Extra) == 0 {
		return b, err
	}
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for k, v := range p.Extra {
		if _, taken := m[k]; !taken {
			m[k] = v
		}
	}
	return marshal(m)
}

// marshal is json.Marshal without HTML escaping, as every answer ferry
// writes (through c.PureJSON): a URL in JSON keeps its "&" instead of
// "\u0026", so one copied from curl's output works.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// statusOf is the one error→status table.
var statusOf = map[*errkind.Kind]int{
	errkind.Invalid:              http.StatusBadRequest,
	errkind.Unauthenticated:      http.StatusUnauthorized,
	errkind.Forbidden:            http.StatusForbidden,
	errkind.NotFound:             http.StatusNotFound,
	errkind.Conflict:             http.StatusConflict,
	errkind.Gone:                 http.StatusGone,
	errkind.PreconditionFailed:   http.StatusPreconditionFailed,
	errkind.RangeNotSatisfiable:  http.StatusRequestedRangeNotSatisfiable,
	errkind.TooLarge:             http.StatusRequestEntityTooLarge,
	errkind.UnsupportedMediaType: http.StatusUnsupportedMediaType,
	errkind.Unprocessable:        http.StatusUnprocessableEntity,
	errkind.TooManyRequests:      http.StatusTooManyRequests,
	errkind.Unavailable:          http.StatusServiceUnavailable,
}

// defaultCode names the code used when an error carries a kind but no
// *errkind.Error with its own code.
var defaultCode = map[int]string{
	http.StatusBadRequest:                   "bad_request",
	http.StatusUnauthorized:                 "unauthenticated",
	http.StatusForbidden:                    "forbidden",
	http.StatusNotFound:                     "not_found",
	http.StatusMethodNotAllowed:             "method_not_allowed",
	http.StatusConflict:                     "conflict",
	http.StatusGone:                         "gone",
	http.StatusPreconditionFailed:           "precondition_failed",
	http.StatusRequestEntityTooLarge:        "body_too_large",
	http.StatusRequestedRangeNotSatisfiable: "range_not_satisfiable",
	http.StatusUnsupportedMediaType:         "unsupported_media_type",
	http.StatusUnprocessableEntity:          "unprocessable",
	http.StatusTooManyRequests:              "too_many_requests",
	http.StatusInternalServerError:          "internal",
	http.StatusServiceUnavailable:           "unavailable",
}

// problemFor turns err into a Problem. Only 4xx problems carry the
// error's detail; anything unclassified is a 500 with a generic text.
func problemFor(ctx context.Context, err error) Problem {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		err = errkind.New(errkind.TooLarge, "body_too_large", "request body exceeds %d bytes", mbe.Limit)
	}
	if errors.Is(err, context.Canceled) {
		// The client went away; nobody reads this answer, but the log and
		// metrics should not count it as a server fault.
		err = errkind.New(errkind.Invalid, "client_closed", "request cancelled")
	}
	status := http.StatusInternalServerError
	if k := errkind.KindOf(err); k != nil {
		status = statusOf[k]
	}
	p := Problem{Type: "about:blank", Status: status, Title: http.StatusText(status), Code: defaultCode[status], RequestID: logctx.RequestID(ctx)}
	var e *errkind.Error
	// An outage's code and detail say which dependency is down
	// (storage_unavailable, database_unavailable, storage_full); like every
	// errkind detail they are written for clients, never internal text.
	classified := errors.As(err, &e) && (status < 500 || status == http.StatusServiceUnavailable)
	if classified {
		if e.Code != "" {
			p.Code = e.Code
		}
		p.Detail = e.Detail
		p.Extra = e.Fields
	}
	if status >= 500 && !classified {
		p.Detail = "an internal error occurred; quote the request id when reporting it"
		if status == http.StatusServiceUnavailable {
			p.Detail = "a dependency is unavailable; retry later"
		}
	}
	return p
}

// companionStyle marks a request whose errors are written the way Uppy
// Companion writes them (see routeCompanion).
const companionStyle = "ferry.companion"

// writeProblem sends p as application/problem+json.
func writeProblem(c *gin.Context, p Problem) {
	if c.GetBool(companionStyle) {
		msg := p.Detail
		if msg == "" {
			msg = p.Title
		}
		body := gin.H{}
		for k, v := range p.Extra { // such as a quota's limit and usage
			body[k] = v
		}
		body["error"], body["code"] = msg, p.Code
		c.Header("Cache-Control", "no-store")
		c.PureJSON(p.Status, body)
		return
	}
	writeProblemTo(c.Writer, c.Request.URL.Path, p)
}

// writeProblemTo sends p on a plain ResponseWriter, for handlers (downloads)
// whose domain code writes the response itself.
func writeProblemTo(w http.ResponseWriter, path string, p Problem) {
	if p.Instance == "" {
		p.Instance = path
	}
	b, err := marshal(p)
	if err != nil {
		b = []byte(`{"type":"about:blank","title":"Internal Server Error","status":500,"code":"internal"}`)
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(p.Status)
	_, _ = w.Write(b)
}

// abort records err for the access log, writes its problem and stops the
// chain.
func abort(c *gin.Context, err error) {
	p := problemFor(c.Request.Context(), err)
	_ = c.Error(err)
	// A domain limit that knows when it frees (an export quota) says so
	// the way the rate limits do.
	if secs, ok := p.Extra["retry_after"].(int); ok && p.Status == http.StatusTooManyRequests && c.Writer.Header().Get("Retry-After") == "" {
		c.Header("Retry-After", strconv.Itoa(secs))
	}
	writeProblem(c, p)
	c.Abort()
}

// h adapts an error-returning handler: an error becomes a problem answer.
func h(fn func(c *gin.Context) error) gin.HandlerFunc {
	return func(c *gin.Context) {
		if err := fn(c); err != nil {
			abort(c, err)
		}
	}
}
