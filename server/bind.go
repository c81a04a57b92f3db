package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ferry-io/ferry/errkind"
)

// bindJSON decodes the body strictly into dst: JSON content type (or none),
// no unknown fields, one value, nothing after it. Mistyped field names are
// errors, not silently ignored settings.
func bindJSON(c *gin.Context, dst any) error {
	if ct := c.GetHeader("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && mt != "text/plain") {
			// text/plain is what a no-preflight fetch sends; accepting it
			// costs nothing since the body must still be valid JSON.
			return errkind.New(errkind.Invalid, "unsupported_media_type", "send the body as application/json")
		}
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

func describeJSONError(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d", se.Offset)
	case errors.As(err, &te):
		if te.Field != "" {
			return fmt.Sprintf("field %q must be %s, not %s", te.Field, te.Type.String(), te.Value)
		}
		return fmt.Sprintf("expected %s, not %s", te.Type.String(), te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated JSON"
	default:
		// Unknown-field errors read `json: unknown field "x"`.
		return err.Error()
	}
}
