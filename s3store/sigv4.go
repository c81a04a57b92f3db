package s3store

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// partSigner signs the PUT URLs of one multipart upload's parts with SigV4
// query signing (AWS's "signature in the query string"), starting from one
// URL the SDK presigned for the same upload: that URL fixes everything
// the SDK decides (endpoint, path style, escaping, credential scope, date,
// expiry, session token), and the signer only redoes what differs from
// part to part, the part number and the signed headers.
//
// It exists because the SDK's signer, called once per URL, builds an
// http.Request, re-parses and re-encodes the query and allocates the
// canonical request afresh each time: about 12 µs a URL, most of a
// 1,000-part presign call. This one writes each URL into one reused
// buffer and reuses one keyed HMAC and one SHA-256, about a tenth of
// that. PresignParts checks every batch's first URL against the SDK's
// byte for byte and uses the SDK alone when they differ.
type partSigner struct {
	base    string // the URL up to and including '?'
	path    string // the escaped path: S3 signs it as sent
	host    string
	pairs   []queryPair // the template's query, sorted, without the signature
	partAt  int         // index of partNumber in pairs
	headAt  int         // index of X-Amz-SignedHeaders in pairs
	stsHead []byte      // "AWS4-HMAC-SHA256\n<date>\n<scope>\n"
	// encodedHeaders are signedHeaderSets as the query carries them.
	encodedHeaders [len(signedHeaderSets)]string
	mac            hash.Hash // HMAC-SHA256 keyed with the scope's signing key
	sha            hash.Hash
	buf            []byte // the canonical request, then the URL
	sum            [sha256.Size]byte
	hexSum         [2 * sha256.Size]byte
}

// queryPair is one query parameter, key and value already URI-encoded as
// SigV4 wants them (which is how the SDK writes them into its URL).
type queryPair struct{ key, value string }

const (
	sigV4Algorithm = "AWS4-HMAC-SHA256"
	unsignedBody   = "UNSIGNED-PAYLOAD"
)

// newPartSigner prepares a signer from a URL the SDK presigned for an
// UploadPart and the secret key it was signed with. ok is false when the
// URL has a shape the signer does not know; the caller then uses the SDK.
func newPartSigner(presigned, secret string) (*partSigner, bool) {
	base, rawQuery, found := strings.Cut(presigned, "?")
	if !found {
		return nil, false
	}
	u, err := url.Parse(presigned)
	if err != nil || u.RawPath != "" && u.RawPath != u.EscapedPath() {
		return nil, false
	}
	p := &partSigner{base: base + "?", path: u.EscapedPath(), host: signedHost(u), partAt: -1, headAt: -1}
	var date, scope string
	for kv := range strings.SplitSeq(rawQuery, "&") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "X-Amz-Expires", "X-Amz-SignedHeaders", "X-Amz-Security-Token", "partNumber", "uploadId", "x-id":
		case "X-Amz-Signature":
			continue
		case "X-Amz-Algorithm":
			if v != sigV4Algorithm {
				return nil, false
			}
		case "X-Amz-Date":
			date = v
		case "X-Amz-Credential":
			cred, err := url.QueryUnescape(v)
			if err != nil {
				return nil, false
			}
			_, scope, _ = strings.Cut(cred, "/")
		default:
			// Anything else (a header the SDK moved into the query, say)
			// may differ from part to part: not for this signer.
			return nil, false
		}
		p.pairs = append(p.pairs, queryPair{k, v})
	}
	slices.SortFunc(p.pairs, func(a, b queryPair) int {
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		return strings.Compare(a.value, b.value)
	})
	for i, kv := range p.pairs {
		switch kv.key {
		case "partNumber":
			p.partAt = i
		case "X-Amz-SignedHeaders":
			p.headAt = i
		}
	}
	// The scope is date/region/service/aws4_request.
	parts := strings.Split(scope, "/")
	if p.partAt < 0 || p.headAt < 0 || len(date) != len("20060102T150405Z") || len(parts) != 4 || parts[0] != date[:8] || parts[3] != "aws4_request" {
		return nil, false
	}
	p.mac = hmac.New(sha256.New, signingKey(secret, parts[0], parts[1], parts[2]))
	p.sha = sha256.New()
	p.stsHead = []byte(sigV4Algorithm + "\n" + date + "\n" + scope + "\n")
	for i, h := range signedHeaderSets {
		p.encodedHeaders[i] = strings.ReplaceAll(h, ";", "%3B")
	}
	return p, true
}

// signedHost is the host as SigV4 signs it: without the scheme's default
// port, as HTTP clients send the Host header.
func signedHost(u *url.URL) string {
	if port := u.Port(); (u.Scheme == "http" && port == "80") || (u.Scheme == "https" && port == "443") {
		return u.Hostname()
	}
	return u.Host
}

// signedHeaderSets are the headers a part URL can sign, indexed by which
// of Size (1), ContentMD5 (2) and CRC32C (4) the part has, in the
// canonical order of their lowercase names.
var signedHeaderSets = [8]string{
	"host",
	"content-length;host",
	"content-md5;host",
	"content-length;content-md5;host",
	"host;x-amz-checksum-crc32c",
	"content-length;host;x-amz-checksum-crc32c",
	"content-md5;host;x-amz-checksum-crc32c",
	"content-length;content-md5;host;x-amz-checksum-crc32c",
}

// sign returns the presigned URL of part p.
func (s *partSigner) sign(p PartSpec) string {
	mask := 0
	if p.Size > 0 {
		mask |= 1
	}
	if p.ContentMD5 != "" {
		mask |= 2
	}
	if p.CRC32C != "" {
		mask |= 4
	}
	signedHeaders := signedHeaderSets[mask]

	b := append(s.buf[:0], "PUT\n"...)
	b = append(b, s.path...)
	b = append(b, '\n')
	queryStart := len(b)
	b = s.appendQuery(b, p.Number, s.encodedHeaders[mask])
	query := len(b) - queryStart
	b = append(b, '\n')
	if p.Size > 0 {
		b = append(b, "content-length:"...)
		b = strconv.AppendInt(b, p.Size, 10)
		b = append(b, '\n')
	}
	if p.ContentMD5 != "" {
		b = append(append(append(b, "content-md5:"...), strings.TrimSpace(p.ContentMD5)...), '\n')
	}
	b = append(append(append(b, "host:"...), s.host...), '\n')
	if p.CRC32C != "" {
		b = append(append(append(b, "x-amz-checksum-crc32c:"...), strings.TrimSpace(p.CRC32C)...), '\n')
	}
	b = append(b, '\n')
	b = append(b, signedHeaders...)
	b = append(b, '\n')
	b = append(b, unsignedBody...)

	s.sha.Reset()
	s.sha.Write(b)
	hex.Encode(s.hexSum[:], s.sha.Sum(s.sum[:0]))
	s.mac.Reset()
	s.mac.Write(s.stsHead)
	s.mac.Write(s.hexSum[:])
	sig := s.mac.Sum(s.sum[:0])

	// The URL: the template's base, the same canonical query, and the
	// signature last, as the SDK writes it.
	var out strings.Builder
	out.Grow(len(s.base) + query + len("&X-Amz-Signature=") + 2*len(sig))
	out.WriteString(s.base)
	out.Write(b[queryStart : queryStart+query])
	out.WriteString("&X-Amz-Signature=")
	hex.Encode(s.hexSum[:], sig)
	out.Write(s.hexSum[:])
	s.buf = b
	return out.String()
}

// appendQuery appends the canonical query of one part: the template's
// pairs with this part's number and signed headers.
func (s *partSigner) appendQuery(b []byte, part int32, signedHeaders string) []byte {
	for i, kv := range s.pairs {
		if i > 0 {
			b = append(b, '&')
		}
		b = append(append(b, kv.key...), '=')
		switch i {
		case s.partAt:
			b = strconv.AppendInt(b, int64(part), 10)
		case s.headAt:
			b = append(b, signedHeaders...)
		default:
			b = append(b, kv.value...)
		}
	}
	return b
}
