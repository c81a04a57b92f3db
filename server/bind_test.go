package server_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/ferry-io/ferry/internal/testenv"
)

// goTypeText matches what encoding/json's own messages say about Go types:
// struct literals, slices and maps, sized numbers, package-qualified names.
var goTypeText = regexp.MustCompile(`struct|map\[|\[\]|\*|\bu?int(8|16|32|64)?\b|\bfloat(32|64)\b|\binterface\b|RawMessage|json:|\bGo\b|[a-z]+\.[A-Z]`)

// Every way a JSON body can be wrong gets a 4xx problem whose detail says
// what is wrong in JSON's terms (field names, JSON kinds, byte offsets) and
// never names a Go type. Both binders are covered: the strict one of the
// native API and the lenient one of the Companion routes.
func TestBindErrorsNameNoGoTypes(t *testing.T) {
	db := testenv.NewDB(t, "sqlite")
	a := newAPI(t, db)
	alice := a.user("alice")
	const (
		initPath     = "/uploads"
		completePath = "/uploads/upl_nope/complete"
		presignPath  = "/uploads/upl_nope/presign"
		s3Create     = "/s3/multipart"
		s3Complete   = "/s3/multipart/x/complete?key=k"
	)
	js := []string{"Content-Type", "application/json"}
	for _, c := range []struct {
		name, path, body string
		header           []string
		status           int
		code, want       string
	}{
		{"syntax", initPath, `{"file_name":}`, js, 400, "invalid_json", "malformed JSON at byte 14"},
		{"syntax: bare word", initPath, `nope`, js, 400, "invalid_json", "malformed JSON"},
		{"type at top level: array", initPath, `[]`, js, 400, "invalid_json", "the body must be an object, not an array"},
		{"type at top level: string", initPath, `"x"`, js, 400, "invalid_json", "the body must be an object, not a string"},
		{"type at top level: number", initPath, `5`, js, 400, "invalid_json", "the body must be an object, not a number"},
		{"type in a field: string for a string", initPath, `{"file_name":5,"size":1}`, js, 400, "invalid_json", `field "file_name" must be a string, not a number`},
		{"type in a field: string for an integer", initPath, `{"file_name":"a","size":"1"}`, js, 400, "invalid_json", `field "size" must be an integer, not a string`},
		{"type in a field: fraction for an integer", initPath, `{"file_name":"a","size":1.5}`, js, 400, "invalid_json", `field "size" must be an integer, not the number 1.5`},
		{"type in a field: overflow", initPath, `{"file_name":"a","size":1e30}`, js, 400, "invalid_json", `field "size" must be an integer, not the number 1e30`},
		{"type in a field: boolean", initPath, `{"file_name":true,"size":1}`, js, 400, "invalid_json", `field "file_name" must be a string, not a boolean`},
		{"type in a field: object for an array", completePath, `{"parts":{}}`, js, 400, "invalid_json", `field "parts" must be an array, not an object`},
		{"nested field", completePath, `{"parts":[{"part_number":"1","etag":"x"}]}`, js, 400, "invalid_json", `field "parts.part_number" must be an integer, not a string`},
		{"nested element", completePath, `{"parts":[5]}`, js, 400, "invalid_json", `field "parts" must be an object, not a number`},
		{"map value", presignPath, `{"part_numbers":[1],"content_md5":{"1":5}}`, js, 400, "invalid_json", `must be a string, not a number`},
		{"unknown field", initPath, `{"file_name":"a","size":1,"sizes":2}`, js, 400, "invalid_json", `unknown field "sizes"`},
		{"unknown nested field", completePath, `{"parts":[{"part_number":1,"tag":"x"}]}`, js, 400, "invalid_json", `unknown field "tag"`},
		{"trailing data", initPath, `{"file_name":"a","size":1} {}`, js, 400, "invalid_json", "unexpected data after the JSON value"},
		{"empty", initPath, ``, js, 400, "invalid_json", "the request body is empty"},
		{"white space only", initPath, " \n\t ", js, 400, "invalid_json", "the request body is empty"},
		{"truncated", initPath, `{"file_name":"a"`, js, 400, "invalid_json", "truncated JSON"},
		{"truncated in a string", initPath, `{"file_name":"a`, js, 400, "invalid_json", "truncated JSON"},
		{"too large", initPath, `{"file_name":"` + strings.Repeat("a", 2<<20) + `"}`, js, 413, "body_too_large", "request body exceeds"},
		{"wrong content type", initPath, `{"file_name":"a","size":1}`, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "unsupported_media_type", "Content-Type: application/json"},
		{"text/plain", initPath, `{"file_name":"a","size":1}`, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type", "Content-Type: application/json"},
		{"no content type", initPath, `{"file_name":"a","size":1}`, []string{"Content-Type", ""}, 415, "unsupported_media_type", "Content-Type: application/json"},
		{"malformed content type", initPath, `{"file_name":"a","size":1}`, []string{"Content-Type", "application/json; ="}, 415, "unsupported_media_type", "Content-Type: application/json"},
		{"a JSON-like type", initPath, `{"file_name":"a","size":1}`, []string{"Content-Type", "application/merge-patch+json"}, 415, "unsupported_media_type", "Content-Type: application/json"},

		{"companion: type at top level", s3Create, `[]`, js, 400, "invalid_json", "the body must be an object, not an array"},
		{"companion: syntax", s3Create, `{"filename":`, js, 400, "invalid_json", "malformed JSON"},
		{"companion: complete, type at top level", s3Complete, `["parts"]`, js, 400, "invalid_json", "the body must be an object, not an array"},
		{"companion: text/plain", s3Create, `{"filename":"a","type":"text/plain"}`, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type", "Content-Type: application/json"},
		{"companion: complete, no content type", s3Complete, `{"parts":[]}`, []string{"Content-Type", ""}, 415, "unsupported_media_type", "Content-Type: application/json"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := a.do("POST", c.path, alice, c.body, c.header...)
			var p struct{ Code, Detail, Error string }
			_ = json.Unmarshal(r.Body, &p)
			detail := p.Detail
			if strings.HasPrefix(c.path, "/s3/") {
				detail = p.Error // Companion's {"error": "..."}
			}
			if r.Status != c.status || p.Code != c.code || !strings.Contains(detail, c.want) {
				t.Fatalf("%d %s; want %d %s with a detail containing %q", r.Status, r.Body, c.status, c.code, c.want)
			}
			if m := goTypeText.FindString(detail); m != "" {
				t.Fatalf("detail %q names a Go type (%q)", detail, m)
			}
		})
	}
}
