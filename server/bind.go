package server

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/ferry-io/ferry/errkind"
)

// errNotJSON answers a JSON endpoint's body sent with another content
// type, or none.
var errNotJSON = errkind.New(errkind.UnsupportedMediaType, "unsupported_media_type",
	"send the body as JSON with the header Content-Type: application/json")

// requireJSON insists on Content-Type: application/json (parameters such as
// charset aside). It is what keeps a cross-site HTML form out: a form can
// only send urlencoded, multipart or text/plain bodies, and text/plain can
// be made to hold valid JSON ({"token":"=","token":"fry_…"} from a field
// named {"token":"). A page that sends application/json from another
// origin needs a CORS preflight, which ferry's JSON routes never grant.
func requireJSON(r *http.Request) error {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return errNotJSON
	}
	return nil
}

// bindJSON decodes the body strictly into dst: Content-Type
// application/json, no unknown fields, one value, nothing after it.
// Mistyped field names are errors, not silently ignored settings.
func bindJSON(c *gin.Context, dst any) error {
	if err := requireJSON(c.Request); err != nil {
		return err
	}
	body, err := readBody(c)
	if err != nil {
		return err
	}
	if len(body) == 0 {
		return errkind.New(errkind.Invalid, "invalid_json", "the request body is empty; send a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return errkind.New(errkind.Invalid, "invalid_json", "%s", describeJSONError(err))
	}
	if dec.More() {
		return errkind.New(errkind.Invalid, "invalid_json", "unexpected data after the JSON value")
	}
	return nil
}

// readBody reads the request body, trimmed of white space; a body over
// the limit stays an *http.MaxBytesError (a 413).
func readBody(c *gin.Context) ([]byte, error) {
	body, err := io.ReadAll(c.Request.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, err
		}
		return nil, errkind.New(errkind.Invalid, "unreadable_body", "could not read the request body")
	}
	return bytes.TrimSpace(body), nil
}

// describeJSONError says what is wrong with a body in JSON's terms: the
// decoder's own messages name Go types (`expected struct { Name string
// "json:\"name\"" }` for a body of `[]`), which tell a client nothing and
// show ferry's internals.
func describeJSONError(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d", se.Offset)
	case errors.As(err, &te):
		if te.Field != "" {
			return fmt.Sprintf("field %q must be %s, not %s", te.Field, jsonKind(te.Type), jsonValue(te.Value))
		}
		return fmt.Sprintf("the body must be %s, not %s", jsonKind(te.Type), jsonValue(te.Value))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated JSON"
	}
	// encoding/json has no type for this one; its text is `json: unknown
	// field "x"`, and only the quoted name comes from the client.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return "unknown field " + name
	}
	return "the body is not valid JSON for this request"
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// jsonKind names what a Go type accepts, as JSON calls it.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "a JSON value"
	}
	if reflect.PointerTo(t).Implements(textUnmarshaler) {
		return "a string"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return jsonKind(t.Elem())
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	default:
		return "a JSON value"
	}
}

// jsonValue is the decoder's description of the value it got ("array",
// "number 1e30", "string") with an article; it comes from the body, never
// from a Go type.
func jsonValue(v string) string {
	kind, rest, _ := strings.Cut(v, " ")
	switch kind {
	case "array", "object":
		return "an " + kind
	case "bool":
		return "a boolean"
	case "string", "number":
		if rest != "" && kind == "number" {
			return "the number " + rest
		}
		return "a " + kind
	}
	return "that value"
}
