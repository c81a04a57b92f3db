package s3store_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/s3store"
)

// timed is what ferry_s3_request_duration_seconds holds for one
// operation and outcome: how many requests, and their seconds in all.
type timed struct {
	n   uint64
	sum float64
}

func requestTimes(t *testing.T, reg *prometheus.Registry) map[[2]string]timed {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[[2]string]timed{}
	for _, mf := range mfs {
		if mf.GetName() != "ferry_s3_request_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var k [2]string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "operation":
					k[0] = l.GetValue()
				case "outcome":
					k[1] = l.GetValue()
				}
			}
			out[k] = timed{m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()}
		}
	}
	return out
}

// Each request ferry sends to S3 is timed by operation and by outcome:
// through the SDK, by the direct GETs of object reads, for answers that
// are errors and for requests that get no answer; signing a URL sends
// nothing and records nothing.
func TestRequestsAreTimedByOperationAndOutcome(t *testing.T) {
	srv := testenv.S3(t)
	bucket := testenv.Store(t).Bucket()
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	st, err := s3store.New(ctx, s3store.Config{
		Endpoint: srv.Endpoint, Region: "us-east-1", Bucket: bucket,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PathStyle: true, Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}

	if _, err := st.PresignPart(ctx, "m/none", "no-upload", s3store.PartSpec{Number: 1}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := requestTimes(t, reg); len(got) != 0 {
		t.Fatalf("presigning a URL recorded %v; it sends no request", got)
	}

	data := randomBytes(5<<20 + 3)
	if err := st.Put(ctx, "m/obj", bytes.NewReader(data), int64(len(data)), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Head(ctx, "m/missing"); !errors.Is(err, s3store.ErrNotFound) {
		t.Fatalf("Head of a missing object: %v, want ErrNotFound", err)
	}
	id, err := st.CreateMultipart(ctx, "m/mp", s3store.MultipartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	req, err := st.PresignPart(ctx, "m/mp", id, s3store.PartSpec{Number: 1}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if code, msg := put(t, req, data, nil); code != 200 {
		t.Fatalf("part: %d %s", code, msg)
	}
	listed, err := st.ListParts(ctx, "m/mp", id)
	if err != nil || len(listed) != 1 {
		t.Fatalf("ListParts = %+v, %v", listed, err)
	}
	if _, err := st.CompleteMultipart(ctx, "m/mp", id, []s3store.CompletedPart{{Number: 1, ETag: listed[0].ETag}}, ""); err != nil {
		t.Fatal(err)
	}
	r := st.Open(ctx, "m/obj", int64(len(data)), "")
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, %v", len(got), err)
	}

	times := requestTimes(t, reg)
	for _, k := range [][2]string{
		{"PutObject", "ok"}, {"HeadObject", "4xx"}, {"CreateMultipartUpload", "ok"}, {"ListParts", "ok"},
		{"CompleteMultipartUpload", "ok"}, {"GetObject", "ok"},
	} {
		if times[k].n != 1 || times[k].sum <= 0 {
			t.Errorf("%s %s: %d requests, %.6f s; want one, timed", k[0], k[1], times[k].n, times[k].sum)
		}
	}
	// The part PUT went from this test to S3 on a presigned URL, not
	// from ferry.
	if n := times[[2]string{"UploadPart", "ok"}].n; n != 0 {
		t.Errorf("%d UploadPart requests recorded; ferry sent none", n)
	}

	// A store that refuses connections: each attempt the SDK makes is a
	// request without an answer.
	downReg := prometheus.NewRegistry()
	down, err := s3store.New(ctx, s3store.Config{
		Endpoint: "http://" + testenv.FreeAddr(t), Region: "us-east-1", Bucket: bucket,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PathStyle: true, Registerer: downReg,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := down.Head(ctx, "m/obj"); !errors.Is(err, s3store.ErrUnavailable) {
		t.Fatalf("Head on a refused connection: %v, want ErrUnavailable", err)
	}
	if n := requestTimes(t, downReg)[[2]string{"HeadObject", "no_response"}].n; n < 1 {
		t.Fatalf("%d HeadObject requests without an answer recorded, want at least one", n)
	}
}
