package main

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"golang.org/x/sync/errgroup"
)

// newS3 is the raw SDK client the ceiling and the direct GET use. It is
// set up for speed, as the fastest direct use of the SDK would be:
//   - no request checksums (CRC32 by default in current SDKs) and no
//     response checksum validation;
//   - UNSIGNED-PAYLOAD on UploadPart (see uploadPart), because over plain
//     HTTP the SDK otherwise hashes every byte with SHA-256 to sign it;
//   - a connection pool as large as ferry's own.
//
// ferry's presigned part URLs are UNSIGNED-PAYLOAD too, but its client
// sends a Content-MD5 with every part; the ceiling does no integrity work
// at all, so the comparison charges ferry for its checks.
func newS3(endpoint, accessKey, secretKey string) *s3.Client {
	hc := awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.MaxIdleConns = 256
		t.MaxIdleConnsPerHost = 256
	})
	cfg := aws.Config{
		Region:                     "us-east-1",
		Credentials:                credentials.NewStaticCredentialsProvider(accessKey, secretKey, ""),
		HTTPClient:                 hc,
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	}
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.UsePathStyle = true
		o.DisableLogOutputChecksumValidationSkipped = true
	})
}

// integrity is what a raw SDK upload pins on each part.
type integrity int

const (
	pinNothing integrity = iota // the plain ceiling
	pinMD5                      // Content-MD5 per part, as ferry's old part URLs required
	// pinCRC32C is what ferry's checksummed uploads do: the multipart
	// upload is created with a FULL_OBJECT CRC32C, each part carries its
	// x-amz-checksum-crc32c, and the complete names the whole file's
	// CRC32C, which S3 checks.
	pinCRC32C
)

// sdkUpload is a hand-written parallel multipart upload with ferry's part
// size and concurrency: concurrency workers, each with one part buffer,
// read a part from the file and PUT it. It is what ferry's client does
// minus the API calls and the whole-file SHA-256, with the per-part
// integrity pin chosen. It returns how long S3's CompleteMultipartUpload
// took, measured around the call.
func sdkUpload(ctx context.Context, cli *s3.Client, bucket, key, path string, partSize int64, concurrency int, pin integrity) (time.Duration, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := st.Size()
	count := int((size + partSize - 1) / partSize)
	if count == 0 {
		return 0, errors.New("empty file")
	}

	create := &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: &key}
	if pin == pinCRC32C {
		create.ChecksumAlgorithm, create.ChecksumType = types.ChecksumAlgorithmCrc32c, types.ChecksumTypeFullObject
	}
	mp, err := cli.CreateMultipartUpload(ctx, create)
	if err != nil {
		return 0, fmt.Errorf("CreateMultipartUpload: %w", err)
	}
	abort := func() {
		cli.AbortMultipartUpload(context.WithoutCancel(ctx), &s3.AbortMultipartUploadInput{Bucket: &bucket, Key: &key, UploadId: mp.UploadId})
	}

	parts := make([]types.CompletedPart, count)
	crcs := make([]uint32, count)
	next := make(chan int)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(next)
		for n := 1; n <= count; n++ {
			select {
			case next <- n:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		return nil
	})
	for range concurrency {
		g.Go(func() error {
			buf := make([]byte, partSize)
			for n := range next {
				off := int64(n-1) * partSize
				b := buf[:min(partSize, size-off)]
				if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
					return err
				}
				in := &s3.UploadPartInput{
					Bucket: &bucket, Key: &key, UploadId: mp.UploadId,
					PartNumber: aws.Int32(int32(n)), Body: bytes.NewReader(b), ContentLength: aws.Int64(int64(len(b))),
				}
				switch pin {
				case pinMD5:
					h := md5.Sum(b)
					in.ContentMD5 = aws.String(base64.StdEncoding.EncodeToString(h[:]))
				case pinCRC32C:
					crcs[n-1] = crc32.Checksum(b, castagnoli)
					in.ChecksumCRC32C = aws.String(encodeCRC32C(crcs[n-1]))
				}
				out, err := cli.UploadPart(gctx, in, s3.WithAPIOptions(v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware))
				if err != nil {
					return fmt.Errorf("UploadPart %d: %w", n, err)
				}
				parts[n-1] = types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(int32(n)), ChecksumCRC32C: in.ChecksumCRC32C}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		abort()
		return 0, err
	}
	complete := &s3.CompleteMultipartUploadInput{
		Bucket: &bucket, Key: &key, UploadId: mp.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	}
	if pin == pinCRC32C {
		// The whole file's CRC32C from the parts' (no second read), as a
		// client hashing while it sends would have it.
		whole := crcs[0]
		for i := 1; i < count; i++ {
			whole = crc32cCombine(whole, crcs[i], min(partSize, size-int64(i)*partSize))
		}
		complete.ChecksumCRC32C, complete.ChecksumType = aws.String(encodeCRC32C(whole)), types.ChecksumTypeFullObject
	}
	t := time.Now()
	_, err = cli.CompleteMultipartUpload(ctx, complete)
	took := time.Since(t)
	if err != nil {
		abort()
		return 0, fmt.Errorf("CompleteMultipartUpload: %w", err)
	}
	return took, nil
}

// s3Get downloads an object into path with one plain GetObject, the way
// a direct download from S3 would go.
func s3Get(ctx context.Context, cli *s3.Client, bucket, key, path string) (int64, error) {
	out, err := cli.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		return 0, fmt.Errorf("GetObject: %w", err)
	}
	defer out.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, out.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// objectSize is the size S3 reports for an object, to check that an
// upload landed whole.
func objectSize(ctx context.Context, cli *s3.Client, bucket, key string) (int64, error) {
	out, err := cli.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		return 0, fmt.Errorf("HeadObject %s/%s: %w", bucket, key, err)
	}
	return aws.ToInt64(out.ContentLength), nil
}

func deleteObject(ctx context.Context, cli *s3.Client, bucket, key string) error {
	_, err := cli.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: &key})
	return err
}

func createBucket(ctx context.Context, cli *s3.Client, bucket string) error {
	_, err := cli.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket})
	var owned *types.BucketAlreadyOwnedByYou
	if errors.As(err, &owned) {
		return nil
	}
	return err
}
