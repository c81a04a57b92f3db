package upload

import (
	"encoding/base64"
	"encoding/hex"
	"mime"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/s3store"
)

// InitRequest describes the file a client wants to upload.
type InitRequest struct {
	FileName    string
	Size        int64
	ContentType string // empty means application/octet-stream
	SHA256      string // hex; empty when the client did not hash the file (yet)
	PartSize    int64  // 0 lets ferry choose
	// Checksum asks for per-part and full-object checksums checked by S3
	// ("CRC32C"); ferry grants it when the store supports them.
	Checksum string
	// FirstPartCRC32C (base64) lets a client that has not hashed the whole
	// file find its own unfinished upload of the same size, part size and
	// first part: a cheap key that needs one part read, not the file.
	FirstPartCRC32C string
	// HeadCRC32C (base64) is the CRC32C of the file's first
	// min(Size, HeadLength) bytes. Init answers with InstantCandidate when
	// ferry holds verified content of this size and head, so a client need
	// hash the whole file only when an instant upload may come of it.
	HeadCRC32C string
	// Metadata is what the uploader says about the file (checked with
	// ParseMetadata); the file carries it as its client metadata.
	Metadata Metadata
	// Ticket, when the caller authenticated with an upload ticket, makes
	// the upload the ticket's one upload, within its limits and with its
	// metadata.
	Ticket *Ticket
}

// plan is a validated InitRequest with the part layout decided.
type plan struct {
	name, contentType, sha256 string
	size, partSize            int64
	partCount                 int
	checksum                  string // granted algorithm, or ""
	firstPartCRC32C           string
	headCRC32C                string
	clientMeta                Metadata
	ticket                    *Ticket
}

// validate checks every field and computes the part layout. Every error is
// a 400 naming the field.
func (s *Service) validate(r InitRequest) (plan, error) {
	p := plan{name: r.FileName, size: r.Size, clientMeta: r.Metadata, ticket: r.Ticket}
	if err := checkFileName(r.FileName); err != nil {
		return p, err
	}
	if err := r.Metadata.check("metadata"); err != nil {
		return p, err
	}
	if r.Size <= 0 {
		return p, errkind.Invalidf("invalid_size", "size must be a positive number of bytes")
	}
	if r.Size > s.cfg.MaxSize {
		return p, errkind.Invalidf("size_too_large", "size %d exceeds the maximum of %d bytes", r.Size, s.cfg.MaxSize).With("max_size", s.cfg.MaxSize)
	}
	ct, err := checkContentType(r.ContentType)
	if err != nil {
		return p, err
	}
	p.contentType = ct
	if t := r.Ticket; t != nil && t.UploadID == "" { // a spent ticket answers ticket_used first
		if err := t.checkSize(r.Size); err != nil {
			return p, err
		}
		if err := t.checkType(ct); err != nil {
			return p, err
		}
	}
	if r.SHA256 != "" {
		if p.sha256, err = checkSHA256(r.SHA256, "sha256"); err != nil {
			return p, err
		}
	}
	switch strings.ToUpper(r.Checksum) {
	case "":
	case s3store.ChecksumCRC32C:
		if s.cfg.Checksums {
			p.checksum = s3store.ChecksumCRC32C
		}
	default:
		return p, errkind.Invalidf("invalid_checksum_algorithm", "checksum_algorithm must be CRC32C or absent")
	}
	if r.FirstPartCRC32C != "" {
		if err := checkCRC32C(r.FirstPartCRC32C, "first_part_crc32c"); err != nil {
			return p, err
		}
		p.firstPartCRC32C = r.FirstPartCRC32C
	}
	if r.HeadCRC32C != "" {
		if err := checkCRC32C(r.HeadCRC32C, "head_crc32c"); err != nil {
			return p, err
		}
		p.headCRC32C = r.HeadCRC32C
	}
	if p.partSize, err = s.partSizeFor(r.Size, r.PartSize); err != nil {
		return p, err
	}
	p.partCount = int(ceilDiv(r.Size, p.partSize))
	return p, nil
}

// partSizeFor decides the part size of a file of size bytes: the client's
// choice when it gave one (0 if not), else the default part size raised to
// the next MiB that keeps the file within the store's part limit. Every
// part must fit the store's limits (Config.MaxParts, Config.MaxPartSize).
func (s *Service) partSizeFor(size, asked int64) (int64, error) {
	maxParts := int64(s.cfg.MaxParts)
	if asked != 0 {
		if asked < MinPartSize || asked > s.cfg.MaxPartSize {
			return 0, errkind.Invalidf("invalid_part_size", "part_size must be between %d and %d bytes", MinPartSize, s.cfg.MaxPartSize).
				With("max_part_size", s.cfg.MaxPartSize)
		}
		if n := ceilDiv(size, asked); n > maxParts {
			return 0, errkind.Invalidf("too_many_parts", "size %d in parts of %d makes %d parts; at most %d are allowed", size, asked, n, maxParts).
				With("max_parts", maxParts)
		}
		return asked, nil
	}
	ps := s.cfg.DefaultPartSize
	if ceilDiv(size, ps) > maxParts {
		ps = ceilDiv(ceilDiv(size, maxParts), 1<<20) << 20
	}
	if ps > s.cfg.MaxPartSize {
		return 0, errkind.Invalidf("size_too_large", "size %d needs more than %d parts of at most %d bytes", size, maxParts, s.cfg.MaxPartSize)
	}
	return ps, nil
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// checkFileName accepts a display name for a file: not a path, nothing a
// terminal or a Content-Disposition header could trip over, and nothing
// invisible that changes how the name reads. Format characters (Unicode
// category Cf: bidirectional overrides and isolates, zero-width spaces and
// joiners, the byte-order mark, tag characters) make "invoice\u202Efdp.exe"
// show as "invoiceexe.pdf" and let two different names look the same.
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
		if unicode.Is(unicode.Cf, r) {
			return bad("must not contain invisible format characters (bidirectional overrides, zero-width spaces or joiners, and the like)")
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

// checkCRC32C accepts the x-amz-checksum-crc32c form: base64 of 4 bytes.
func checkCRC32C(v, field string) error {
	if b, err := base64.StdEncoding.DecodeString(v); err != nil || len(b) != 4 {
		return errkind.Invalidf("invalid_"+field, "%s must be the base64 of a 4-byte CRC32C", field)
	}
	return nil
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
