package main

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"

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

// sdkUpload is a hand-written parallel multipart upload with ferry's part
// size and concurrency: concurrency workers, each with one part buffer,
// read a part from the file and PUT it. It is what ferry's client does
// minus the API calls, the whole-file SHA-256 and, unless contentMD5 is
// set, the Content-MD5 of each part.
func sdkUpload(ctx context.Context, cli *s3.Client, bucket, key, path string, partSize int64, concurrency int, contentMD5 bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	count := int((size + partSize - 1) / partSize)
	if count == 0 {
		return errors.New("empty file")
	}

	mp, err := cli.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: &key})
	if err != nil {
		return fmt.Errorf("CreateMultipartUpload: %w", err)
	}
	abort := func() {
		cli.AbortMultipartUpload(context.WithoutCancel(ctx), &s3.AbortMultipartUploadInput{Bucket: &bucket, Key: &key, UploadId: mp.UploadId})
	}

	parts := make([]types.CompletedPart, count)
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
				var sum *string
				if contentMD5 {
					h := md5.Sum(b)
					sum = aws.String(base64.StdEncoding.EncodeToString(h[:]))
				}
				out, err := cli.UploadPart(gctx, &s3.UploadPartInput{
					Bucket: &bucket, Key: &key, UploadId: mp.UploadId, ContentMD5: sum,
					PartNumber: aws.Int32(int32(n)), Body: bytes.NewReader(b), ContentLength: aws.Int64(int64(len(b))),
				}, s3.WithAPIOptions(v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware))
				if err != nil {
					return fmt.Errorf("UploadPart %d: %w", n, err)
				}
				parts[n-1] = types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(int32(n))}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		abort()
		return err
	}
	_, err = cli.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: &bucket, Key: &key, UploadId: mp.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	})
	if err != nil {
		abort()
		return fmt.Errorf("CompleteMultipartUpload: %w", err)
	}
	return nil
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
