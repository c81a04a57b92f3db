package server

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/upload"
	"github.com/ferry-io/ferry/users"
)

// routeUploads adds the native upload API and the files API; a service
// key with files:read may read any file.
func (s *Server) routeUploads(api, authed *gin.RouterGroup) {
	authed.POST("/uploads", s.limitCreates, h(s.initUpload))
	authed.GET("/uploads", h(s.findUpload))
	authed.POST("/uploads/proofs/:challenge_id", h(s.proveUpload))
	authed.GET("/uploads/:id", h(s.uploadStatus))
	authed.DELETE("/uploads/:id", h(s.abortUpload))
	authed.POST("/uploads/:id/presign", h(s.presignParts))
	authed.PUT("/uploads/:id/parts/:n", h(s.reportPart))
	authed.POST("/uploads/:id/complete", h(s.completeUpload))
	authed.POST("/uploads/:id/sha256", h(s.declareSHA256))

	authed.GET("/files", h(s.listFiles))
	api.GET("/files/:id", userOrScope(users.ScopeFilesRead), h(s.getFile))
	authed.DELETE("/files/:id", h(s.deleteFile))
}

// uploadJSON is an upload as the API shows it.
type uploadJSON struct {
	UploadID    string `json:"upload_id"`
	State       string `json:"state"`
	FileName    string `json:"file_name"`
	ContentType string `json:"content_type"`
	Size        int64  `json:"size"`
	SHA256      string `json:"sha256,omitempty"`
	// SHA256Verified, on a successful upload, says whether sha256 is what
	// ferry computed from the stored bytes (true) or still the client's
	// claim (false, until the background verification is done).
	SHA256Verified *bool      `json:"sha256_verified,omitempty"`
	Checksum       string     `json:"checksum_algorithm,omitempty"`
	PartSize       int64      `json:"part_size"`
	PartCount      int        `json:"part_count"`
	Parts          []partJSON `json:"parts"`
	ExpiresAt      *time.Time `json:"expires_at,omitempty"`
	Error          string     `json:"error,omitempty"`
	FileID         string     `json:"file_id,omitempty"`
	Instant        bool       `json:"instant,omitempty"`
	// InstantCandidate answers a head_crc32c at init: ferry holds verified
	// content of this size and head, so hashing the file may pay off.
	InstantCandidate bool `json:"instant_candidate,omitempty"`
}

type partJSON struct {
	PartNumber int    `json:"part_number"`
	Size       int64  `json:"size"`
	ETag       string `json:"etag"`
	CRC32C     string `json:"checksum_crc32c,omitempty"`
}

func toUploadJSON(st upload.Status) uploadJSON {
	out := uploadJSON{
		UploadID: st.UploadID, State: st.State, FileName: st.FileName, ContentType: st.ContentType, Size: st.Size,
		SHA256: st.SHA256, PartSize: st.PartSize, PartCount: st.PartCount, Parts: make([]partJSON, len(st.Parts)),
		Error: st.Error, FileID: st.FileID, Instant: st.Instant, Checksum: st.Checksum, InstantCandidate: st.InstantCandidate,
	}
	for i, p := range st.Parts {
		out.Parts[i] = partJSON{PartNumber: p.Number, Size: p.Size, ETag: p.ETag, CRC32C: p.CRC32C}
	}
	if st.State == upload.StateUploading {
		exp := st.ExpiresAt
		out.ExpiresAt = &exp
	}
	if st.State == upload.StateSuccess {
		v := st.SHA256Verified
		out.SHA256Verified = &v
	}
	return out
}

// instantJSON answers an upload that needed no bytes.
type instantJSON struct {
	State    string `json:"state"`
	Instant  bool   `json:"instant"`
	FileID   string `json:"file_id"`
	UploadID string `json:"upload_id"`
}

type challengeJSON struct {
	ID        string      `json:"id"`
	Nonce     string      `json:"nonce"`
	Ranges    []rangeJSON `json:"ranges"`
	ExpiresAt time.Time   `json:"expires_at"`
}

type rangeJSON struct {
	Offset int64 `json:"offset"`
	Length int64 `json:"length"`
}

func toChallengeJSON(ch *upload.Challenge) challengeJSON {
	out := challengeJSON{ID: ch.ID, Nonce: ch.Nonce, Ranges: make([]rangeJSON, len(ch.Ranges)), ExpiresAt: ch.ExpiresAt}
	for i, r := range ch.Ranges {
		out.Ranges[i] = rangeJSON(r)
	}
	return out
}

// clientPartJSON is a part as the client names it at completion.
type clientPartJSON struct {
	Number int    `json:"part_number"`
	ETag   string `json:"etag"`
}

func writeInitResult(c *gin.Context, res upload.InitResult) {
	switch res.Outcome {
	case upload.Created:
		c.PureJSON(http.StatusCreated, toUploadJSON(res.Upload))
	case upload.Resumed:
		c.PureJSON(http.StatusOK, toUploadJSON(res.Upload))
	case upload.Instant:
		c.PureJSON(http.StatusOK, instantJSON{State: res.Upload.State, Instant: true, FileID: res.Upload.FileID, UploadID: res.Upload.UploadID})
	case upload.ProofRequired:
		ch := res.Challenge
		c.PureJSON(http.StatusOK, gin.H{"state": "proof_required",
			"challenge": toChallengeJSON(ch)})
	}
}

func (s *Server) initUpload(c *gin.Context) error {
	var req struct {
		FileName        string          `json:"file_name"`
		Size            int64           `json:"size"`
		ContentType     string          `json:"content_type"`
		SHA256          string          `json:"sha256"`
		PartSize        int64           `json:"part_size"`
		Checksum        string          `json:"checksum_algorithm"`
		FirstPartCRC32C string          `json:"first_part_crc32c"`
		HeadCRC32C      string          `json:"head_crc32c"`
		Metadata        json.RawMessage `json:"metadata"`
	}
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	meta, err := upload.ParseMetadata(req.Metadata, "metadata")
	if err != nil {
		return err
	}
	res, err := s.d.Uploads.Init(c.Request.Context(), caller(c).ID, upload.InitRequest{
		FileName: req.FileName, Size: req.Size, ContentType: req.ContentType, SHA256: req.SHA256, PartSize: req.PartSize,
		Checksum: req.Checksum, FirstPartCRC32C: req.FirstPartCRC32C, HeadCRC32C: req.HeadCRC32C, Metadata: meta, Ticket: ticketOf(c),
	})
	if err != nil {
		return err
	}
	writeInitResult(c, res)
	return nil
}

func (s *Server) proveUpload(c *gin.Context) error {
	var req struct {
		Digests []string `json:"digests"`
	}
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	res, err := s.d.Uploads.Prove(c.Request.Context(), caller(c).ID, c.Param("challenge_id"), req.Digests)
	if err != nil {
		return err
	}
	writeInitResult(c, res)
	return nil
}

func (s *Server) findUpload(c *gin.Context) error {
	q := c.Request.URL.Query()
	for _, f := range []string{"sha256", "size"} {
		if len(q[f]) != 1 {
			return errkind.Invalidf("invalid_query", "give exactly one %s", f)
		}
	}
	size, err := positive(q.Get("size"), "size")
	if err != nil {
		return err
	}
	st, err := s.d.Uploads.Find(c.Request.Context(), caller(c).ID, q.Get("sha256"), size)
	if err != nil {
		return err
	}
	c.PureJSON(http.StatusOK, toUploadJSON(st))
	return nil
}

func (s *Server) uploadStatus(c *gin.Context) error {
	var wait time.Duration
	if v, ok := c.GetQuery("wait"); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			return errkind.Invalidf("invalid_wait", "wait must be a duration such as 30s")
		}
		wait = d
	}
	st, err := s.d.Uploads.WaitStatus(c.Request.Context(), caller(c).ID, c.Param("id"), wait)
	if err != nil {
		return err
	}
	c.PureJSON(http.StatusOK, toUploadJSON(st))
	return nil
}

func (s *Server) abortUpload(c *gin.Context) error {
	st, err := s.d.Uploads.Abort(c.Request.Context(), caller(c).ID, c.Param("id"))
	if err != nil {
		return err
	}
	c.PureJSON(http.StatusOK, gin.H{"upload_id": st.UploadID, "state": st.State})
	return nil
}

type presignedJSON struct {
	URL       string            `json:"url"`
	Method    string            `json:"method"`
	Headers   map[string]string `json:"headers"`
	ExpiresAt time.Time         `json:"expires_at"`
}

func (s *Server) presignParts(c *gin.Context) error {
	var req struct {
		PartNumbers []int             `json:"part_numbers"`
		ContentMD5  map[string]string `json:"content_md5"`
		CRC32C      map[string]string `json:"checksum_crc32c"`
	}
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	md5s, err := byPartNumber(req.ContentMD5, "content_md5")
	if err != nil {
		return err
	}
	crcs, err := byPartNumber(req.CRC32C, "checksum_crc32c")
	if err != nil {
		return err
	}
	urls, err := s.d.Uploads.Presign(c.Request.Context(), caller(c).ID, c.Param("id"),
		upload.PresignRequest{Parts: req.PartNumbers, ContentMD5: md5s, CRC32C: crcs})
	if err != nil {
		return err
	}
	out := make(map[string]presignedJSON, len(urls))
	for n, u := range urls {
		out[strconv.Itoa(n)] = presignedJSON{URL: u.URL, Method: u.Method, Headers: u.Headers, ExpiresAt: u.ExpiresAt}
	}
	c.Header("Cache-Control", "no-store")
	c.PureJSON(http.StatusOK, gin.H{"urls": out})
	return nil
}

// byPartNumber reads a JSON object keyed by part number.
func byPartNumber(m map[string]string, field string) (map[int]string, error) {
	out := make(map[int]string, len(m))
	for k, v := range m {
		n, ok := parseWhole(k, 1)
		if !ok || n > math.MaxInt32 {
			return nil, errkind.Invalidf("invalid_"+field, "%s keys must be part numbers", field)
		}
		out[int(n)] = v
	}
	return out, nil
}

func (s *Server) reportPart(c *gin.Context) error {
	n, ok := parseWhole(c.Param("n"), 1)
	if !ok || n > math.MaxInt32 {
		return errkind.Invalidf("invalid_part_number", "the part number must be a positive integer")
	}
	var req struct {
		ETag string `json:"etag"`
		Size *int64 `json:"size"`
	}
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	if req.Size == nil {
		return errkind.Invalidf("invalid_part_size", "size is required")
	}
	p, err := s.d.Uploads.ReportPart(c.Request.Context(), caller(c).ID, c.Param("id"), int(n), req.ETag, *req.Size)
	if err != nil {
		return err
	}
	c.PureJSON(http.StatusOK, partJSON{PartNumber: p.Number, Size: p.Size, ETag: p.ETag})
	return nil
}

func (s *Server) completeUpload(c *gin.Context) error {
	var req struct {
		Parts  []clientPartJSON `json:"parts"`
		SHA256 string           `json:"sha256"`
		CRC32C string           `json:"checksum_crc32c"`
	}
	if c.Request.ContentLength != 0 {
		if err := bindJSON(c, &req); err != nil {
			return err
		}
	}
	st, err := s.d.Uploads.Complete(c.Request.Context(), caller(c).ID, c.Param("id"),
		upload.CompleteRequest{Parts: clientParts(req.Parts), SHA256: req.SHA256, CRC32C: req.CRC32C})
	if err != nil {
		return err
	}
	status := http.StatusOK
	if st.State == upload.StatePending || st.State == upload.StateMerging {
		status = http.StatusAccepted
	}
	out := gin.H{"upload_id": st.UploadID, "state": st.State}
	if st.FileID != "" {
		out["file_id"] = st.FileID
	}
	if st.Error != "" {
		out["error"] = st.Error
	}
	c.PureJSON(status, out)
	return nil
}

// fileJSON is a file as the API shows it. metadata is the trusted
// metadata of the ticket that made it, client_metadata what its uploader
// sent; both are objects, {} for none.
type fileJSON struct {
	FileID         string          `json:"file_id"`
	Name           string          `json:"name"`
	Size           int64           `json:"size"`
	SHA256         string          `json:"sha256"`
	SHA256Verified bool            `json:"sha256_verified"`
	ContentType    string          `json:"content_type"`
	CreatedAt      time.Time       `json:"created_at"`
	DownloadURL    string          `json:"download_url"`
	LinkExpires    time.Time       `json:"download_url_expires_at"`
	Metadata       upload.Metadata `json:"metadata"`
	ClientMetadata upload.Metadata `json:"client_metadata"`
	TicketID       string          `json:"ticket_id,omitempty"`
}

func toFileJSON(f upload.File) fileJSON {
	return fileJSON{FileID: f.ID, Name: f.Name, Size: f.Size, SHA256: f.SHA256, SHA256Verified: f.SHA256Verified,
		ContentType: f.ContentType, CreatedAt: f.CreatedAt, DownloadURL: f.DownloadURL, LinkExpires: f.LinkExpires,
		Metadata: f.Metadata, ClientMetadata: f.ClientMetadata, TicketID: f.TicketID}
}

func (s *Server) declareSHA256(c *gin.Context) error {
	var req struct {
		SHA256 string `json:"sha256"`
	}
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	res, err := s.d.Uploads.DeclareSHA256(c.Request.Context(), caller(c).ID, c.Param("id"), req.SHA256)
	if err != nil {
		return err
	}
	if res.Outcome == upload.Resumed {
		c.PureJSON(http.StatusOK, toUploadJSON(res.Upload))
		return nil
	}
	writeInitResult(c, res)
	return nil
}

func (s *Server) listFiles(c *gin.Context) error {
	cursor, limit, err := pageQuery(c)
	if err != nil {
		return err
	}
	files, next, err := s.d.Uploads.Files(c.Request.Context(), caller(c).ID, cursor, limit)
	if err != nil {
		return err
	}
	out := make([]fileJSON, len(files))
	for i, f := range files {
		out[i] = toFileJSON(f)
	}
	c.Header("Cache-Control", "no-store")
	c.PureJSON(http.StatusOK, pageBody("files", out, next))
	return nil
}

func (s *Server) getFile(c *gin.Context) error {
	var f upload.File
	var err error
	if _, isKey := serviceKey(c); isKey {
		f, err = s.d.Uploads.AnyFile(c.Request.Context(), c.Param("id"))
	} else {
		f, err = s.d.Uploads.File(c.Request.Context(), caller(c).ID, c.Param("id"))
	}
	if err != nil {
		return err
	}
	c.Header("Cache-Control", "no-store")
	c.PureJSON(http.StatusOK, toFileJSON(f))
	return nil
}

func (s *Server) deleteFile(c *gin.Context) error {
	if err := s.d.Uploads.DeleteFile(c.Request.Context(), caller(c).ID, c.Param("id")); err != nil {
		return err
	}
	c.Status(http.StatusNoContent)
	return nil
}

func clientParts(in []clientPartJSON) []upload.ClientPart {
	if in == nil {
		return nil
	}
	out := make([]upload.ClientPart, len(in))
	for i, p := range in {
		out[i] = upload.ClientPart(p)
	}
	return out
}
