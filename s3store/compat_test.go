package s3store_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/crc64"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/s3store"
)

// The S3 features ferry uses or may use, probed one by one against the test
// S3 server, each both ways: the feature works when used right and refuses
// what it should. The results are compared with what docs/storage.md says
// of the implementation named by FERRY_TEST_S3_IMPL (versitygw-embedded for
// the embedded server), so a server that changes, or a table that is wrong,
// fails here. The features ferry falls back from when a store lacks them
// (checksum_crc32c, post_policy, cors, lifecycle, copy_object) are found by
// the production probe, s3store.Store.Probe, which ferry runs at start-up;
// the rows here are what it finds. The other rows are probed by the test.

// s3Impl names the implementation under test.
func s3Impl() string {
	if v := os.Getenv("FERRY_TEST_S3_IMPL"); v != "" {
		return v
	}
	if os.Getenv("FERRY_TEST_S3_ENDPOINT") == "" {
		return "versitygw-embedded"
	}
	return ""
}

// capabilities lists what each implementation supports, as measured here:
// VersityGW v1.8.0 embedded, and standalone VersityGW v1.8.0 and SeaweedFS
// 4.53 as .ci/s3servers builds and starts them. docs/storage.md states the
// same.
var capabilities = map[string]map[string]bool{
	"versitygw-embedded": versityGW,
	"versitygw":          versityGW,
	"seaweedfs": {
		string(s3store.CapChecksums):  false, // ListParts reports no part checksums
		string(s3store.CapPostPolicy): true,
		string(s3store.CapCORS):       true,
		string(s3store.CapLifecycle):  true, // stored and read back; enforcement not observed
		string(s3store.CapCopyObject): true,
		"content-md5-presigned-part":  true,
		"crc32c-presigned-part":       true,
		"crc64nvme-presigned-part":    true,
		"list-parts-checksums":        false,
		"part-overwrite":              false,
		"crc32c-full-object":          true,
		"crc64nvme-full-object":       true,
		"cors-other-origins-refused":  true,
		"list-parts-paging":           true,
		"list-multipart-uploads-page": true,
		"upload-part-copy":            true,
		"if-none-match-put":           true,
		"delete-objects":              true,
	},
}

// versityGW is VersityGW 1.8.0's table, embedded or standalone.
var versityGW = map[string]bool{
	string(s3store.CapChecksums):  true,
	string(s3store.CapPostPolicy): true,
	string(s3store.CapCORS):       true,
	string(s3store.CapLifecycle):  false, // NotImplemented
	string(s3store.CapCopyObject): true,
	"content-md5-presigned-part":  true,
	"crc32c-presigned-part":       true,
	"crc64nvme-presigned-part":    true,
	"list-parts-checksums":        true,
	"part-overwrite":              true,
	"crc32c-full-object":          true,
	"crc64nvme-full-object":       true,
	"cors-other-origins-refused":  true,
	"list-parts-paging":           true,
	// Refuses its own NextUploadIdMarker (s3store works around it).
	"list-multipart-uploads-page": false,
	"upload-part-copy":            true,
	"if-none-match-put":           true,
	"delete-objects":              true,
}

type probe struct {
	name string
	run  func(t *testing.T, p *prober) (bool, string)
}

var probes = []probe{
	{string(s3store.CapChecksums), byProbe(s3store.CapChecksums)},
	{string(s3store.CapPostPolicy), byProbe(s3store.CapPostPolicy)},
	{string(s3store.CapCORS), byProbe(s3store.CapCORS)},
	{string(s3store.CapLifecycle), byProbe(s3store.CapLifecycle)},
	{string(s3store.CapCopyObject), byProbe(s3store.CapCopyObject)},
	{"content-md5-presigned-part", probeContentMD5Part},
	{"crc32c-presigned-part", probePresignedChecksum(types.ChecksumAlgorithmCrc32c)},
	{"crc64nvme-presigned-part", probePresignedChecksum(types.ChecksumAlgorithmCrc64nvme)},
	{"list-parts-checksums", probeListedChecksums},
	{"crc32c-full-object", probeFullObject(types.ChecksumAlgorithmCrc32c)},
	{"crc64nvme-full-object", probeFullObject(types.ChecksumAlgorithmCrc64nvme)},
	{"cors-other-origins-refused", probeForeignOrigin},
	{"part-overwrite", probePartOverwrite},
	{"list-parts-paging", probeListPartsPaging},
	{"list-multipart-uploads-page", probeListUploadsPaging},
	{"upload-part-copy", probeUploadPartCopy},
	{"if-none-match-put", probeIfNoneMatch},
	{"delete-objects", probeDeleteObjects},
}

// appOrigin is the browser origin the probed bucket's CORS rule allows.
const appOrigin = "http://app.test"

// byProbe reads one capability from the production probe's findings.
func byProbe(k s3store.Capability) func(t *testing.T, p *prober) (bool, string) {
	return func(t *testing.T, p *prober) (bool, string) {
		caps := p.probed(t)
		for _, m := range caps.Missing {
			if m.Capability == k {
				return false, "Probe: " + m.Evidence
			}
		}
		return caps.Has(k), "Probe: supported"
	}
}

func TestS3Capabilities(t *testing.T) {
	impl := s3Impl()
	want, known := capabilities[impl]
	p := newProber(t)
	var table []string
	for _, pr := range probes {
		t.Run(pr.name, func(t *testing.T) {
			ok, evidence := pr.run(t, p)
			table = append(table, fmt.Sprintf("%-28s %-5v %s", pr.name, ok, evidence))
			if !known {
				return
			}
			if exp, listed := want[pr.name]; !listed {
				t.Errorf("%s: no expectation for %s; the server says %v (%s)", impl, pr.name, ok, evidence)
			} else if ok != exp {
				t.Errorf("%s: %s supported = %v, but the table says %v: %s", impl, pr.name, ok, exp, evidence)
			}
		})
	}
	t.Logf("S3 capabilities of %q at %s:\n%s", impl, p.srv.Endpoint, strings.Join(table, "\n"))
	if !known {
		t.Skipf("FERRY_TEST_S3_IMPL=%q has no expectations; the table above is what the server does", impl)
	}
}

// prober holds a raw SDK client, since s3store deliberately offers only
// what ferry uses and the probes also try what it does not use yet. Its
// bucket is bootstrapped as ferry's is, with the CORS rule for appOrigin
// and the lifecycle rule, where the store takes them.
type prober struct {
	srv     testenv.S3Server
	st      *s3store.Store
	api     *s3.Client
	presign *s3.PresignClient
	bucket  string

	once sync.Once
	caps s3store.Capabilities
}

// probed runs the production probe once.
func (p *prober) probed(t *testing.T) s3store.Capabilities {
	p.once.Do(func() {
		caps, err := p.st.Probe(context.Background(), s3store.ProbeOptions{Origin: appOrigin})
		if err != nil {
			t.Errorf("Probe: %v", err)
		}
		p.caps = caps
	})
	return p.caps
}

func newProber(t *testing.T) *prober {
	srv := testenv.S3(t)
	bucket := "t-caps" + testenv.RandomHex(4)
	st := testenv.StoreFor(t, srv, bucket)
	if _, err := st.Bootstrap(context.Background(), s3store.BootstrapOptions{CORSOrigins: []string{appOrigin}, AbortIncompleteAfterDays: 2}); err != nil {
		t.Fatal(err)
	}
	api := s3.New(s3.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey, ""),
		// Like s3store: a checksum is sent only when a probe sets one.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
		RetryMaxAttempts:           1,
	})
	return &prober{srv: srv, st: st, api: api, presign: s3.NewPresignClient(api), bucket: bucket}
}

func (p *prober) key(name string) *string {
	return aws.String("caps/" + name + "-" + testenv.RandomHex(3))
}

// errCode is an S3 error's code, or the error text when it is not one.
func errCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// sendPresigned sends body to a presigned request with the headers it was
// signed with, and returns the status and the S3 error code, if any.
func sendPresigned(t *testing.T, req *v4.PresignedHTTPRequest, body []byte) (int, string) {
	t.Helper()
	r, err := http.NewRequest(req.Method, req.URL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range req.SignedHeader {
		if !strings.EqualFold(k, "host") && len(vs) > 0 {
			r.Header.Set(k, vs[0])
		}
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, errorCodeOf(string(b))
}

// errorCodeOf pulls <Code> out of an S3 error document.
func errorCodeOf(body string) string {
	i := strings.Index(body, "<Code>")
	j := strings.Index(body, "</Code>")
	if i < 0 || j < i {
		return strings.TrimSpace(body)
	}
	return body[i+len("<Code>") : j]
}

var crc64nvme = crc64.MakeTable(0x9a6c9329ac4bc9b5)

// checksum is the base64 big-endian checksum S3 expects in x-amz-checksum-*.
func checksum(alg types.ChecksumAlgorithm, b []byte) string {
	switch alg {
	case types.ChecksumAlgorithmCrc32c:
		return base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))))
	case types.ChecksumAlgorithmCrc64nvme:
		return base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint64(nil, crc64.Checksum(b, crc64nvme)))
	}
	panic("checksum: " + alg)
}

func setChecksum(alg types.ChecksumAlgorithm, sum string, crc32c, crc64 **string) {
	if alg == types.ChecksumAlgorithmCrc32c {
		*crc32c = &sum
	} else {
		*crc64 = &sum
	}
}

func (p *prober) createUpload(t *testing.T, key *string, in s3.CreateMultipartUploadInput) string {
	t.Helper()
	in.Bucket, in.Key = &p.bucket, key
	out, err := p.api.CreateMultipartUpload(context.Background(), &in)
	if err != nil {
		t.Fatalf("CreateMultipartUpload: %v", err)
	}
	t.Cleanup(func() {
		p.api.AbortMultipartUpload(context.Background(), &s3.AbortMultipartUploadInput{Bucket: &p.bucket, Key: key, UploadId: out.UploadId})
	})
	return aws.ToString(out.UploadId)
}

// A part URL signed with the part's Content-MD5 refuses other bytes.
func probeContentMD5Part(t *testing.T, p *prober) (bool, string) {
	ctx := context.Background()
	key := p.key("md5")
	id := p.createUpload(t, key, s3.CreateMultipartUploadInput{})
	data := randomBytes(64 << 10)
	req, err := p.st.PresignPart(ctx, *key, id, s3store.PartSpec{Number: 1, ContentMD5: md5b64(data)}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	corrupt := append([]byte{}, data...)
	corrupt[0] ^= 1
	bad, badMsg := put(t, req, corrupt, nil)
	good, goodMsg := put(t, req, data, nil)
	return good == 200 && bad == 400, fmt.Sprintf("matching body %d %s; corrupt body %d %s", good, errorCodeOf(goodMsg), bad, errorCodeOf(badMsg))
}

// A part URL presigned with the part's x-amz-checksum-* value, on an upload
// created with that algorithm, takes the right bytes and refuses others.
func probePresignedChecksum(alg types.ChecksumAlgorithm) func(t *testing.T, p *prober) (bool, string) {
	return func(t *testing.T, p *prober) (bool, string) {
		ctx := context.Background()
		key := p.key(strings.ToLower(string(alg)))
		id := p.createUpload(t, key, s3.CreateMultipartUploadInput{ChecksumAlgorithm: alg})
		data := randomBytes(64 << 10)
		in := &s3.UploadPartInput{Bucket: &p.bucket, Key: key, UploadId: &id, PartNumber: aws.Int32(1), ChecksumAlgorithm: alg}
		setChecksum(alg, checksum(alg, data), &in.ChecksumCRC32C, &in.ChecksumCRC64NVME)
		signed, err := p.presign.PresignUploadPart(ctx, in, s3.WithPresignExpires(time.Minute))
		if err != nil {
			return false, "presign: " + err.Error()
		}
		var hdrs []string
		for k := range signed.SignedHeader {
			hdrs = append(hdrs, strings.ToLower(k))
		}
		sort.Strings(hdrs)
		corrupt := append([]byte{}, data...)
		corrupt[0] ^= 1
		bad, badCode := sendPresigned(t, signed, corrupt)
		good, goodCode := sendPresigned(t, signed, data)
		return good == 200 && bad == 400, fmt.Sprintf("signed headers %v; right body %d %s; corrupt body %d %s", hdrs, good, goodCode, bad, badCode)
	}
}

// ListParts reports each part's checksum, so the parts' checksums can be
// checked against what the client declared without reading the bytes.
func probeListedChecksums(t *testing.T, p *prober) (bool, string) {
	ctx := context.Background()
	alg := types.ChecksumAlgorithmCrc64nvme
	key := p.key("listed")
	id := p.createUpload(t, key, s3.CreateMultipartUploadInput{ChecksumAlgorithm: alg})
	data := randomBytes(1000)
	in := &s3.UploadPartInput{Bucket: &p.bucket, Key: key, UploadId: &id, PartNumber: aws.Int32(1),
		Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))), ChecksumAlgorithm: alg, ChecksumCRC64NVME: aws.String(checksum(alg, data))}
	up, err := p.api.UploadPart(ctx, in)
	if err != nil {
		return false, "UploadPart: " + errCode(err)
	}
	out, err := p.api.ListParts(ctx, &s3.ListPartsInput{Bucket: &p.bucket, Key: key, UploadId: &id})
	if err != nil || len(out.Parts) != 1 {
		return false, fmt.Sprintf("ListParts: %s", errCode(err))
	}
	got := aws.ToString(out.Parts[0].ChecksumCRC64NVME)
	return got == checksum(alg, data), fmt.Sprintf("UploadPart answered %q; ListParts %q; want %q",
		aws.ToString(up.ChecksumCRC64NVME), got, checksum(alg, data))
}

// A multipart upload created with a FULL_OBJECT checksum completes when
// given the whole object's checksum, refuses a wrong one, and HeadObject
// returns it.
func probeFullObject(alg types.ChecksumAlgorithm) func(t *testing.T, p *prober) (bool, string) {
	return func(t *testing.T, p *prober) (bool, string) {
		ctx := context.Background()
		parts := [][]byte{randomBytes(5 << 20), randomBytes(1000)}
		whole := bytes.Join(parts, nil)
		complete := func(full string) (*string, string, error) {
			key := p.key("full-" + strings.ToLower(string(alg)))
			id := p.createUpload(t, key, s3.CreateMultipartUploadInput{ChecksumAlgorithm: alg, ChecksumType: types.ChecksumTypeFullObject})
			var done []types.CompletedPart
			for i, b := range parts {
				in := &s3.UploadPartInput{Bucket: &p.bucket, Key: key, UploadId: &id, PartNumber: aws.Int32(int32(i + 1)),
					Body: bytes.NewReader(b), ContentLength: aws.Int64(int64(len(b))), ChecksumAlgorithm: alg}
				setChecksum(alg, checksum(alg, b), &in.ChecksumCRC32C, &in.ChecksumCRC64NVME)
				out, err := p.api.UploadPart(ctx, in)
				if err != nil {
					return key, "UploadPart", err
				}
				cp := types.CompletedPart{PartNumber: in.PartNumber, ETag: out.ETag, ChecksumCRC32C: out.ChecksumCRC32C, ChecksumCRC64NVME: out.ChecksumCRC64NVME}
				done = append(done, cp)
			}
			in := &s3.CompleteMultipartUploadInput{Bucket: &p.bucket, Key: key, UploadId: &id,
				MultipartUpload: &types.CompletedMultipartUpload{Parts: done}, ChecksumType: types.ChecksumTypeFullObject}
			setChecksum(alg, full, &in.ChecksumCRC32C, &in.ChecksumCRC64NVME)
			_, err := p.api.CompleteMultipartUpload(ctx, in)
			return key, "CompleteMultipartUpload", err
		}
		key, step, goodErr := complete(checksum(alg, whole))
		if goodErr != nil && step == "UploadPart" {
			return false, "UploadPart with a checksum: " + errCode(goodErr)
		}
		_, _, badErr := complete(checksum(alg, []byte("something else")))
		evidence := fmt.Sprintf("right checksum: %s; wrong checksum: %s", errCode(goodErr), errCode(badErr))
		echoed := ""
		if goodErr == nil {
			h, err := p.api.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &p.bucket, Key: key, ChecksumMode: types.ChecksumModeEnabled})
			if err == nil {
				echoed = aws.ToString(h.ChecksumCRC32C) + aws.ToString(h.ChecksumCRC64NVME)
				evidence += fmt.Sprintf("; HeadObject checksum %q type %q", echoed, h.ChecksumType)
			} else {
				evidence += "; HeadObject: " + errCode(err)
			}
		}
		return goodErr == nil && badErr != nil && echoed == checksum(alg, whole), evidence
	}
}

// A preflight from an origin the bucket's CORS rule does not name is not
// allowed. (That the named origin is allowed, with the ETag exposed, is
// the production probe's cors.)
func probeForeignOrigin(t *testing.T, p *prober) (bool, string) {
	foreign := preflight(t, p.srv.Endpoint, p.bucket, "http://evil.test").Get("Access-Control-Allow-Origin")
	return foreign != "http://evil.test" && foreign != "*", fmt.Sprintf("foreign origin -> Access-Control-Allow-Origin %q", foreign)
}

// Uploading a part number again replaces the part: ListParts shows it
// once, with the new ETag and size, and completing with that ETag gives
// the new bytes. Clients re-send a part whenever its first PUT failed
// midway, so this is what resumable uploads rest on.
func probePartOverwrite(t *testing.T, p *prober) (bool, string) {
	ctx := context.Background()
	key := p.key("overwrite")
	id := p.createUpload(t, key, s3.CreateMultipartUploadInput{})
	first, second := randomBytes(1000), randomBytes(2000)
	var etag *string
	for _, b := range [][]byte{first, second} {
		out, err := p.api.UploadPart(ctx, &s3.UploadPartInput{Bucket: &p.bucket, Key: key, UploadId: &id, PartNumber: aws.Int32(1),
			Body: bytes.NewReader(b), ContentLength: aws.Int64(int64(len(b)))})
		if err != nil {
			t.Fatal(err)
		}
		etag = out.ETag
	}
	out, err := p.api.ListParts(ctx, &s3.ListPartsInput{Bucket: &p.bucket, Key: key, UploadId: &id})
	if err != nil {
		return false, "ListParts: " + errCode(err)
	}
	var listed []string
	for _, pt := range out.Parts {
		listed = append(listed, fmt.Sprintf("%d:%d bytes", aws.ToInt32(pt.PartNumber), aws.ToInt64(pt.Size)))
	}
	_, err = p.api.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &p.bucket, Key: key, UploadId: &id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{PartNumber: aws.Int32(1), ETag: etag}}}})
	ev := fmt.Sprintf("ListParts after two PUTs of part 1 (1000 then 2000 bytes): %v; complete with the second ETag: %s", listed, errCode(err))
	if err != nil {
		return false, ev
	}
	same := p.readAll(t, *key, second)
	info, _ := p.st.Head(ctx, *key)
	ev += fmt.Sprintf("; object %d bytes, the second part's bytes: %v", info.Size, same)
	return len(out.Parts) == 1 && aws.ToInt64(out.Parts[0].Size) == 2000 && same, ev
}

// ListParts pages with MaxParts and PartNumberMarker.
func probeListPartsPaging(t *testing.T, p *prober) (bool, string) {
	ctx := context.Background()
	key := p.key("pages")
	id := p.createUpload(t, key, s3.CreateMultipartUploadInput{})
	for n := int32(1); n <= 3; n++ {
		if _, err := p.api.UploadPart(ctx, &s3.UploadPartInput{Bucket: &p.bucket, Key: key, UploadId: &id, PartNumber: aws.Int32(n),
			Body: strings.NewReader("x"), ContentLength: aws.Int64(1)}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := p.api.ListParts(ctx, &s3.ListPartsInput{Bucket: &p.bucket, Key: key, UploadId: &id, MaxParts: aws.Int32(2)})
	if err != nil {
		return false, "ListParts: " + errCode(err)
	}
	ev := fmt.Sprintf("page 1: %d parts, truncated %v, next marker %q", len(first.Parts), aws.ToBool(first.IsTruncated), aws.ToString(first.NextPartNumberMarker))
	if len(first.Parts) != 2 || !aws.ToBool(first.IsTruncated) || first.NextPartNumberMarker == nil {
		return false, ev
	}
	second, err := p.api.ListParts(ctx, &s3.ListPartsInput{Bucket: &p.bucket, Key: key, UploadId: &id, MaxParts: aws.Int32(2), PartNumberMarker: first.NextPartNumberMarker})
	if err != nil {
		return false, ev + "; page 2: " + errCode(err)
	}
	ev += fmt.Sprintf("; page 2: %d parts, truncated %v", len(second.Parts), aws.ToBool(second.IsTruncated))
	return len(second.Parts) == 1 && aws.ToInt32(second.Parts[0].PartNumber) == 3 && !aws.ToBool(second.IsTruncated), ev
}

// ListMultipartUploads pages with MaxUploads and both markers, exactly (no
// upload lost or repeated).
func probeListUploadsPaging(t *testing.T, p *prober) (bool, string) {
	ctx := context.Background()
	prefix := "caps/mpu-" + testenv.RandomHex(3) + "/"
	for i := range 3 {
		p.createUpload(t, aws.String(fmt.Sprintf("%s%d", prefix, i)), s3.CreateMultipartUploadInput{})
	}
	in := &s3.ListMultipartUploadsInput{Bucket: &p.bucket, Prefix: &prefix, MaxUploads: aws.Int32(2)}
	var keys []string
	var ev []string
	for page := 1; page <= 4; page++ {
		out, err := p.api.ListMultipartUploads(ctx, in)
		if err != nil {
			ev = append(ev, fmt.Sprintf("page %d: %s", page, errCode(err)))
			break
		}
		for _, u := range out.Uploads {
			keys = append(keys, strings.TrimPrefix(aws.ToString(u.Key), prefix))
		}
		ev = append(ev, fmt.Sprintf("page %d: %d uploads, truncated %v", page, len(out.Uploads), aws.ToBool(out.IsTruncated)))
		if !aws.ToBool(out.IsTruncated) {
			break
		}
		in.KeyMarker, in.UploadIdMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
	got := strings.Join(keys, ",")
	return got == "0,1,2", strings.Join(ev, "; ") + "; keys " + got
}

// UploadPartCopy fills a part from a range of an existing object.
func probeUploadPartCopy(t *testing.T, p *prober) (bool, string) {
	ctx := context.Background()
	src, dst := p.key("pc-src"), p.key("pc-dst")
	data := randomBytes(6 << 20)
	if err := p.st.Put(ctx, *src, bytes.NewReader(data), int64(len(data)), ""); err != nil {
		t.Fatal(err)
	}
	id := p.createUpload(t, dst, s3.CreateMultipartUploadInput{})
	out, err := p.api.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: &p.bucket, Key: dst, UploadId: &id, PartNumber: aws.Int32(1),
		CopySource: aws.String(p.bucket + "/" + *src), CopySourceRange: aws.String(fmt.Sprintf("bytes=0-%d", 5<<20-1))})
	if err != nil {
		return false, "UploadPartCopy: " + errCode(err)
	}
	tail := randomBytes(10)
	up, err := p.api.UploadPart(ctx, &s3.UploadPartInput{Bucket: &p.bucket, Key: dst, UploadId: &id, PartNumber: aws.Int32(2),
		Body: bytes.NewReader(tail), ContentLength: aws.Int64(10)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.api.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &p.bucket, Key: dst, UploadId: &id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{
			{PartNumber: aws.Int32(1), ETag: out.CopyPartResult.ETag}, {PartNumber: aws.Int32(2), ETag: up.ETag}}}})
	if err != nil {
		return false, "copied part; CompleteMultipartUpload: " + errCode(err)
	}
	same := p.readAll(t, *dst, append(append([]byte{}, data[:5<<20]...), tail...))
	return same, fmt.Sprintf("completed; bytes identical: %v", same)
}

// PutObject with If-None-Match: * creates an object once and refuses to
// overwrite it.
func probeIfNoneMatch(t *testing.T, p *prober) (bool, string) {
	ctx := context.Background()
	key := p.key("inm")
	putOnce := func(body string) error {
		_, err := p.api.PutObject(ctx, &s3.PutObjectInput{Bucket: &p.bucket, Key: key, Body: strings.NewReader(body),
			ContentLength: aws.Int64(int64(len(body))), IfNoneMatch: aws.String("*")})
		return err
	}
	first, second := putOnce("first"), putOnce("second")
	kept := p.readAll(t, *key, []byte("first"))
	return first == nil && second != nil && kept, fmt.Sprintf("first put: %s; second put: %s; first kept: %v", errCode(first), errCode(second), kept)
}

// DeleteObjects, quiet and with the checksum the SDK sends (as
// DeletePrefix calls it), deletes the keys it names, takes a missing one
// without an error, and leaves the others.
func probeDeleteObjects(t *testing.T, p *prober) (bool, string) {
	ctx := context.Background()
	gone, kept := []*string{p.key("del-a"), p.key("del-b")}, p.key("del-kept")
	for _, k := range append(gone, kept) {
		if _, err := p.api.PutObject(ctx, &s3.PutObjectInput{Bucket: &p.bucket, Key: k, Body: strings.NewReader("x"), ContentLength: aws.Int64(1)}); err != nil {
			t.Fatal(err)
		}
	}
	ids := []types.ObjectIdentifier{{Key: gone[0]}, {Key: gone[1]}, {Key: p.key("del-missing")}}
	out, err := p.api.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &p.bucket, Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)}})
	if err != nil {
		return false, "DeleteObjects: " + errCode(err)
	}
	var failed []string
	for _, e := range out.Errors {
		failed = append(failed, aws.ToString(e.Key)+": "+aws.ToString(e.Code))
	}
	deleted := !p.readAll(t, *gone[0], []byte("x")) && !p.readAll(t, *gone[1], []byte("x"))
	left := p.readAll(t, *kept, []byte("x"))
	return len(failed) == 0 && deleted && left, fmt.Sprintf("errors listed: %v; named keys deleted: %v; other key kept: %v", failed, deleted, left)
}

func (p *prober) readAll(t *testing.T, key string, want []byte) bool {
	rc, err := p.st.Get(context.Background(), key)
	if err != nil {
		return false
	}
	defer rc.Close()
	got, _ := io.ReadAll(rc)
	return bytes.Equal(got, want)
}
