package s3store

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/ferry-io/ferry/errkind"
)

// Sentinel errors. Wrapped errors keep the S3 code in their text for logs.
var (
	ErrNotFound           = errors.New("s3store: object not found")
	ErrNoSuchUpload       = errors.New("s3store: no such multipart upload")
	ErrNoSuchBucket       = errors.New("s3store: no such bucket")
	ErrAccessDenied       = errors.New("s3store: access denied")
	ErrInvalidParts       = errors.New("s3store: invalid or too small parts")
	ErrBadDigest          = errors.New("s3store: checksum mismatch")
	ErrPreconditionFailed = errors.New("s3store: precondition failed")
	ErrInvalidRange       = errors.New("s3store: range not satisfiable")
	// ErrUnavailable is an outage: the store refused or reset the
	// connection, did not answer in time, or answered 5xx (SlowDown,
	// InternalError) after the SDK's own retries. It is of kind
	// errkind.Unavailable, so the HTTP layer answers 503 and jobs wait for
	// the store instead of using up attempts.
	ErrUnavailable = &errkind.Error{Kind: errkind.Unavailable, Code: "storage_unavailable", Detail: "object storage is unreachable; retry in a moment"}
	// ErrStorageFull is a store out of space (507 InsufficientStorage, or
	// EntityTooLarge for quota-limited stores). It is an outage too: it
	// passes when space is freed, so jobs wait rather than fail.
	ErrStorageFull = &errkind.Error{Kind: errkind.Unavailable, Code: "storage_full", Detail: "object storage is out of space; retry once space is freed"}
)

// translate maps an SDK error to a sentinel, keeping the original in the
// chain for logs. Context errors pass through unchanged.
func translate(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("s3 %s: %w", op, err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// A bound ran out: the store did not answer in time.
		return fmt.Errorf("s3 %s: %w (%w)", op, ErrUnavailable, err)
	}
	var sentinel error
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode() {
		case "NoSuchKey", "NotFound":
			sentinel = ErrNotFound
		case "NoSuchUpload":
			sentinel = ErrNoSuchUpload
		case "NoSuchBucket":
			sentinel = ErrNoSuchBucket
		case "AccessDenied", "Forbidden", "InvalidAccessKeyId", "SignatureDoesNotMatch":
			sentinel = ErrAccessDenied
		case "InvalidPart", "InvalidPartOrder", "EntityTooSmall":
			sentinel = ErrInvalidParts
		case "BadDigest", "XAmzContentChecksumMismatch", "InvalidDigest":
			sentinel = ErrBadDigest
		case "PreconditionFailed":
			sentinel = ErrPreconditionFailed
		case "InvalidRange":
			sentinel = ErrInvalidRange
		case "SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout":
			sentinel = ErrUnavailable
		case "InsufficientStorage", "StorageFull":
			sentinel = ErrStorageFull
		}
	}
	if sentinel == nil {
		var re *smithyhttp.ResponseError
		if errors.As(err, &re) {
			switch re.HTTPStatusCode() {
			case 404:
				sentinel = ErrNotFound
			case 403:
				sentinel = ErrAccessDenied
			case 412:
				sentinel = ErrPreconditionFailed
			case 416:
				sentinel = ErrInvalidRange
			case 500, 502, 503, 504:
				sentinel = ErrUnavailable
			case 507:
				sentinel = ErrStorageFull
			}
		}
	}
	if sentinel == nil {
		var netErr net.Error
		var sendErr *smithyhttp.RequestSendError
		if errors.As(err, &netErr) || errors.As(err, &sendErr) {
			sentinel = ErrUnavailable
		}
	}
	if sentinel == nil {
		return fmt.Errorf("s3 %s: %w", op, err)
	}
	return fmt.Errorf("s3 %s: %w (%w)", op, sentinel, err)
}
