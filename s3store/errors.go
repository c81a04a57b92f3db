package s3store

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// Sentinel errors. Wrapped errors keep the S3 code in their text for logs.
var (
	ErrNotFound           = errors.New("s3store: object not found")
	ErrNoSuchUpload       = errors.New("s3store: no such multipart upload")
	ErrNoSuchBucket       = errors.New("s3store: no such bucket")
	ErrAccessDenied       = errors.New("s3store: access denied")
	ErrInvalidParts       = errors.New("s3store: invalid or too small parts")
	ErrPreconditionFailed = errors.New("s3store: precondition failed")
	ErrInvalidRange       = errors.New("s3store: range not satisfiable")
	ErrNotImplemented     = errors.New("s3store: not supported by this store")
	ErrUnavailable        = errors.New("s3store: storage unreachable")
)

// translate maps an SDK error to a sentinel, keeping the original in the
// chain for logs. Context errors pass through unchanged.
func translate(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("s3 %s: %w", op, err)
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
		case "PreconditionFailed":
			sentinel = ErrPreconditionFailed
		case "InvalidRange":
			sentinel = ErrInvalidRange
		case "NotImplemented", "MethodNotAllowed":
			sentinel = ErrNotImplemented
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
			case 501:
				sentinel = ErrNotImplemented
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
