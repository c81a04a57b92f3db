package server

import (
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/upload"
)

// routeUploads adds the native upload API and the files API.
func (s *Server) routeUploads(authed *gin.RouterGroup) {
	authed.POST("/uploads", h(s.initUpload))
	authed.GET("/uploads", h(s.findUpload))
	authed.POST("/uploads/proofs/:challenge_id", h(s.proveUpload))
	authed.GET("/uploads/:id", h(s.uploadStatus))
	authed.DELETE("/uploads/:id", h(s.abortUpload))
	authed.POST("/uploads/:id/presign", h(s.presignParts))
	authed.PUT("/uploads/:id/parts/:n", h(s.reportPart))
	authed.POST("/uploads/:id/complete", h(s.completeUpload))

	authed.GET("/files", h(s.listFiles))
	authed.GET("/files/:id", h(s.getFile))
	authed.DELETE("/files/:id", h(s.deleteFile))
}

// uploadJSON is an upload as the API shows it.
type uploadJSON struct {
	UploadID    string     `json:"upload_id"`
	State       string     `json:"state"`
	FileName    string     `json:"file_name"`
	ContentType string     `json:"content_type"`
	Size        int64      `json:"size"`
	SHA256      string     `json:"sha256,omitempty"`
	PartSize    int64      `json:"part_size"`
	PartCount   int        `json:"part_count"`
	Parts       []partJSON `json:"parts"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`
	Error       string     `json:"error,omitempty"`
	FileID      string     `json:"file_id,omitempty"`
	Instant     bool       `json:"instant,omitempty"`
}

type partJSON struct {
	PartNumber int    `json:"part_number"`
	Size       int64  `json:"size"`
	ETag       string `json:"etag"`
}

func toUploadJSON(st upload.Status) uploadJSON {
	out := uploadJSON{
		UploadID: st.UploadID, State: st.State, FileName: st.FileName, ContentType: st.ContentType, Size: st.Size,
		SHA256: st.SHA256, PartSize: st.PartSize, PartCount: st.PartCount, Parts: make([]partJSON, len(st.Parts)),
		Error: st.Error, FileID: st.FileID, Instant: st.Instant,
	}
	for i, p := range st.Parts {
		out.Parts[i] = partJSON{PartNumber: p.Number, Size: p.Size, ETag: p.ETag}
	}
	if st.State == upload.StateUploading {
		exp := st.ExpiresAt
		out.ExpiresAt = &exp
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
	ID        string         `json:"id"`
	Ranges    []upload.Range `json:"ranges"`
	ExpiresAt time.Time      `json:"expires_at"`
}

func writeInitResult(c *gin.Context, res upload.InitResult) {
	switch res.Outcome {
	case upload.Created:
		c.JSON(http.StatusCreated, toUploadJSON(res.Upload))
	case upload.Resumed:
		c.JSON(http.StatusOK, toUploadJSON(res.Upload))
	case upload.Instant:
		c.JSON(http.StatusOK, instantJSON{State: res.Upload.State, Instant: true, FileID: res.Upload.FileID, UploadID: res.Upload.UploadID})
	case upload.ProofRequired:
		ch := res.Challenge
		c.JSON(http.StatusOK, gin.H{"state": "proof_required",
			"challenge": challengeJSON{ID: ch.ID, Ranges: ch.Ranges, ExpiresAt: ch.ExpiresAt}})
	}
}

func (s *Server) initUpload(c *gin.Context) error {
	var req struct {
		FileName    string `json:"file_name"`
		Size        int64  `json:"size"`
		ContentType string `json:"content_type"`
		SHA256      string `json:"sha256"`
		PartSize    int64  `json:"part_size"`
	}
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	res, err := s.d.Uploads.Init(c.Request.Context(), caller(c).ID, upload.InitRequest{
		FileName: req.FileName, Size: req.Size, ContentType: req.ContentType, SHA256: req.SHA256, PartSize: req.PartSize,
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

// positive matches a canonical positive decimal: no sign, no leading
// zeros, at most 18 digits (so it fits an int64).
var positive = regexp.MustCompile(`^[1-9][0-9]{0,17}$`)

func parsePositive(v, field string) (int64, error) {
	if !positive.MatchString(v) {
		return 0, errkind.Invalidf("invalid_"+field, "%s must be a positive integer", field)
	}
	return strconv.ParseInt(v, 10, 64)
}

func (s *Server) findUpload(c *gin.Context) error {
	q := c.Request.URL.Query()
	for _, f := range []string{"sha256", "size"} {
		if len(q[f]) != 1 {
			return errkind.Invalidf("invalid_query", "give exactly one %s", f)
		}
	}
	size, err := parsePositive(q.Get("size"), "size")
	if err != nil {
		return err
	}
	st, err := s.d.Uploads.Find(c.Request.Context(), caller(c).ID, q.Get("sha256"), size)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, toUploadJSON(st))
	return nil
}

func (s *Server) uploadStatus(c *gin.Context) error {
	st, err := s.d.Uploads.Status(c.Request.Context(), caller(c).ID, c.Param("id"))
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, toUploadJSON(st))
	return nil
}

func (s *Server) abortUpload(c *gin.Context) error {
	st, err := s.d.Uploads.Abort(c.Request.Context(), caller(c).ID, c.Param("id"))
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, gin.H{"upload_id": st.UploadID, "state": st.State})
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
	}
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	md5s := make(map[int]string, len(req.ContentMD5))
	for k, v := range req.ContentMD5 {
		n, err := parsePositive(k, "content_md5")
		if err != nil || n > upload.MaxParts {
			return errkind.Invalidf("invalid_content_md5", "content_md5 keys must be part numbers")
		}
		md5s[int(n)] = v
	}
	urls, err := s.d.Uploads.Presign(c.Request.Context(), caller(c).ID, c.Param("id"), req.PartNumbers, md5s)
	if err != nil {
		return err
	}
	out := make(map[string]presignedJSON, len(urls))
	for n, u := range urls {
		out[strconv.Itoa(n)] = presignedJSON{URL: u.URL, Method: u.Method, Headers: u.Headers, ExpiresAt: u.ExpiresAt}
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, gin.H{"urls": out})
	return nil
}

func (s *Server) reportPart(c *gin.Context) error {
	n, err := parsePositive(c.Param("n"), "part_number")
	if err != nil || n > upload.MaxParts {
		return errkind.Invalidf("invalid_part_number", "the part number must be 1-%d", upload.MaxParts)
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
	c.JSON(http.StatusOK, partJSON{PartNumber: p.Number, Size: p.Size, ETag: p.ETag})
	return nil
}

func (s *Server) completeUpload(c *gin.Context) error {
	var req struct {
		Parts []upload.ClientPart `json:"parts"`
	}
	if c.Request.ContentLength != 0 {
		if err := bindJSON(c, &req); err != nil {
			return err
		}
	}
	st, err := s.d.Uploads.Complete(c.Request.Context(), caller(c).ID, c.Param("id"), req.Parts)
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
	c.JSON(status, out)
	return nil
}

// fileJSON is a file as the API shows it.
type fileJSON struct {
	FileID      string    `json:"file_id"`
	Name        string    `json:"name"`
	Size        int64     `json:"size"`
	SHA256      string    `json:"sha256"`
	ContentType string    `json:"content_type"`
	CreatedAt   time.Time `json:"created_at"`
	DownloadURL string    `json:"download_url"`
}

func toFileJSON(f upload.File) fileJSON {
	return fileJSON{FileID: f.ID, Name: f.Name, Size: f.Size, SHA256: f.SHA256, ContentType: f.ContentType,
		CreatedAt: f.CreatedAt, DownloadURL: f.DownloadURL}
}

func (s *Server) listFiles(c *gin.Context) error {
	limit := int64(100)
	if v, ok := c.GetQuery("limit"); ok {
		var err error
		if limit, err = parsePositive(v, "limit"); err != nil {
			return err
		}
		if limit > upload.MaxListLimit {
			return errkind.Invalidf("invalid_limit", "limit must be 1-%d", upload.MaxListLimit)
		}
	}
	files, next, err := s.d.Uploads.Files(c.Request.Context(), caller(c).ID, c.Query("cursor"), int(limit))
	if err != nil {
		return err
	}
	out := make([]fileJSON, len(files))
	for i, f := range files {
		out[i] = toFileJSON(f)
	}
	body := gin.H{"files": out}
	if next != "" {
		body["next_cursor"] = next
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, body)
	return nil
}

func (s *Server) getFile(c *gin.Context) error {
	f, err := s.d.Uploads.File(c.Request.Context(), caller(c).ID, c.Param("id"))
	if err != nil {
		return err
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, toFileJSON(f))
	return nil
}

func (s *Server) deleteFile(c *gin.Context) error {
	if err := s.d.Uploads.DeleteFile(c.Request.Context(), caller(c).ID, c.Param("id")); err != nil {
		return err
	}
	c.Status(http.StatusNoContent)
	return nil
}
