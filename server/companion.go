package server

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/upload"
)

// routeCompanion adds the routes Uppy's @uppy/aws-s3 plugin calls on a
// Companion server, with Companion 6.2.2's field names, types and status
// codes, so an unmodified Uppy uploads through ferry's upload service.
// Uppy 6 (companionEndpoint) sends no custom headers and authenticates
// with the same-origin session cookie; Uppy 5 (endpoint + headers) sends a
// bearer token, from another origin if FERRY_CORS_ORIGINS allows it.
// Errors are Companion's {"error": "..."} (with ferry's code alongside).
func (s *Server) routeCompanion(e *gin.Engine) {
	s.companionRoutes(e.Group("/s3", s.companionCORS(), companionErrors, s.authenticate(), requireUser))
	// The same routes with an upload ticket in the path, for Uppy 6, whose
	// companionEndpoint sends no Authorization header (tickets.go).
	s.companionRoutes(e.Group(ticketPathPrefix+"/s3", s.companionCORS(), companionErrors, s.ticketFromPath, requireUser))
}

func (s *Server) companionRoutes(g *gin.RouterGroup) {
	g.OPTIONS("/*path", func(*gin.Context) {}) // answered by companionCORS
	g.GET("/params", s.refuseCrossSite, s.limitCreates, h(s.companionParams))
	g.POST("/multipart", s.limitCreates, h(s.companionCreate))
	g.GET("/multipart/:uploadId", h(s.companionParts))
	g.DELETE("/multipart/:uploadId", h(s.companionAbort))
	g.GET("/multipart/:uploadId/batch", h(s.companionSignBatch))
	g.GET("/multipart/:uploadId/:partNumber", h(s.companionSignPart))
	g.POST("/multipart/:uploadId/complete", h(s.companionComplete))
}

// companionCORS lets ferry's configured origins call the Companion routes,
// with cookies or an Authorization header, and answers their preflights.
// Companion's i-am header is deliberately not sent: Uppy would redirect
// later requests to the host it names.
func (s *Server) companionCORS() gin.HandlerFunc {
	return s.cors(true, "GET, POST, DELETE, OPTIONS", "Authorization, Content-Type, Accept, Uppy-Versions")
}

var errCrossSiteParams = errkind.New(errkind.Forbidden, "cross_origin", "s3: POST policies are only given to ferry's own pages and origins")

// refuseCrossSite guards GET /s3/params, a GET that opens an upload (it
// has to be a GET: Uppy 6 calls it so). SameSite=Lax still sends the
// session cookie when a page elsewhere navigates the browser to it, and
// CrossOriginProtection lets every GET through, so this check asks the
// browser itself: Sec-Fetch-Site other than same-origin or none (typed,
// bookmarked) is refused, unless the request is a CORS fetch from one of
// ferry's origins (Uppy 5 on an allowed origin), which a navigation never
// is since it carries no Origin. Clients that send no Sec-Fetch-Site are
// not browsers, or too old to tell.
func (s *Server) refuseCrossSite(c *gin.Context) {
	switch c.GetHeader("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		if !s.allowedOrigin(c.GetHeader("Origin")) {
			abort(c, errCrossSiteParams)
			return
		}
	}
	c.Next()
}

// companionErrors makes the errors of the routes behind it, their
// authentication's included, Companion's {"error": "..."} (with ferry's
// stable code alongside) instead of problem+json.
func companionErrors(c *gin.Context) {
	c.Set(companionStyle, true)
	c.Next()
}

// companionBody reads a JSON object body leniently, as Companion's
// express.json() does: unknown fields are ignored, types are checked by
// the handler. Like express.json(), it reads only application/json (what
// Uppy 5 and 6 send with every body); where Companion would then see an
// empty object, ferry says what to send.
func companionBody(c *gin.Context, dst any) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	if len(body) == 0 {
		body = []byte("{}")
	} else if err := requireJSON(c.Request); err != nil {
		return err
	}
	if err := json.Unmarshal(body, dst); err != nil {
		return errkind.New(errkind.Invalid, "invalid_json", "s3: %s", describeJSONError(err))
	}
	return nil
}

// companionKey insists on the key query parameter as Companion does; its
// value is not used, since the upload row holds the real key.
func companionKey(c *gin.Context) error {
	if _, ok := c.GetQuery("key"); !ok {
		return errkind.Invalidf("missing_key", `s3: the object key must be passed as a query parameter. For example: "?key=abc.jpg"`)
	}
	return nil
}

// companionPartNumber reads a part number in a Companion path or list; the
// upload decides whether it is within its parts.
func companionPartNumber(v string) (int, error) {
	n, ok := parseWhole(v, 1)
	if !ok || n > math.MaxInt32 {
		return 0, errkind.Invalidf("invalid_part_number", "s3: the part number must be a number between 1 and %d.", upload.MaxPartNumber)
	}
	return int(n), nil
}

func (s *Server) companionCreate(c *gin.Context) error {
	var req struct {
		Filename json.RawMessage `json:"filename"`
		Type     json.RawMessage `json:"type"`
		Metadata json.RawMessage `json:"metadata"`
	}
	if err := companionBody(c, &req); err != nil {
		return err
	}
	var name, ct string
	if !isJSONString(req.Filename) || json.Unmarshal(req.Filename, &name) != nil || name == "" {
		return errkind.Invalidf("invalid_file_name", "s3: filename must be a non-empty string")
	}
	if !isJSONString(req.Type) || json.Unmarshal(req.Type, &ct) != nil {
		return errkind.Invalidf("invalid_content_type", "s3: content type must be a string")
	}
	meta, err := upload.ParseMetadata(req.Metadata, "metadata")
	if err != nil {
		return err
	}
	m, err := s.d.Uploads.InitMultipart(c.Request.Context(), caller(c).ID,
		upload.OpenRequest{FileName: name, ContentType: ct, Metadata: meta, Ticket: ticketOf(c)})
	if err != nil {
		return err
	}
	c.PureJSON(http.StatusOK, gin.H{"key": m.Key, "uploadId": m.S3UploadID, "bucket": m.Bucket})
	return nil
}

type companionPart struct {
	PartNumber   int       `json:"PartNumber"`
	ETag         string    `json:"ETag"`
	Size         int64     `json:"Size"`
	LastModified time.Time `json:"LastModified"`
}

func (s *Server) companionParts(c *gin.Context) error {
	if err := companionKey(c); err != nil {
		return err
	}
	parts, err := s.d.Uploads.MultipartParts(c.Request.Context(), caller(c).ID, c.Param("uploadId"))
	if err != nil {
		return err
	}
	out := make([]companionPart, len(parts))
	for i, p := range parts {
		out[i] = companionPart{PartNumber: p.Number, ETag: p.ETag, Size: p.Size, LastModified: p.LastModified.UTC()}
	}
	c.Header("Cache-Control", "no-store")
	c.PureJSON(http.StatusOK, out)
	return nil
}

func (s *Server) companionSign(c *gin.Context, parts []int) (map[int]upload.PresignedPart, error) {
	if err := companionKey(c); err != nil {
		return nil, err
	}
	c.Header("Cache-Control", "no-store")
	return s.d.Uploads.PresignMultipart(c.Request.Context(), caller(c).ID, c.Param("uploadId"), parts)
}

func (s *Server) companionSignPart(c *gin.Context) error {
	n, err := companionPartNumber(c.Param("partNumber"))
	if err != nil {
		return err
	}
	urls, err := s.companionSign(c, []int{n})
	if err != nil {
		return err
	}
	u := urls[n]
	c.PureJSON(http.StatusOK, gin.H{"url": u.URL, "expires": expiresIn(u.ExpiresAt)})
	return nil
}

func (s *Server) companionSignBatch(c *gin.Context) error {
	list, ok := c.GetQuery("partNumbers")
	if !ok {
		if err := companionKey(c); err != nil {
			return err
		}
		return errkind.Invalidf("invalid_part_numbers", `s3: the part numbers must be passed as a comma separated query parameter. For example: "?partNumbers=4,6,7,21"`)
	}
	var nums []int
	for _, v := range strings.Split(list, ",") {
		n, err := companionPartNumber(v)
		if err != nil {
			return err
		}
		nums = append(nums, n)
	}
	urls, err := s.companionSign(c, nums)
	if err != nil {
		return err
	}
	out := make(map[string]string, len(urls))
	for n, u := range urls {
		out[strconv.Itoa(n)] = u.URL
	}
	c.PureJSON(http.StatusOK, gin.H{"presignedUrls": out})
	return nil
}

// expiresIn is a URL's remaining lifetime in whole seconds, the unit
// Companion's expires field uses.
func expiresIn(at time.Time) int {
	return int(time.Until(at).Round(time.Second).Seconds())
}

func (s *Server) companionComplete(c *gin.Context) error {
	if err := companionKey(c); err != nil {
		return err
	}
	var req struct {
		Parts json.RawMessage `json:"parts"`
	}
	if err := companionBody(c, &req); err != nil {
		return err
	}
	parts, err := companionCompletedParts(req.Parts)
	if err != nil {
		return err
	}
	m, err := s.d.Uploads.CompleteMultipart(c.Request.Context(), caller(c).ID, c.Param("uploadId"), parts)
	if err != nil {
		return err
	}
	// Where Companion answers S3's object URL, ferry answers the upload's
	// own status URL: the object is private, and the upload is verified in
	// the background, so that is where a client follows it.
	c.PureJSON(http.StatusOK, gin.H{"location": s.d.PublicURL + "/uploads/" + m.UploadID, "key": m.Key, "bucket": m.Bucket})
	return nil
}

func isJSONString(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '"'
}

var errCompanionParts = errkind.Invalidf("invalid_parts", "s3: `parts` must be an array of {ETag, PartNumber} objects.")

// companionCompletedParts checks the types Companion checks: an array of
// objects with a number PartNumber and a string ETag.
func companionCompletedParts(raw json.RawMessage) ([]upload.ClientPart, error) {
	var items []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil || items == nil {
		return nil, errCompanionParts
	}
	out := make([]upload.ClientPart, len(items))
	for i, it := range items {
		var n json.Number
		var etag string
		num := bytes.TrimSpace(it["PartNumber"])
		if len(num) == 0 || num[0] == '"' || json.Unmarshal(num, &n) != nil ||
			!isJSONString(it["ETag"]) || json.Unmarshal(it["ETag"], &etag) != nil {
			return nil, errCompanionParts
		}
		v, err := n.Int64()
		if err != nil || v < 1 || v > upload.MaxPartNumber {
			return nil, errkind.Invalidf("invalid_parts", "s3: part numbers must be between 1 and %d", upload.MaxPartNumber)
		}
		out[i] = upload.ClientPart{Number: int(v), ETag: etag}
	}
	return out, nil
}

func (s *Server) companionAbort(c *gin.Context) error {
	if err := companionKey(c); err != nil {
		return err
	}
	if _, err := s.d.Uploads.AbortMultipart(c.Request.Context(), caller(c).ID, c.Param("uploadId")); err != nil {
		return err
	}
	c.PureJSON(http.StatusOK, gin.H{})
	return nil
}

// companionParams answers a POST policy for a browser form upload straight
// to S3: {method, url, fields, expires}, fields.key included; or, on a store
// without POST policies, a presigned PUT: {method: "PUT", url, fields: {},
// headers, expires}. The upload goes through ferry's upload service like
// any other (package upload, InitPost).
func (s *Server) companionParams(c *gin.Context) error {
	q := c.Request.URL.Query()
	name := q.Get("filename")
	if name == "" {
		return errkind.Invalidf("invalid_file_name", "s3: filename must be a non-empty string")
	}
	fields := map[string]string{"success_action_status": "201"}
	sent := map[string]string{}
	for k, v := range q {
		meta, ok := strings.CutPrefix(k, "metadata[")
		if !ok {
			continue
		}
		meta, ok = strings.CutSuffix(meta, "]")
		if !ok || !metaName.MatchString(meta) || len(v) != 1 || !printableASCII(v[0]) {
			return errkind.Invalidf("invalid_metadata", "s3: metadata names and values must be ASCII-safe")
		}
		fields["x-amz-meta-"+strings.ToLower(meta)] = v[0]
		sent[meta] = v[0]
	}
	meta, err := upload.MetadataFromStrings(sent, "metadata")
	if err != nil {
		return err
	}
	p, err := s.d.Uploads.InitPost(c.Request.Context(), caller(c).ID,
		upload.OpenRequest{FileName: name, ContentType: q.Get("type"), Metadata: meta, Ticket: ticketOf(c)}, fields)
	if err != nil {
		return err
	}
	c.Header("Cache-Control", "no-store")
	if p.Method == http.MethodPut {
		// A store without POST policies: Uppy sends the file as the body of
		// a PUT with these headers, as it does for any PUT parameters.
		c.PureJSON(http.StatusOK, gin.H{"method": "PUT", "url": p.Put.URL, "fields": gin.H{}, "headers": p.Put.Headers, "expires": expiresIn(p.Put.ExpiresAt)})
		return nil
	}
	c.PureJSON(http.StatusOK, gin.H{"method": "POST", "url": p.Policy.URL, "fields": p.Policy.Fields, "expires": expiresIn(p.Policy.ExpiresAt)})
	return nil
}

var metaName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

func printableASCII(v string) bool {
	if len(v) > 1024 {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] >= 0x7f {
			return false
		}
	}
	return true
}
