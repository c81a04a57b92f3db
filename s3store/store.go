package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	"github.com/prometheus/client_golang/prometheus"
)

// API is the part of the S3 client that Store calls. Declaring it keeps the
// dependency honest and lets a logging or metrics wrapper sit in between.
type API interface {
	HeadBucket(context.Context, *s3.HeadBucketInput, ...func(*s3.Options)) (*s3.HeadBucketOutput, error)
	CreateBucket(context.Context, *s3.CreateBucketInput, ...func(*s3.Options)) (*s3.CreateBucketOutput, error)
	PutBucketCors(context.Context, *s3.PutBucketCorsInput, ...func(*s3.Options)) (*s3.PutBucketCorsOutput, error)
	PutBucketLifecycleConfiguration(context.Context, *s3.PutBucketLifecycleConfigurationInput, ...func(*s3.Options)) (*s3.PutBucketLifecycleConfigurationOutput, error)
	GetBucketLifecycleConfiguration(context.Context, *s3.GetBucketLifecycleConfigurationInput, ...func(*s3.Options)) (*s3.GetBucketLifecycleConfigurationOutput, error)
	CreateMultipartUpload(context.Context, *s3.CreateMultipartUploadInput, ...func(*s3.Options)) (*s3.CreateMultipartUploadOutput, error)
	UploadPart(context.Context, *s3.UploadPartInput, ...func(*s3.Options)) (*s3.UploadPartOutput, error)
	ListParts(context.Context, *s3.ListPartsInput, ...func(*s3.Options)) (*s3.ListPartsOutput, error)
	ListMultipartUploads(context.Context, *s3.ListMultipartUploadsInput, ...func(*s3.Options)) (*s3.ListMultipartUploadsOutput, error)
	CompleteMultipartUpload(context.Context, *s3.CompleteMultipartUploadInput, ...func(*s3.Options)) (*s3.CompleteMultipartUploadOutput, error)
	AbortMultipartUpload(context.Context, *s3.AbortMultipartUploadInput, ...func(*s3.Options)) (*s3.AbortMultipartUploadOutput, error)
	HeadObject(context.Context, *s3.HeadObjectInput, ...func(*s3.Options)) (*s3.HeadObjectOutput, error)
	GetObject(context.Context, *s3.GetObjectInput, ...func(*s3.Options)) (*s3.GetObjectOutput, error)
	PutObject(context.Context, *s3.PutObjectInput, ...func(*s3.Options)) (*s3.PutObjectOutput, error)
	DeleteObject(context.Context, *s3.DeleteObjectInput, ...func(*s3.Options)) (*s3.DeleteObjectOutput, error)
	DeleteObjects(context.Context, *s3.DeleteObjectsInput, ...func(*s3.Options)) (*s3.DeleteObjectsOutput, error)
	ListObjectsV2(context.Context, *s3.ListObjectsV2Input, ...func(*s3.Options)) (*s3.ListObjectsV2Output, error)
	CopyObject(context.Context, *s3.CopyObjectInput, ...func(*s3.Options)) (*s3.CopyObjectOutput, error)
}

// Config is what a Store needs to reach its bucket.
type Config struct {
	Endpoint       string // internal endpoint; empty means AWS's default for Region
	PublicEndpoint string // endpoint browsers use; presigned URLs are signed for it
	Region         string
	Bucket         string
	AccessKey      string // empty uses the SDK's default credential chain
	SecretKey      string
	PathStyle      bool
	// Timeout bounds each call that answers at once (default 30s).
	Timeout time.Duration
	// FirstByteTimeout bounds how long a GET may wait for the start of its
	// answer (default 15s), and IdleTimeout how long a body read may wait
	// for the next byte (default 30s).
	FirstByteTimeout, IdleTimeout time.Duration
	// TransferTimeout bounds one part or object PUT (default 5m).
	TransferTimeout time.Duration
	// API, when set, carries every S3 call instead of the client New
	// builds (a wrapper that injects faults or counts calls, say).
	// Presigned URLs are still signed for the endpoints and credentials
	// above.
	API API
	// Registerer, when set, gets ferry_s3_request_duration_seconds, the
	// time of each request sent to S3 (metrics.go). A Config.API's calls
	// are not timed: they do not go through the client New builds.
	Registerer prometheus.Registerer
}

// Store is the S3 adapter. It is safe for concurrent use.
type Store struct {
	api     API
	presign *s3.PresignClient
	bucket  string
	timeout time.Duration

	firstByte, idle, transferTimeout time.Duration

	// For PresignParts and PresignPost, which sign with SigV4 themselves.
	creds  aws.CredentialsProvider
	region string

	// For PresignPost, which builds the browser form's URL itself.
	publicEndpoint string
	pathStyle      bool

	// For Probe, which sends what browsers send (form POSTs, CORS
	// preflights) to the internal endpoint, over the SDK's own transport.
	http            aws.HTTPClient
	presignInternal *s3.PresignClient

	// direct: ObjectReader's GETs go over connections of its own
	// (splice.go), dialed like the SDK's.
	direct bool

	// conns dials every connection to S3, the SDK's and the direct
	// GETs', and holds the open ones for Close.
	conns *conns

	// oneByOne: the store refused a DeleteObjects call, so DeletePrefix
	// deletes one object per call from then on.
	oneByOne atomic.Bool

	metrics *requestMetrics // nil without Config.Registerer
}

// New builds a Store. It does not contact S3; call Bootstrap or Ready for
// that.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("s3store: bucket is required")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.FirstByteTimeout == 0 {
		cfg.FirstByteTimeout = 15 * time.Second
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 30 * time.Second
	}
	if cfg.TransferTimeout == 0 {
		cfg.TransferTimeout = 5 * time.Minute
	}
	// Keep connections to one S3 endpoint warm: ferry talks to a single
	// host, often many requests at once.
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	conns := newConns(dialer)
	httpClient := awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.MaxIdleConns = 256
		t.MaxIdleConnsPerHost = 256
		t.DialContext = conns.DialContext
		// No transport-wide ResponseHeaderTimeout: a complete that
		// copies a large object answers late by right. Each call has
		// its own bound instead (bounds.go).
	})
	opts := []func(*awsconfig.LoadOptions) error{
		awsconfig.WithRegion(cfg.Region),
		awsconfig.WithHTTPClient(httpClient),
	}
	if cfg.AccessKey != "" {
		opts = append(opts, awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, "")))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3store: %w", err)
	}
	clientOpts := func(endpoint string) func(*s3.Options) {
		return func(o *s3.Options) {
			if endpoint != "" {
				o.BaseEndpoint = aws.String(endpoint)
			}
			o.UsePathStyle = cfg.PathStyle
			// Only send checksums S3 requires: MinIO and older gateways
			// reject the newer default trailers, and a presigned URL must
			// not demand a checksum the browser cannot compute.
			o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
			o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
			o.DisableLogOutputChecksumValidationSkipped = true
		}
	}
	metrics := newRequestMetrics(cfg.Registerer)
	internal := s3.NewFromConfig(awsCfg, clientOpts(cfg.Endpoint), func(o *s3.Options) {
		if metrics != nil {
			o.APIOptions = append(o.APIOptions, metrics.middleware)
		}
	})
	var api API = internal
	if cfg.API != nil {
		api = cfg.API
	}
	pub := cfg.PublicEndpoint
	if pub == "" {
		pub = cfg.Endpoint
	}
	public := s3.NewFromConfig(awsCfg, clientOpts(pub))
	return &Store{
		api: api, presign: s3.NewPresignClient(public), bucket: cfg.Bucket, timeout: cfg.Timeout,
		firstByte: cfg.FirstByteTimeout, idle: cfg.IdleTimeout, transferTimeout: cfg.TransferTimeout,
		creds: awsCfg.Credentials, region: awsCfg.Region,
		publicEndpoint: pub, pathStyle: cfg.PathStyle,
		http: httpClient, presignInternal: s3.NewPresignClient(internal),
		direct: directGets(cfg), conns: conns, metrics: metrics,
	}, nil
}

// Close closes the Store's connections to S3, idle or not. Call it once
// nothing uses the Store any more, before the S3 server it talks to stops:
// a server may wait on a connection the client keeps open (conns.go).
// Requests still in flight fail.
func (s *Store) Close() { s.conns.closeAll() }

// Bucket is the bucket this store writes to.
func (s *Store) Bucket() string { return s.bucket }

func (s *Store) short(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// Ready checks that the bucket is reachable (HeadBucket).
func (s *Store) Ready(ctx context.Context) error {
	ctx, cancel := s.short(ctx)
	defer cancel()
	_, err := s.api.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &s.bucket})
	if err != nil {
		err = translate("HeadBucket", err)
		if errors.Is(err, ErrNotFound) {
			return fmt.Errorf("%w: %s", ErrNoSuchBucket, s.bucket)
		}
	}
	return err
}

// BootstrapOptions say how to prepare the bucket.
type BootstrapOptions struct {
	Create bool // create the bucket when it is missing
	Region string
	// CORSOrigins are the browser origins allowed to PUT parts directly.
	CORSOrigins []string
	// AbortIncompleteAfterDays adds a lifecycle rule aborting multipart
	// uploads older than this many days; 0 adds none.
	AbortIncompleteAfterDays int32
}

// BootstrapReport says what Bootstrap did, for the start-up log.
type BootstrapReport struct {
	Created   bool
	CORS      bool
	Lifecycle bool
	Warnings  []string
}

// Bootstrap makes the bucket ready: it creates it when missing and allowed,
// sets the CORS rule browsers need, and adds the lifecycle rule where the
// store supports it. A store that does not support CORS or lifecycle
// configuration yields a warning, not an error: the bucket may already be
// configured by its operator.
func (s *Store) Bootstrap(ctx context.Context, o BootstrapOptions) (BootstrapReport, error) {
	var rep BootstrapReport
	err := s.Ready(ctx)
	if errors.Is(err, ErrNoSuchBucket) && o.Create {
		in := &s3.CreateBucketInput{Bucket: &s.bucket}
		if o.Region != "" && o.Region != "us-east-1" {
			in.CreateBucketConfiguration = &types.CreateBucketConfiguration{LocationConstraint: types.BucketLocationConstraint(o.Region)}
		}
		cctx, cancel := s.short(ctx)
		_, err = s.api.CreateBucket(cctx, in)
		cancel()
		var owned *types.BucketAlreadyOwnedByYou
		switch {
		case errors.As(err, &owned):
			err = nil
		case err != nil:
			return rep, translate("CreateBucket", err)
		default:
			rep.Created = true
		}
	}
	if err != nil {
		return rep, err
	}

	if len(o.CORSOrigins) > 0 {
		cctx, cancel := s.short(ctx)
		_, err := s.api.PutBucketCors(cctx, &s3.PutBucketCorsInput{
			Bucket: &s.bucket,
			CORSConfiguration: &types.CORSConfiguration{CORSRules: []types.CORSRule{{
				AllowedOrigins: o.CORSOrigins,
				AllowedMethods: []string{"PUT", "GET", "HEAD", "POST"},
				// content-md5 pins a part's bytes; content-type and the
				// x-amz-* headers are what SDKs and Uppy send.
				AllowedHeaders: []string{"content-md5", "content-type", "x-amz-*", "authorization"},
				ExposeHeaders:  []string{"ETag"},
				MaxAgeSeconds:  aws.Int32(3600),
			}}},
		})
		cancel()
		if err != nil {
			rep.Warnings = append(rep.Warnings, "bucket CORS not set: "+translate("PutBucketCors", err).Error())
		} else {
			rep.CORS = true
		}
	}
	if o.AbortIncompleteAfterDays > 0 {
		cctx, cancel := s.short(ctx)
		_, err := s.api.PutBucketLifecycleConfiguration(cctx, &s3.PutBucketLifecycleConfigurationInput{
			Bucket: &s.bucket,
			LifecycleConfiguration: &types.BucketLifecycleConfiguration{Rules: []types.LifecycleRule{{
				ID:     aws.String("ferry-abort-incomplete-multipart"),
				Status: types.ExpirationStatusEnabled,
				Filter: &types.LifecycleRuleFilter{Prefix: aws.String("")},
				AbortIncompleteMultipartUpload: &types.AbortIncompleteMultipartUpload{
					DaysAfterInitiation: aws.Int32(o.AbortIncompleteAfterDays),
				},
			}}},
		})
		cancel()
		if err != nil {
			// ferry's own cleanup job aborts stale uploads anyway.
			rep.Warnings = append(rep.Warnings, "lifecycle rule not set (ferry's cleanup job still aborts stale uploads): "+translate("PutBucketLifecycleConfiguration", err).Error())
		} else {
			rep.Lifecycle = true
		}
	}
	return rep, nil
}

// ChecksumCRC32C names the one S3 checksum algorithm ferry uses: hardware
// CRC32C in Go (hash/crc32, several GB/s), hash-wasm in browsers, verified
// by S3 on each part and, as a full-object checksum, at
// CompleteMultipartUpload.
const ChecksumCRC32C = "CRC32C"

// MultipartOptions describe a multipart upload to create.
type MultipartOptions struct {
	ContentType string
	// Checksum, when ChecksumCRC32C, creates the upload with a FULL_OBJECT
	// CRC32C checksum: every part PUT must carry its x-amz-checksum-crc32c
	// (PartSpec.CRC32C signs it in), and CompleteMultipart must name the
	// whole object's CRC32C, which S3 checks.
	Checksum string
}

// CreateMultipart starts a multipart upload and returns its S3 upload id.
func (s *Store) CreateMultipart(ctx context.Context, key string, o MultipartOptions) (string, error) {
	ctx, cancel := s.short(ctx)
	defer cancel()
	in := &s3.CreateMultipartUploadInput{Bucket: &s.bucket, Key: &key}
	if o.ContentType != "" {
		in.ContentType = &o.ContentType
	}
	switch o.Checksum {
	case "":
	case ChecksumCRC32C:
		in.ChecksumAlgorithm, in.ChecksumType = types.ChecksumAlgorithmCrc32c, types.ChecksumTypeFullObject
	default:
		return "", fmt.Errorf("s3store: unknown checksum algorithm %q", o.Checksum)
	}
	out, err := s.api.CreateMultipartUpload(ctx, in)
	if err != nil {
		return "", translate("CreateMultipartUpload", err)
	}
	return aws.ToString(out.UploadId), nil
}

// PresignedRequest is a URL a client can use directly, with the headers it
// must send (the ones covered by the signature).
type PresignedRequest struct {
	URL       string
	Method    string
	Headers   map[string]string
	ExpiresAt time.Time
}

// PartSpec is one part to presign and what its URL pins.
type PartSpec struct {
	Number int32
	// ContentMD5, when set (base64), is signed into the URL: the client
	// must send it, and S3 rejects a body that does not match.
	ContentMD5 string
	// Size, when positive, is signed into the URL as Content-Length, so S3
	// refuses a body of any other length: a part URL can store only the
	// bytes of its part, not gigabytes in a part of megabytes.
	Size int64
	// CRC32C, when set (base64 of the big-endian CRC32C), is signed into
	// the URL as x-amz-checksum-crc32c: S3 computes the part's checksum
	// as it stores it and refuses (400 BadDigest) a body that does not
	// match. The upload must have been created with ChecksumCRC32C.
	CRC32C string
}

// PresignPart signs a PUT for one part against the public endpoint.
func (s *Store) PresignPart(ctx context.Context, key, uploadID string, p PartSpec, ttl time.Duration) (PresignedRequest, error) {
	in := &s3.UploadPartInput{Bucket: &s.bucket, Key: &key, UploadId: &uploadID, PartNumber: aws.Int32(p.Number)}
	if p.ContentMD5 != "" {
		in.ContentMD5 = &p.ContentMD5
	}
	if p.Size > 0 {
		in.ContentLength = &p.Size
	}
	if p.CRC32C != "" {
		in.ChecksumCRC32C = &p.CRC32C
	}
	req, err := s.presign.PresignUploadPart(ctx, in, s3.WithPresignExpires(ttl))
	if err != nil {
		return PresignedRequest{}, translate("PresignUploadPart", err)
	}
	return toPresigned(req, ttl), nil
}

// PresignParts signs PUTs for several parts of one upload, in the order
// given, like PresignPart for each. The SDK presigns the first part; the
// others are signed from that URL by partSigner, which costs a tenth of
// the SDK per URL and matters for batches of a thousand. The first URL is
// signed both ways as a check: where the two differ (an SDK whose URLs
// took another shape), every part goes through the SDK.
func (s *Store) PresignParts(ctx context.Context, key, uploadID string, parts []PartSpec, ttl time.Duration) ([]PresignedRequest, error) {
	if len(parts) == 0 {
		return nil, nil
	}
	out := make([]PresignedRequest, len(parts))
	first, err := s.PresignPart(ctx, key, uploadID, parts[0], ttl)
	if err != nil {
		return nil, err
	}
	out[0] = first
	creds, err := s.creds.Retrieve(ctx)
	if err != nil {
		return nil, translate("credentials", err)
	}
	signer, ok := newPartSigner(first.URL, creds.SecretAccessKey)
	if ok {
		ok = signer.sign(parts[0]) == first.URL && maps.Equal(partHeaders(parts[0]), first.Headers)
	}
	for i, p := range parts[1:] {
		if !ok {
			if out[i+1], err = s.PresignPart(ctx, key, uploadID, p, ttl); err != nil {
				return nil, err
			}
			continue
		}
		out[i+1] = PresignedRequest{URL: signer.sign(p), Method: http.MethodPut, Headers: partHeaders(p), ExpiresAt: first.ExpiresAt}
	}
	return out, nil
}

// partHeaders are the headers a client must send with part p's URL: the
// signed ones that HTTP clients do not set themselves (see toPresigned).
func partHeaders(p PartSpec) map[string]string {
	h := make(map[string]string, 2)
	if p.ContentMD5 != "" {
		h["Content-Md5"] = p.ContentMD5
	}
	if p.CRC32C != "" {
		h["X-Amz-Checksum-Crc32c"] = p.CRC32C
	}
	return h
}

// PutOptions are what a presigned single-request PUT pins: the client
// must send these headers with exactly these values.
type PutOptions struct {
	ContentMD5  string // base64; S3 refuses a body that does not match
	ContentType string
	// Metadata are x-amz-meta-* values, by name without the prefix.
	Metadata map[string]string
}

// PresignPut signs a single-request PUT of key against the public endpoint.
// It is how a browser sends a whole file to a store without POST policies;
// S3 takes at most 5 GiB in one PUT.
func (s *Store) PresignPut(ctx context.Context, key string, o PutOptions, ttl time.Duration) (PresignedRequest, error) {
	in := &s3.PutObjectInput{Bucket: &s.bucket, Key: &key, Metadata: o.Metadata}
	if o.ContentMD5 != "" {
		in.ContentMD5 = &o.ContentMD5
	}
	if o.ContentType != "" {
		in.ContentType = &o.ContentType
	}
	req, err := s.presign.PresignPutObject(ctx, in, s3.WithPresignExpires(ttl))
	if err != nil {
		return PresignedRequest{}, translate("PresignPutObject", err)
	}
	return toPresigned(req, ttl), nil
}

func toPresigned(req *v4.PresignedHTTPRequest, ttl time.Duration) PresignedRequest {
	h := map[string]string{}
	for k, v := range req.SignedHeader {
		// Host and Content-Length are set by every HTTP client from the
		// URL and the body; listing them would only confuse browsers,
		// which may not set them.
		if strings.EqualFold(k, "host") || strings.EqualFold(k, "content-length") || len(v) == 0 {
			continue
		}
		h[k] = v[0]
	}
	return PresignedRequest{URL: req.URL, Method: req.Method, Headers: h, ExpiresAt: time.Now().Add(ttl)}
}

// Part is one uploaded part as S3 reports it.
type Part struct {
	Number       int32
	ETag         string
	Size         int64
	LastModified time.Time
	CRC32C       string // base64; set for uploads created with ChecksumCRC32C
}

// ListParts returns every part of a multipart upload, following pagination
// past S3's 1,000-per-page limit, one per part number: see
// ListPartsPreferring.
func (s *Store) ListParts(ctx context.Context, key, uploadID string) ([]Part, error) {
	return s.ListPartsPreferring(ctx, key, uploadID, nil)
}

// PartPreference says which of several parts listed under one number a
// caller wants: the one with ETag (the ETag a client got for its PUT),
// else one of Size bytes (the size the part must have); zero values
// prefer nothing.
type PartPreference struct {
	ETag string
	Size int64
}

// ListPartsPreferring returns every part of a multipart upload, following
// pagination, one per part number. A part sent twice is one part on S3
// (the later PUT replaces it), but some stores (SeaweedFS) list each PUT,
// with times to the second only, and complete with whichever of them the
// ETag given to CompleteMultipartUpload names. Of several listed under one
// number, the one prefer names by ETag is kept, else the newest of the
// size prefer names, else the newest; two PUTs within the same second that
// nothing tells apart leave either.
func (s *Store) ListPartsPreferring(ctx context.Context, key, uploadID string, prefer map[int32]PartPreference) ([]Part, error) {
	parts, err := s.listParts(ctx, key, uploadID)
	if err != nil {
		return nil, err
	}
	kept := make(map[int32]int, len(parts))
	out := parts[:0]
	for _, p := range parts {
		i, seen := kept[p.Number]
		if !seen {
			kept[p.Number] = len(out)
			out = append(out, p)
			continue
		}
		want := prefer[p.Number]
		if pr, cr := want.rank(p), want.rank(out[i]); pr != cr {
			if pr > cr {
				out[i] = p
			}
			continue
		}
		if !p.LastModified.Before(out[i].LastModified) {
			out[i] = p
		}
	}
	return out, nil
}

// rank orders the parts listed under one number by how well they match:
// the ETag outranks the size.
func (w PartPreference) rank(p Part) int {
	r := 0
	if w.ETag != "" && sameETag(p.ETag, w.ETag) {
		r += 2
	}
	if w.Size > 0 && p.Size == w.Size {
		r++
	}
	return r
}

// sameETag compares ETags as S3 and clients write them, with or without
// quotes.
func sameETag(a, b string) bool {
	return strings.EqualFold(strings.Trim(a, `"`), strings.Trim(b, `"`))
}

func (s *Store) listParts(ctx context.Context, key, uploadID string) ([]Part, error) {
	var parts []Part
	p := s3.NewListPartsPaginator(s.api, &s3.ListPartsInput{Bucket: &s.bucket, Key: &key, UploadId: &uploadID})
	for p.HasMorePages() {
		cctx, cancel := s.short(ctx)
		page, err := p.NextPage(cctx)
		cancel()
		if err != nil {
			return nil, translate("ListParts", err)
		}
		for _, pt := range page.Parts {
			parts = append(parts, Part{
				Number: aws.ToInt32(pt.PartNumber), ETag: aws.ToString(pt.ETag),
				Size: aws.ToInt64(pt.Size), LastModified: aws.ToTime(pt.LastModified),
				CRC32C: aws.ToString(pt.ChecksumCRC32C),
			})
		}
	}
	return parts, nil
}

// MultipartUpload is an unfinished multipart upload in the bucket.
type MultipartUpload struct {
	Key       string
	UploadID  string
	Initiated time.Time
}

// ListMultipartUploads returns every unfinished multipart upload under
// prefix, following pagination.
func (s *Store) ListMultipartUploads(ctx context.Context, prefix string) ([]MultipartUpload, error) {
	var out []MultipartUpload
	in := &s3.ListMultipartUploadsInput{Bucket: &s.bucket, Prefix: &prefix}
	for {
		cctx, cancel := s.short(ctx)
		page, err := s.api.ListMultipartUploads(cctx, in)
		cancel()
		var apiErr smithy.APIError
		if err != nil && in.UploadIdMarker != nil && errors.As(err, &apiErr) && apiErr.ErrorCode() == "InvalidArgument" {
			// VersityGW 1.8 drops the key-marker's own uploads before
			// looking for the upload-id marker among them, and so refuses
			// its own continuation token. Continuing after the key alone
			// is exact whenever a key has one upload, which holds for
			// ferry's keys; a rare miss is caught by the next sweep.
			in.UploadIdMarker = nil
			cctx, cancel = s.short(ctx)
			page, err = s.api.ListMultipartUploads(cctx, in)
			cancel()
		}
		if err != nil {
			return nil, translate("ListMultipartUploads", err)
		}
		for _, u := range page.Uploads {
			out = append(out, MultipartUpload{Key: aws.ToString(u.Key), UploadID: aws.ToString(u.UploadId), Initiated: aws.ToTime(u.Initiated)})
		}
		if !aws.ToBool(page.IsTruncated) || (page.NextKeyMarker == nil && page.NextUploadIdMarker == nil) {
			return out, nil
		}
		in.KeyMarker, in.UploadIdMarker = page.NextKeyMarker, page.NextUploadIdMarker
	}
}

// CompletedPart names a part for CompleteMultipart.
type CompletedPart struct {
	Number int32
	ETag   string
	CRC32C string // the part's checksum as ListParts reported it, if any
}

// CompleteMultipart merges the listed parts, in order, into the object and
// returns its ETag. Parts not listed are discarded by S3. fullCRC32C, for
// an upload created with ChecksumCRC32C, is the whole object's CRC32C
// (base64) as the client computed it: S3 combines the parts' checksums and
// refuses (ErrBadDigest) to complete when they do not make it, so the
// object that exists is end to end the bytes the client read.
func (s *Store) CompleteMultipart(ctx context.Context, key, uploadID string, parts []CompletedPart, fullCRC32C string) (string, error) {
	cp := make([]types.CompletedPart, len(parts))
	for i, p := range parts {
		cp[i] = types.CompletedPart{PartNumber: aws.Int32(p.Number), ETag: aws.String(p.ETag)}
		if p.CRC32C != "" {
			cp[i].ChecksumCRC32C = aws.String(p.CRC32C)
		}
	}
	in := &s3.CompleteMultipartUploadInput{
		Bucket: &s.bucket, Key: &key, UploadId: &uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: cp},
	}
	if fullCRC32C != "" {
		in.ChecksumCRC32C, in.ChecksumType = &fullCRC32C, types.ChecksumTypeFullObject
	}
	// Completing copies data on some stores (VersityGW: ~3.5 s/GiB), so
	// it gets a generous bound of its own rather than the short timeout.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	out, err := s.api.CompleteMultipartUpload(ctx, in)
	if err != nil {
		return "", translate("CompleteMultipartUpload", err)
	}
	return aws.ToString(out.ETag), nil
}

// AbortMultipart aborts an upload. An upload that is already gone is not
// an error: abort is idempotent.
func (s *Store) AbortMultipart(ctx context.Context, key, uploadID string) error {
	ctx, cancel := s.short(ctx)
	defer cancel()
	_, err := s.api.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &s.bucket, Key: &key, UploadId: &uploadID})
	err = translate("AbortMultipartUpload", err)
	if errors.Is(err, ErrNoSuchUpload) || errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// ObjectInfo is an object's metadata.
type ObjectInfo struct {
	Size         int64
	ETag         string
	ContentType  string
	LastModified time.Time
}

// Head returns an object's metadata, or ErrNotFound.
func (s *Store) Head(ctx context.Context, key string) (ObjectInfo, error) {
	ctx, cancel := s.short(ctx)
	defer cancel()
	out, err := s.api.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &key})
	if err != nil {
		return ObjectInfo{}, translate("HeadObject", err)
	}
	return ObjectInfo{Size: aws.ToInt64(out.ContentLength), ETag: aws.ToString(out.ETag),
		ContentType: aws.ToString(out.ContentType), LastModified: aws.ToTime(out.LastModified)}, nil
}

// Get streams a whole object. The caller must close the reader.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	body, _, err := s.GetVersion(ctx, key)
	return body, err
}

// GetVersion streams a whole object and returns the metadata of exactly
// the bytes it streams, so a caller that hashes them can record which
// version of the object it hashed (its ETag). The caller must close the
// reader.
func (s *Store) GetVersion(ctx context.Context, key string) (io.ReadCloser, ObjectInfo, error) {
	out, body, err := s.getObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
	if err != nil {
		return nil, ObjectInfo{}, err
	}
	return body, ObjectInfo{Size: aws.ToInt64(out.ContentLength), ETag: aws.ToString(out.ETag),
		ContentType: aws.ToString(out.ContentType), LastModified: aws.ToTime(out.LastModified)}, nil
}

// GetRange streams length bytes of key from offset; length < 0 reads to the
// end. The caller must close the reader.
func (s *Store) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	return s.getRange(ctx, key, "", offset, length)
}

// getRange is GetRange with an optional If-Match: with ifMatch set, S3
// refuses (ErrPreconditionFailed) to stream an object whose ETag changed.
func (s *Store) getRange(ctx context.Context, key, ifMatch string, offset, length int64) (io.ReadCloser, error) {
	rng := fmt.Sprintf("bytes=%d-", offset)
	if length >= 0 {
		if length == 0 {
			return io.NopCloser(strings.NewReader("")), nil
		}
		rng = fmt.Sprintf("bytes=%d-%d", offset, offset+length-1)
	}
	in := &s3.GetObjectInput{Bucket: &s.bucket, Key: &key, Range: &rng}
	if ifMatch != "" {
		in.IfMatch = &ifMatch
	}
	_, body, err := s.getObject(ctx, in)
	return body, err
}

// MaxCopySize is the largest object one CopyObject can copy.
const MaxCopySize = 5 << 30

// Copy copies the object src to dst inside the bucket, server-side, and
// returns the new object's ETag. Objects over MaxCopySize need a multipart
// copy, which ferry never has to make (it copies only POST-policy
// uploads, which S3 caps at 5 GiB).
func (s *Store) Copy(ctx context.Context, src, dst string) (string, error) {
	// A copy moves the bytes on most stores: bound it like a complete.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	source := s.bucket + "/" + url.PathEscape(src)
	out, err := s.api.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &s.bucket, Key: &dst, CopySource: &source})
	if err != nil {
		return "", translate("CopyObject", err)
	}
	if out.CopyObjectResult == nil {
		return "", nil
	}
	return aws.ToString(out.CopyObjectResult.ETag), nil
}

// Object is an object as a listing shows it.
type Object struct {
	Key          string
	Size         int64
	LastModified time.Time
}

// ListObjects returns up to limit objects under prefix, in key order,
// following pagination.
func (s *Store) ListObjects(ctx context.Context, prefix string, limit int) ([]Object, error) {
	var out []Object
	p := s3.NewListObjectsV2Paginator(s.api, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &prefix})
	for p.HasMorePages() && len(out) < limit {
		cctx, cancel := s.short(ctx)
		page, err := p.NextPage(cctx)
		cancel()
		if err != nil {
			return out, translate("ListObjectsV2", err)
		}
		for _, o := range page.Contents {
			if len(out) == limit {
				break
			}
			out = append(out, Object{Key: aws.ToString(o.Key), Size: aws.ToInt64(o.Size), LastModified: aws.ToTime(o.LastModified)})
		}
	}
	return out, nil
}

// Put stores a small object in one request. For large or unknown sizes use
// WriteObject.
func (s *Store) Put(ctx context.Context, key string, body io.Reader, size int64, contentType string) error {
	return s.put(ctx, key, body, size, contentType)
}

// PutSHA256 stores a small object whose SHA-256 (hex) the caller has
// already computed. The request is signed with that hash, over HTTP and
// HTTPS alike, so the SDK does not read the body a second time to compute
// one (over HTTP it would), and S3 refuses a body that does not hash to it
// (XAmzContentSHA256Mismatch): the object holds exactly the bytes the
// caller hashed.
func (s *Store) PutSHA256(ctx context.Context, key string, body []byte, sha256Hex, contentType string) error {
	return s.put(ctx, key, bytes.NewReader(body), int64(len(body)), contentType, withPayloadHash(sha256Hex))
}

func (s *Store) put(ctx context.Context, key string, body io.Reader, size int64, contentType string, opts ...func(*s3.Options)) error {
	in := &s3.PutObjectInput{Bucket: &s.bucket, Key: &key, Body: body, ContentLength: aws.Int64(size)}
	if contentType != "" {
		in.ContentType = &contentType
	}
	ctx, cancel := s.transfer(ctx)
	defer cancel()
	_, err := s.api.PutObject(ctx, in, opts...)
	return translate("PutObject", err)
}

// computePayloadHashID is the SDK's ID of the Finalize step that hashes
// the payload for SigV4 (or marks it UNSIGNED-PAYLOAD over HTTPS); the
// constant is unexported in aws/signer/v4. Both forms keep a hash already
// in the context.
const computePayloadHashID = "ComputePayloadHash"

// withPayloadHash makes the SDK sign a request with sha256Hex as its
// payload hash instead of computing one.
func withPayloadHash(sha256Hex string) func(*s3.Options) {
	return func(o *s3.Options) {
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			return st.Finalize.Insert(middleware.FinalizeMiddlewareFunc("ferryPayloadHash",
				func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
					return next.HandleFinalize(v4.SetPayloadHash(ctx, sha256Hex), in)
				}), computePayloadHashID, middleware.Before)
		})
	}
}

// Delete removes an object. A missing object is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	ctx, cancel := s.short(ctx)
	defer cancel()
	_, err := s.api.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key})
	err = translate("DeleteObject", err)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// DeletePrefix removes every object under prefix and returns how many.
// Each page of the listing (up to 1,000 keys) goes in one DeleteObjects
// call: an export of a million messages leaves 1,010 shards, which one
// DeleteObject each cost as many round trips and as many requests for
// the store to serve. A store that refuses DeleteObjects (a gateway
// without it, or an older one that wants a Content-MD5 where the SDK now
// sends a CRC32) gets one DeleteObject per key, from then on.
func (s *Store) DeletePrefix(ctx context.Context, prefix string) (int, error) {
	if prefix == "" {
		return 0, errors.New("s3store: refusing to delete an empty prefix")
	}
	n := 0
	p := s3.NewListObjectsV2Paginator(s.api, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &prefix})
	for p.HasMorePages() {
		cctx, cancel := s.short(ctx)
		page, err := p.NextPage(cctx)
		cancel()
		if err != nil {
			return n, translate("ListObjectsV2", err)
		}
		keys := make([]string, len(page.Contents))
		for i, o := range page.Contents {
			keys[i] = aws.ToString(o.Key)
		}
		deleted, err := s.deleteKeys(ctx, keys)
		n += deleted
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// DeleteKeys deletes keys, 1,000 per DeleteObjects call (one
// DeleteObject each on a store that refuses that, as DeletePrefix does),
// and returns how many it deleted; keys already gone count as deleted.
// On an error it returns at once, with the count so far: the keys left
// are a later call's.
func (s *Store) DeleteKeys(ctx context.Context, keys []string) (int, error) {
	n := 0
	for chunk := range slices.Chunk(keys, maxDeleteKeys) {
		deleted, err := s.deleteKeys(ctx, chunk)
		n += deleted
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// maxDeleteKeys is the most keys one DeleteObjects call may name.
const maxDeleteKeys = 1000

// deleteKeys deletes keys, at most maxDeleteKeys (a listing's page), and
// returns how many it deleted.
func (s *Store) deleteKeys(ctx context.Context, keys []string) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	if !s.oneByOne.Load() {
		n, err := s.deleteObjects(ctx, keys)
		if !errors.Is(err, errRefused) {
			return n, err
		}
		s.oneByOne.Store(true)
	}
	for i, k := range keys {
		if err := s.Delete(ctx, k); err != nil {
			return i, err
		}
	}
	return len(keys), nil
}

// errRefused marks a DeleteObjects call the store answered with an
// error that deleting one object at a time may not meet: it lacks the
// call, or refuses how the SDK sends it.
var errRefused = errors.New("s3store: DeleteObjects refused")

// deleteObjects deletes keys in one DeleteObjects call. An outage, or
// credentials the store refuses, is returned as it is: deleting one key
// at a time would meet it too.
func (s *Store) deleteObjects(ctx context.Context, keys []string) (int, error) {
	ids := make([]types.ObjectIdentifier, len(keys))
	for i := range keys {
		ids[i].Key = &keys[i]
	}
	ctx, cancel := s.short(ctx)
	defer cancel()
	// Quiet: the answer lists only the keys that failed.
	out, err := s.api.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &s.bucket, Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)}})
	if err != nil {
		terr := translate("DeleteObjects", err)
		var apiErr smithy.APIError
		if errors.As(err, &apiErr) && !errors.Is(terr, ErrUnavailable) && !errors.Is(terr, ErrAccessDenied) && !errors.Is(terr, ErrNoSuchBucket) {
			return 0, fmt.Errorf("%w: %w", errRefused, terr)
		}
		return 0, terr
	}
	var first error
	failed := 0
	for _, e := range out.Errors {
		if aws.ToString(e.Code) == "NoSuchKey" {
			continue // gone already, as Delete treats it
		}
		failed++
		if first == nil {
			first = translate("DeleteObjects "+aws.ToString(e.Key), &smithy.GenericAPIError{Code: aws.ToString(e.Code), Message: aws.ToString(e.Message)})
		}
	}
	return len(keys) - failed, first
}
