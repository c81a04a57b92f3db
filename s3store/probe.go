package s3store

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/ferry-io/ferry/internal/random"
)

// Capability names an S3 feature ferry uses where the store has it and
// does without where it has not.
type Capability string

// The capabilities Probe looks for.
const (
	// CapChecksums: the store refuses a part whose x-amz-checksum-crc32c
	// does not match its bytes, lists parts with their CRC32C, and refuses
	// to complete a FULL_OBJECT CRC32C upload whose full-object checksum
	// does not match.
	CapChecksums Capability = "checksum_crc32c"
	// CapPostPolicy: the store takes a browser form POST signed with a
	// POST policy, and enforces the policy's key and size range.
	CapPostPolicy Capability = "post_policy"
	// CapCORS: a browser on the probed origin may PUT to the bucket (the
	// preflight is allowed) and read the ETag of the answer.
	CapCORS Capability = "cors"
	// CapLifecycle: the bucket has an enabled lifecycle rule that aborts
	// incomplete multipart uploads under ferry's keys.
	CapLifecycle Capability = "lifecycle"
	// CapCopyObject: the store copies an object server-side.
	CapCopyObject Capability = "copy_object"
)

// Capabilities are what a store was found to support, by trying it.
type Capabilities struct {
	ChecksumCRC32C bool
	PostPolicy     bool
	CORS           bool
	Lifecycle      bool
	CopyObject     bool
	// Missing says, for each capability found missing, what the store
	// did, in the order of the fields above.
	Missing []Missing
}

// Missing is a capability a store lacks, with what it did when tried.
type Missing struct {
	Capability Capability
	Evidence   string
}

// Has reports whether the store has capability k.
func (c Capabilities) Has(k Capability) bool {
	switch k {
	case CapChecksums:
		return c.ChecksumCRC32C
	case CapPostPolicy:
		return c.PostPolicy
	case CapCORS:
		return c.CORS
	case CapLifecycle:
		return c.Lifecycle
	case CapCopyObject:
		return c.CopyObject
	}
	return false
}

// ProbeOptions say what to probe with.
type ProbeOptions struct {
	// Origin is a browser origin the bucket's CORS rule should allow
	// (ferry's public URL's). Without one CORS is reported missing.
	Origin string
}

// CRC32C returns the base64 of the big-endian CRC32C (Castagnoli) of b, the
// form S3's x-amz-checksum-crc32c takes.
func CRC32C(b []byte) string { return EncodeCRC32C(crc32.Checksum(b, castagnoli)) }

// EncodeCRC32C is the x-amz-checksum-crc32c form of a CRC32C value.
func EncodeCRC32C(v uint32) string {
	var out [4]byte
	binary.BigEndian.PutUint32(out[:], v)
	return base64.StdEncoding.EncodeToString(out[:])
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// probeResult is one capability's finding.
type probeResult struct {
	ok       bool
	evidence string
	err      error
}

// ScratchPrefix begins the keys of the objects a probe (or `ferry doctor`)
// writes and removes again. They sit at the bucket's root, side by side
// (probe-<random>-crc, …), not in a folder of their own: a store on a
// file system (VersityGW's posix backend) removes a folder once a delete
// empties it, and a PUT landing in that folder at the same moment (the
// next probe of the same run, or another replica's) then fails, which
// would read as a missing capability.
const ScratchPrefix = "probe-"

// Probe finds out what the store supports by trying each capability the
// way ferry uses it, under scratch keys (ScratchPrefix…) that it removes
// again; the probes run at once, so a slow store costs the slowest probe,
// not their sum. Lifecycle is only read, never written. A store that
// refuses a feature, or takes it and stores wrong bytes or ignores a
// condition, is reported as lacking it, not as an error; an error means
// the probe could not run (the store is unreachable, or refuses ferry's
// credentials or bucket).
func (s *Store) Probe(ctx context.Context, o ProbeOptions) (Capabilities, error) {
	base := ScratchPrefix + random.Hex(8) + "-"
	probes := []struct {
		cap Capability
		run func() (bool, string, error)
	}{
		{CapChecksums, func() (bool, string, error) { return s.probeChecksums(ctx, base+"crc") }},
		{CapPostPolicy, func() (bool, string, error) { return s.probePost(ctx, base+"post") }},
		{CapCORS, func() (bool, string, error) { return s.probeCORS(ctx, base+"cors", o.Origin) }},
		{CapLifecycle, func() (bool, string, error) { return s.probeLifecycle(ctx) }},
		{CapCopyObject, func() (bool, string, error) { return s.probeCopy(ctx, base+"copy") }},
	}
	results := make([]probeResult, len(probes))
	var wg sync.WaitGroup
	for i, p := range probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = retryProbe(ctx, p.run)
		}()
	}
	wg.Wait()
	var c Capabilities
	for i, p := range probes {
		r := results[i]
		if r.err != nil {
			return Capabilities{}, fmt.Errorf("s3store: probe %s: %w", p.cap, r.err)
		}
		switch p.cap {
		case CapChecksums:
			c.ChecksumCRC32C = r.ok
		case CapPostPolicy:
			c.PostPolicy = r.ok
		case CapCORS:
			c.CORS = r.ok
		case CapLifecycle:
			c.Lifecycle = r.ok
		case CapCopyObject:
			c.CopyObject = r.ok
		}
		if !r.ok {
			c.Missing = append(c.Missing, Missing{Capability: p.cap, Evidence: r.evidence})
		}
	}
	return c, nil
}

// probeAttempts bounds the tries of one probe: with the waits between
// them (0.25, 0.5, 1 s) a store that stays down costs under two seconds
// more than one try, on top of its calls' own timeouts.
const probeAttempts = 4

// retryProbe runs one probe until it answers, probeAttempts tries are
// spent or ctx ends. A store that times out or answers 5xx
// (ErrUnavailable) is often just busy: replicas that start together probe
// one store at once, and a replica that gave up at the first slow answer
// would run with every fallback while its peers grant checksums, so an
// upload started on one could not be completed on another. Refused
// credentials or a missing bucket do not heal by waiting.
func retryProbe(ctx context.Context, run func() (bool, string, error)) probeResult {
	wait := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		ok, ev, err := run()
		if err == nil || !errors.Is(err, ErrUnavailable) || attempt == probeAttempts {
			return probeResult{ok, ev, err}
		}
		select {
		case <-ctx.Done():
			return probeResult{ok, ev, err}
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// fatal reports an error that stops the probe: the store is down, or
// refuses ferry's credentials or bucket, so nothing it answers says what
// it supports.
func fatal(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrAccessDenied) || errors.Is(err, ErrNoSuchBucket)
}

func (s *Store) probeChecksums(ctx context.Context, key string) (bool, string, error) {
	id, err := s.CreateMultipart(ctx, key, MultipartOptions{Checksum: ChecksumCRC32C})
	if err != nil {
		if fatal(err) {
			return false, "", err
		}
		return false, answered("CreateMultipartUpload with a FULL_OBJECT CRC32C checksum", err), nil
	}
	completed := false
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
		defer cancel()
		if completed {
			s.Delete(dctx, key)
		} else {
			s.AbortMultipart(dctx, key, id)
		}
	}()
	body := []byte("ferry checksum probe")
	upload := func(sum string) (string, error) {
		cctx, cancel := s.short(ctx)
		defer cancel()
		out, err := s.api.UploadPart(cctx, &s3.UploadPartInput{
			Bucket: &s.bucket, Key: &key, UploadId: &id, PartNumber: aws.Int32(1),
			Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body))), ChecksumCRC32C: &sum,
		})
		if err != nil {
			return "", translate("UploadPart", err)
		}
		return aws.ToString(out.ETag), nil
	}
	if _, err := upload(CRC32C([]byte("other bytes"))); !errors.Is(err, ErrBadDigest) {
		if err != nil {
			if errors.Is(err, ErrUnavailable) {
				return false, "", err
			}
			return false, "a part with a wrong CRC32C failed with " + err.Error() + " instead of BadDigest", nil
		}
		return false, "the store accepted a part whose CRC32C does not match its bytes", nil
	}
	etag, err := upload(CRC32C(body))
	if err != nil {
		if errors.Is(err, ErrUnavailable) {
			return false, "", err
		}
		return false, "a part with the right CRC32C failed: " + err.Error(), nil
	}
	parts, err := s.ListParts(ctx, key, id)
	if err != nil {
		return false, "", err
	}
	if len(parts) != 1 || parts[0].CRC32C != CRC32C(body) {
		listed := make([]string, len(parts))
		for i, p := range parts {
			listed[i] = fmt.Sprintf("part %d CRC32C %q", p.Number, p.CRC32C)
		}
		return false, fmt.Sprintf("ListParts does not report the CRC32C a part was uploaded with (listed: %s)", strings.Join(listed, ", ")), nil
	}
	cp := []CompletedPart{{Number: 1, ETag: etag, CRC32C: parts[0].CRC32C}}
	_, err = s.CompleteMultipart(ctx, key, id, cp, CRC32C([]byte("not the object")))
	if err == nil {
		completed = true
		return false, "the store completed an upload whose full-object CRC32C does not match", nil
	}
	if errors.Is(err, ErrUnavailable) {
		return false, "", err
	}
	if !errors.Is(err, ErrBadDigest) {
		return false, "a wrong full-object CRC32C failed with " + err.Error() + " instead of BadDigest", nil
	}
	return true, "", nil
}

// probePost sends a browser form signed with a POST policy, to the
// internal endpoint (a policy's signature does not cover the host). The
// form must store its file, and the policy must hold: the same form
// naming another key, or with a file over its size range, is refused.
// A store that takes forms but ignores their policy would let a form
// ferry hands out write any key, so it counts as lacking POST policies.
func (s *Store) probePost(ctx context.Context, key string) (bool, string, error) {
	const maxSize = 64
	pol, err := s.PresignPost(ctx, key, PostOptions{MinSize: 1, MaxSize: maxSize}, time.Minute)
	if err != nil {
		return false, "", err
	}
	bucketURL, err := s.internalURL(ctx, "")
	if err != nil {
		return false, "", err
	}
	other := key + "-other"
	defer s.deleteQuietly(ctx, key, other)
	elsewhere := make(map[string]string, len(pol.Fields))
	for k, v := range pol.Fields {
		elsewhere[k] = v
	}
	elsewhere["key"] = other
	body := []byte("ferry post policy probe")
	code, msg, err := s.postForm(ctx, bucketURL, elsewhere, body)
	if err != nil {
		return false, "", err
	}
	if code < 300 {
		return false, "a form signed for one key wrote another: the store does not enforce POST policies", nil
	}
	code, msg2, err := s.postForm(ctx, bucketURL, pol.Fields, bytes.Repeat([]byte("x"), maxSize+1))
	if err != nil {
		return false, "", err
	}
	if code < 300 {
		return false, "the store took a file larger than its policy's content-length-range", nil
	}
	code, msg3, err := s.postForm(ctx, bucketURL, pol.Fields, body)
	if err != nil {
		return false, "", err
	}
	if code >= 300 {
		return false, fmt.Sprintf("a browser form POST answered %d %s (another key: %s; too large: %s)", code, msg3, msg, msg2), nil
	}
	same, err := s.holds(ctx, key, body)
	if err != nil {
		return false, "", err
	}
	if !same {
		return false, "the form was accepted but the object does not hold its file", nil
	}
	return true, "", nil
}

// probeCORS does what a browser on origin does to send a part: a preflight
// for a PUT with Content-MD5, then the PUT, whose ETag it must be allowed
// to read. It asks the internal endpoint: the rule is the bucket's, and the
// public endpoint may not be reachable from ferry.
func (s *Store) probeCORS(ctx context.Context, key, origin string) (bool, string, error) {
	if origin == "" {
		return false, "no browser origin to try", nil
	}
	body := []byte("ferry cors probe")
	sum := md5.Sum(body)
	md5sum := base64.StdEncoding.EncodeToString(sum[:])
	put, err := s.presignInternalPut(ctx, key, md5sum)
	if err != nil {
		return false, "", err
	}
	defer s.deleteQuietly(ctx, key)
	pre, err := http.NewRequestWithContext(ctx, http.MethodOptions, put.URL, nil)
	if err != nil {
		return false, "", err
	}
	pre.Header.Set("Origin", origin)
	pre.Header.Set("Access-Control-Request-Method", http.MethodPut)
	pre.Header.Set("Access-Control-Request-Headers", "content-md5")
	resp, _, err := s.send(pre)
	if err != nil {
		return false, "", err
	}
	if allow := resp.Header.Get("Access-Control-Allow-Origin"); resp.StatusCode >= 300 || (allow != origin && allow != "*") {
		return false, fmt.Sprintf("a preflight for a PUT from %s answered %d with Access-Control-Allow-Origin %q", origin, resp.StatusCode, allow), nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, put.URL, bytes.NewReader(body))
	if err != nil {
		return false, "", err
	}
	for k, v := range put.SignedHeader {
		if !strings.EqualFold(k, "host") && len(v) > 0 {
			req.Header.Set(k, v[0])
		}
	}
	req.Header.Set("Origin", origin)
	resp, msg, err := s.send(req)
	if err != nil {
		return false, "", err
	}
	allow, expose := resp.Header.Get("Access-Control-Allow-Origin"), resp.Header.Values("Access-Control-Expose-Headers")
	switch {
	case resp.StatusCode >= 300:
		return false, fmt.Sprintf("the PUT after an allowed preflight answered %d %s", resp.StatusCode, msg), nil
	case allow != origin && allow != "*":
		return false, fmt.Sprintf("the PUT from %s answered Access-Control-Allow-Origin %q", origin, allow), nil
	case !exposes(expose, "etag"):
		return false, fmt.Sprintf("the PUT's answer does not expose its ETag to the browser (Access-Control-Expose-Headers %q)", strings.Join(expose, ", ")), nil
	}
	return true, "", nil
}

func exposes(values []string, header string) bool {
	for _, v := range values {
		for _, h := range strings.Split(v, ",") {
			if h = strings.TrimSpace(h); h == "*" || strings.EqualFold(h, header) {
				return true
			}
		}
	}
	return false
}

// probeLifecycle reads the bucket's lifecycle configuration and looks for
// an enabled rule that aborts incomplete multipart uploads under ferry's
// upload keys, whoever set it (Bootstrap, or the operator).
func (s *Store) probeLifecycle(ctx context.Context) (bool, string, error) {
	cctx, cancel := s.short(ctx)
	defer cancel()
	out, err := s.api.GetBucketLifecycleConfiguration(cctx, &s3.GetBucketLifecycleConfigurationInput{Bucket: &s.bucket})
	if err != nil {
		var apiErr smithy.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode() == "NoSuchLifecycleConfiguration" {
			return false, "the bucket has no lifecycle configuration", nil
		}
		terr := translate("GetBucketLifecycleConfiguration", err)
		if errors.Is(terr, ErrUnavailable) || errors.Is(terr, ErrNoSuchBucket) {
			return false, "", terr
		}
		// NotImplemented, or AccessDenied for a key without
		// s3:GetLifecycleConfiguration: either way ferry cannot rely on it.
		return false, answered("GetBucketLifecycleConfiguration", err), nil
	}
	for _, r := range out.Rules {
		if r.Status != "Enabled" || r.AbortIncompleteMultipartUpload == nil || aws.ToInt32(r.AbortIncompleteMultipartUpload.DaysAfterInitiation) <= 0 {
			continue
		}
		//lint:ignore SA1019 the older form some stores still return
		prefix := aws.ToString(r.Prefix)
		if r.Filter != nil {
			if r.Filter.Tag != nil || r.Filter.And != nil || r.Filter.ObjectSizeGreaterThan != nil || r.Filter.ObjectSizeLessThan != nil {
				continue // narrower than every upload
			}
			prefix = aws.ToString(r.Filter.Prefix)
		}
		if strings.HasPrefix("uploads/", prefix) {
			return true, "", nil
		}
	}
	return false, fmt.Sprintf("none of the bucket's %d lifecycle rules aborts incomplete multipart uploads under uploads/", len(out.Rules)), nil
}

// probeCopy copies a small object with CopyObject and reads the copy back.
func (s *Store) probeCopy(ctx context.Context, key string) (bool, string, error) {
	src, dst := key+"-src", key+"-dst"
	body := []byte("ferry copy probe")
	defer s.deleteQuietly(ctx, src, dst)
	if err := s.Put(ctx, src, bytes.NewReader(body), int64(len(body)), "application/octet-stream"); err != nil {
		return false, "", err
	}
	if _, err := s.Copy(ctx, src, dst); err != nil {
		if fatal(err) {
			return false, "", err
		}
		return false, answered("CopyObject", err), nil
	}
	same, err := s.holds(ctx, dst, body)
	if err != nil {
		return false, "", err
	}
	if !same {
		return false, "CopyObject answered success but the copy holds other bytes", nil
	}
	return true, "", nil
}

// answered says briefly what the store answered to op: its status and S3
// error code, or the error.
func answered(op string, err error) string {
	var re *smithyhttp.ResponseError
	var apiErr smithy.APIError
	if errors.As(err, &re) && errors.As(err, &apiErr) {
		return fmt.Sprintf("%s answered %d %s", op, re.HTTPStatusCode(), apiErr.ErrorCode())
	}
	return fmt.Sprintf("%s failed: %v", op, err)
}

// holds reports whether key holds exactly want.
func (s *Store) holds(ctx context.Context, key string, want []byte) (bool, error) {
	rc, err := s.Get(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer rc.Close()
	got, err := io.ReadAll(io.LimitReader(rc, int64(len(want))+1))
	if err != nil {
		return false, err
	}
	return bytes.Equal(got, want), nil
}

func (s *Store) deleteQuietly(ctx context.Context, keys ...string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	for _, k := range keys {
		s.Delete(dctx, k)
	}
}

// internalURL is the URL of key in the bucket on the internal endpoint
// (of the bucket itself for an empty key), addressed as the SDK addresses
// it (path style or virtual host).
func (s *Store) internalURL(ctx context.Context, key string) (string, error) {
	req, err := s.presignInternal.PresignHeadBucket(ctx, &s3.HeadBucketInput{Bucket: &s.bucket})
	if err != nil {
		return "", translate("PresignHeadBucket", err)
	}
	u, err := url.Parse(req.URL)
	if err != nil {
		return "", fmt.Errorf("s3store: presigned URL: %w", err)
	}
	u.RawQuery = ""
	if key != "" {
		u = u.JoinPath(key)
	}
	return u.String(), nil
}

// presignInternalPut signs a PUT of key with its Content-MD5 against the
// internal endpoint.
func (s *Store) presignInternalPut(ctx context.Context, key, contentMD5 string) (*v4.PresignedHTTPRequest, error) {
	req, err := s.presignInternal.PresignPutObject(ctx, &s3.PutObjectInput{Bucket: &s.bucket, Key: &key, ContentMD5: &contentMD5},
		s3.WithPresignExpires(time.Minute))
	if err != nil {
		return nil, translate("PresignPutObject", err)
	}
	return req, nil
}

// EncodeForm encodes what a browser sends for a POST-policy upload: a
// multipart/form-data body with the fields first, in any order, and file
// last, in a field named "file". It returns the body and its Content-Type.
func EncodeForm(fields map[string]string, file []byte) (*bytes.Buffer, string) {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for k, v := range fields {
		w.WriteField(k, v)
	}
	fw, _ := w.CreateFormFile("file", "upload.bin")
	fw.Write(file)
	w.Close()
	return &buf, w.FormDataContentType()
}

// postForm sends a browser-style form POST (EncodeForm). It returns the
// status and the S3 error code of the answer, if any.
func (s *Store) postForm(ctx context.Context, target string, fields map[string]string, file []byte) (int, string, error) {
	body, ct := EncodeForm(fields, file)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, body)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", ct)
	resp, msg, err := s.send(req)
	if err != nil {
		return 0, "", err
	}
	return resp.StatusCode, msg, nil
}

// send sends a raw request within the short bound and reads the answer:
// it returns the response (its body consumed) and the S3 error code in
// it, if any. A request that does not get an answer is an outage.
func (s *Store) send(req *http.Request) (*http.Response, string, error) {
	ctx, cancel := s.short(req.Context())
	defer cancel()
	resp, err := s.http.Do(req.WithContext(ctx))
	if err != nil {
		return nil, "", fmt.Errorf("s3 %s: %w (%w)", req.Method, ErrUnavailable, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	code := ""
	if i, j := bytes.Index(b, []byte("<Code>")), bytes.Index(b, []byte("</Code>")); i >= 0 && j > i {
		code = string(b[i+len("<Code>") : j])
	}
	if resp.StatusCode >= 500 && resp.StatusCode != http.StatusNotImplemented {
		return nil, "", fmt.Errorf("s3 %s: %w (%d %s)", req.Method, ErrUnavailable, resp.StatusCode, code)
	}
	return resp, code, nil
}
