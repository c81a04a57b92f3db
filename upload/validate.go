package upload

import (
	"encoding/base64"
	"encoding/hex"
	"mime"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ferry-io/ferry/errkind"
)

// InitRequest describes the file a client wants to upload.
type InitRequest struct {
	FileName    string
	Size        int64
	ContentType string // empty means application/octet-stream
	SHA256      string // hex; empty when the client did not hash the file
	PartSize    int64  // 0 lets ferry choose
}

// plan is a validated InitRequest with the part layout decided.
type plan struct {
	name, contentType, sha256 string
	size, partSize            int64
	partCount                 int
}

// validate checks every field and computes the part layout. Every error is
// a 400 naming the field.
func (s *Service) validate(r InitRequest) (plan, error) {
	p := plan{name: r.FileName, size: r.Size}
	if err := checkFileName(r.FileName); err != nil {
		return p, err
	}
	if r.Size <= 0 {
		return p, errkind.Invalidf("invalid_size", "size must be a positive number of bytes")
	}
	if r.Size > s.cfg.MaxSize {
		return p, errkind.Invalidf("size_too_large", "size %d exceeds the maximum of %d bytes", r.Size, s.cfg.MaxSize)
	}
	ct, err := checkContentType(r.ContentType)
	if err != nil {
		return p, err
	}
	p.contentType = ct
	if r.SHA256 != "" {
		if p.sha256, err = checkSHA256(r.SHA256, "sha256"); err != nil {
			return p, err
		}
	}
	if r.PartSize != 0 {
		if r.PartSize < MinPartSize || r.PartSize > MaxPartSize {
			return p, errkind.Invalidf("invalid_part_size", "part_size must be between %d and %d bytes", MinPartSize, MaxPartSize)
		}
		p.partSize = r.PartSize
		if n := ceilDiv(r.Size, r.PartSize); n > MaxParts {
			return p, errkind.Invalidf("too_many_parts", "size %d in parts of %d makes %d parts; at most %d are allowed", r.Size, r.PartSize, n, MaxParts)
		}
	} else {
		p.partSize = s.cfg.DefaultPartSize
		if ceilDiv(r.Size, p.partSize) > MaxParts {
			// Raise the part size to the next MiB that keeps within the
			// part limit.
			p.partSize = ceilDiv(ceilDiv(r.Size, MaxParts), 1<<20) << 20
		}
		if p.partSize > MaxPartSize {
			return p, errkind.Invalidf("size_too_large", "size %d needs parts over S3's 5 GiB limit", r.Size)
		}
	}
	p.partCount = int(ceilDiv(r.Size, p.partSize))
	return p, nil
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// checkFileName accepts a display name for a file: not a path, nothing a
// terminal or a Content-Disposition header could trip over.
func checkFileName(name string) error {
	bad := func(why string) error {
		return errkind.Invalidf("invalid_file_name", "file_name %s", why)
	}
	switch {
	case name == "":
		return bad("is required")
	case len(name) > maxNameBytes:
		return bad("is longer than 255 bytes")
	case !utf8.ValidString(name):
		return bad("is not valid UTF-8")
	case strings.ContainsAny(name, `/\`):
		return bad("must not contain path separators")
	case name == "." || name == "..":
		return bad("must not be . or ..")
	case strings.TrimSpace(name) == "":
		return bad("must not be blank")
	}
	for _, r := range name {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || r == utf8.RuneError {
			return bad("must not contain control characters")
		}
	}
	return nil
}

func checkContentType(ct string) (string, error) {
	if ct == "" {
		return "application/octet-stream", nil
	}
	if len(ct) > 255 {
		return "", errkind.Invalidf("invalid_content_type", "content_type is longer than 255 bytes")
	}
	for _, r := range ct {
		if r < 0x20 || r >= 0x7f {
			return "", errkind.Invalidf("invalid_content_type", "content_type must be printable ASCII")
		}
	}
	if _, _, err := mime.ParseMediaType(ct); err != nil {
		return "", errkind.Invalidf("invalid_content_type", "content_type is not a media type")
	}
	return ct, nil
}

// checkSHA256 normalises a hex SHA-256 to lower case.
func checkSHA256(v, field string) (string, error) {
	if len(v) != 64 {
		return "", errkind.Invalidf("invalid_"+field, "%s must be 64 hex characters", field)
	}
	if _, err := hex.DecodeString(v); err != nil {
		return "", errkind.Invalidf("invalid_"+field, "%s must be 64 hex characters", field)
	}
	return strings.ToLower(v), nil
}

// checkPartNumbers validates a presign batch against the upload's layout.
func checkPartNumbers(nums []int, partCount int, md5s map[int]string) error {
	if len(nums) == 0 {
		return errkind.Invalidf("invalid_part_numbers", "part_numbers must list at least one part")
	}
	if len(nums) > MaxBatch {
		return errkind.Invalidf("invalid_part_numbers", "at most %d part numbers per request", MaxBatch)
	}
	seen := make(map[int]bool, len(nums))
	for _, n := range nums {
		if n < 1 || n > partCount {
			return errkind.Invalidf("invalid_part_numbers", "part number %d is outside 1-%d", n, partCount)
		}
		if seen[n] {
			return errkind.Invalidf("invalid_part_numbers", "part number %d is listed twice", n)
		}
		seen[n] = true
	}
	for n, v := range md5s {
		if !seen[n] {
			return errkind.Invalidf("invalid_content_md5", "content_md5 names part %d, which part_numbers does not list", n)
		}
		if b, err := base64.StdEncoding.DecodeString(v); err != nil || len(b) != 16 {
			return errkind.Invalidf("invalid_content_md5", "content_md5 of part %d must be the base64 of 16 bytes", n)
		}
	}
	return nil
}

// normalizeETag strips the quotes S3 puts around ETags, so a client's
// unquoted copy compares equal.
func normalizeETag(e string) string {
	return strings.ToLower(strings.Trim(strings.TrimSpace(e), `"`))
}

func checkETag(e string) error {
	n := normalizeETag(e)
	if n == "" || len(e) > 128 {
		return errkind.Invalidf("invalid_etag", "etag must be 1-128 characters")
	}
	for _, r := range n {
		if r < 0x21 || r >= 0x7f {
			return errkind.Invalidf("invalid_etag", "etag must be printable ASCII")
		}
	}
	return nil
}
