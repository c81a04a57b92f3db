package s3store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Every call to the store has a bound, so a store that accepts connections
// and never answers holds nothing for long:
//   - calls that return at once (Head, List*, Create, Abort, Delete) get
//     Config.Timeout in all;
//   - a GET must start its answer within Config.FirstByteTimeout, and then
//     never go Config.IdleTimeout without a byte while ferry is reading;
//   - a part or object PUT gets Config.TransferTimeout;
//   - CompleteMultipartUpload and CopyObject, which copy data on some
//     stores, get half an hour.
//
// A bound that runs out is an ErrUnavailable, an outage.
var (
	errFirstByte = errors.New("s3store: no answer within the first-byte timeout")
	errIdle      = errors.New("s3store: the answer stalled for longer than the idle timeout")
)

// getObject issues a GET bounded by the first-byte timeout and returns its
// body bounded by the idle timeout. Closing the body releases the request.
func (s *Store) getObject(ctx context.Context, in *s3.GetObjectInput) (*s3.GetObjectOutput, io.ReadCloser, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	timer := time.AfterFunc(s.firstByte, func() { cancel(errFirstByte) })
	out, err := s.api.GetObject(ctx, in)
	if !timer.Stop() && err == nil {
		// The bound ran out as the answer arrived; the body is cancelled.
		out.Body.Close()
		err = context.DeadlineExceeded
	}
	if err != nil {
		cause := context.Cause(ctx)
		cancel(nil)
		if errors.Is(cause, errFirstByte) {
			return nil, nil, fmt.Errorf("s3 GetObject: %w (%w)", ErrUnavailable, errFirstByte)
		}
		return nil, nil, translate("GetObject", err)
	}
	b := &idleBody{rc: out.Body, ctx: ctx, cancel: cancel, idle: s.idle}
	b.timer = time.AfterFunc(time.Hour, func() { cancel(errIdle) })
	b.timer.Stop()
	return out, b, nil
}

// idleBody fails a body read that waits on the store for longer than idle.
// Only time spent inside Read counts: a consumer that reads slowly (a
// download to a slow client) is not the store stalling.
type idleBody struct {
	rc     io.ReadCloser
	ctx    context.Context
	cancel context.CancelCauseFunc
	idle   time.Duration
	timer  *time.Timer
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.timer.Reset(b.idle)
	n, err := b.rc.Read(p)
	b.timer.Stop()
	if err != nil && !errors.Is(err, io.EOF) && errors.Is(context.Cause(b.ctx), errIdle) {
		err = fmt.Errorf("s3 GetObject body: %w (%w)", ErrUnavailable, errIdle)
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	err := b.rc.Close()
	b.cancel(nil)
	return err
}

// transfer bounds a call that sends a body.
func (s *Store) transfer(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.transferTimeout)
}
