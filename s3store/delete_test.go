package s3store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/ferry-io/ferry/s3store"
)

// deletesAPI passes every S3 call on and counts the listings and
// deletes; answer, when set, answers DeleteObjects in the store's place
// (next is the store).
type deletesAPI struct {
	s3store.API
	lists, one, many atomic.Int64
	answer           func(next s3store.API, in *s3.DeleteObjectsInput) (*s3.DeleteObjectsOutput, error)
}

func (d *deletesAPI) ListObjectsV2(ctx context.Context, in *s3.ListObjectsV2Input, o ...func(*s3.Options)) (*s3.ListObjectsV2Output, error) {
	d.lists.Add(1)
	return d.API.ListObjectsV2(ctx, in, o...)
}

func (d *deletesAPI) DeleteObject(ctx context.Context, in *s3.DeleteObjectInput, o ...func(*s3.Options)) (*s3.DeleteObjectOutput, error) {
	d.one.Add(1)
	return d.API.DeleteObject(ctx, in, o...)
}

func (d *deletesAPI) DeleteObjects(ctx context.Context, in *s3.DeleteObjectsInput, o ...func(*s3.Options)) (*s3.DeleteObjectsOutput, error) {
	d.many.Add(1)
	if d.answer != nil {
		return d.answer(d.API, in)
	}
	return d.API.DeleteObjects(ctx, in, o...)
}

// putKeys puts n small objects named prefix0000, prefix0001, ...
func putKeys(t testing.TB, st *s3store.Store, prefix string, n int) {
	t.Helper()
	parallel(t, n, func(i int) error {
		return st.Put(context.Background(), fmt.Sprintf("%s%04d", prefix, i), strings.NewReader("x"), 1, "text/plain")
	})
}

// left lists what is under prefix.
func left(t *testing.T, st *s3store.Store, prefix string) []string {
	t.Helper()
	objs, err := st.ListObjects(context.Background(), prefix, 2000)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range objs {
		keys = append(keys, o.Key)
	}
	return keys
}

// DeletePrefix deletes a listing's page of keys with one DeleteObjects
// call, and nothing outside the prefix.
func TestDeletePrefixDeletesAPageAtATime(t *testing.T) {
	if testing.Short() {
		t.Skip("puts 1,001 objects")
	}
	api := &deletesAPI{}
	st := storeThrough(t, func(client s3store.API) s3store.API { api.API = client; return api })
	ctx := context.Background()
	const n = 1001 // more than one page of a listing
	putKeys(t, st, "pages/", n)
	putKeys(t, st, "pages-kept/", 2) // shares the prefix's characters, not its folder

	before := api.lists.Load()
	got, err := st.DeletePrefix(ctx, "pages/")
	pages := api.lists.Load() - before
	if err != nil || got != n {
		t.Fatalf("DeletePrefix = %d, %v; want %d", got, err, n)
	}
	if keys := left(t, st, "pages/"); len(keys) != 0 {
		t.Fatalf("%d objects left under the prefix: %v", len(keys), keys[:min(len(keys), 5)])
	}
	if keys := left(t, st, "pages-kept/"); len(keys) != 2 {
		t.Fatalf("outside the prefix %v are left, want the 2 put", keys)
	}
	// One DeleteObjects per page listed (the last page may list none).
	if api.one.Load() != 0 || api.many.Load() < 2 || api.many.Load() > pages {
		t.Fatalf("%d DeleteObject and %d DeleteObjects calls for %d objects in %d pages; want no DeleteObject and one DeleteObjects a page",
			api.one.Load(), api.many.Load(), n, pages)
	}
}

// DeleteKeys deletes the keys it is given, 1,000 per DeleteObjects call,
// counts a key already gone as deleted, and deletes nothing else.
func TestDeleteKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("puts 1,003 objects")
	}
	api := &deletesAPI{}
	st := storeThrough(t, func(client s3store.API) s3store.API { api.API = client; return api })
	ctx := context.Background()
	const n = 1001 // more than one call's worth
	putKeys(t, st, "keys/", n+2)
	keys := left(t, st, "keys/")[:n]
	keys = append(keys, "keys/gone") // never put

	got, err := st.DeleteKeys(ctx, keys)
	if err != nil || got != n+1 {
		t.Fatalf("DeleteKeys = %d, %v; want %d", got, err, n+1)
	}
	if rest := left(t, st, "keys/"); !slices.Equal(rest, []string{"keys/1001", "keys/1002"}) {
		t.Fatalf("left %v, want the two keys not named", rest[:min(len(rest), 5)])
	}
	if api.one.Load() != 0 || api.many.Load() != 2 {
		t.Fatalf("%d DeleteObject and %d DeleteObjects calls for %d keys; want none and 2", api.one.Load(), api.many.Load(), n+1)
	}
	if got, err := st.DeleteKeys(ctx, nil); err != nil || got != 0 || api.many.Load() != 2 {
		t.Fatalf("DeleteKeys(nil) = %d, %v after %d DeleteObjects calls; want 0 and no call", got, err, api.many.Load())
	}
}

// A store that refuses DeleteObjects gets one DeleteObject per key, and is
// not asked DeleteObjects again; an outage or a key the store would not
// delete is an error, with the objects left in place, not a reason to
// delete another way.
func TestDeletePrefixWhenDeleteObjectsFails(t *testing.T) {
	refused := func(code string) func(s3store.API, *s3.DeleteObjectsInput) (*s3.DeleteObjectsOutput, error) {
		return func(s3store.API, *s3.DeleteObjectsInput) (*s3.DeleteObjectsOutput, error) {
			return nil, &smithy.GenericAPIError{Code: code, Message: "refused by the test"}
		}
	}
	// The store deletes all but the first key, which it reports denied.
	denyFirst := func(next s3store.API, in *s3.DeleteObjectsInput) (*s3.DeleteObjectsOutput, error) {
		rest := *in
		rest.Delete = &types.Delete{Objects: in.Delete.Objects[1:], Quiet: in.Delete.Quiet}
		out, err := next.DeleteObjects(context.Background(), &rest)
		if err != nil {
			return nil, err
		}
		out.Errors = append(out.Errors, types.Error{Key: in.Delete.Objects[0].Key, Code: aws.String("AccessDenied"), Message: aws.String("denied by the test")})
		return out, nil
	}
	cases := []struct {
		name    string
		answer  func(s3store.API, *s3.DeleteObjectsInput) (*s3.DeleteObjectsOutput, error)
		wantErr error // nil: every object deleted, one at a time
		wantN   int
		left    int
	}{
		{name: "not implemented", answer: refused("NotImplemented"), wantN: 5},
		{name: "wants Content-MD5", answer: refused("MissingContentMD5"), wantN: 5},
		{name: "slow down", answer: refused("SlowDown"), wantErr: s3store.ErrUnavailable, left: 5},
		{name: "access denied", answer: refused("AccessDenied"), wantErr: s3store.ErrAccessDenied, left: 5},
		{name: "one key denied", answer: denyFirst, wantErr: s3store.ErrAccessDenied, wantN: 4, left: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			api := &deletesAPI{answer: tc.answer}
			st := storeThrough(t, func(client s3store.API) s3store.API { api.API = client; return api })
			ctx := context.Background()
			const prefix = "refused/" // each case has a bucket of its own
			putKeys(t, st, prefix, 5)

			got, err := st.DeletePrefix(ctx, prefix)
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) || got != tc.wantN {
				t.Fatalf("DeletePrefix = %d, %v; want %d, %v", got, err, tc.wantN, tc.wantErr)
			}
			if keys := left(t, st, prefix); len(keys) != tc.left {
				t.Fatalf("left %v, want %d objects", keys, tc.left)
			}
			if tc.wantErr != nil {
				if api.one.Load() != 0 {
					t.Fatalf("%d DeleteObject calls after %v; want none", api.one.Load(), err)
				}
				return
			}
			if api.one.Load() != 5 || api.many.Load() != 1 {
				t.Fatalf("%d DeleteObject and %d DeleteObjects calls; want 5 and 1", api.one.Load(), api.many.Load())
			}
			// Once refused, not asked again.
			putKeys(t, st, prefix, 3)
			if got, err := st.DeletePrefix(ctx, prefix); err != nil || got != 3 {
				t.Fatalf("second DeletePrefix = %d, %v; want 3", got, err)
			}
			if api.many.Load() != 1 || api.one.Load() != 8 {
				t.Fatalf("after a second DeletePrefix: %d DeleteObjects and %d DeleteObject calls; want 1 and 8", api.many.Load(), api.one.Load())
			}
		})
	}
}

// BenchmarkDeletePrefix deletes 1,000 objects, about an export's shards,
// a page per DeleteObjects call and, as on a store that refuses that,
// one DeleteObject each.
func BenchmarkDeletePrefix(b *testing.B) {
	for _, way := range []struct {
		name   string
		answer func(s3store.API, *s3.DeleteObjectsInput) (*s3.DeleteObjectsOutput, error)
	}{
		{"DeleteObjects", nil},
		{"one at a time", func(s3store.API, *s3.DeleteObjectsInput) (*s3.DeleteObjectsOutput, error) {
			return nil, &smithy.GenericAPIError{Code: "NotImplemented", Message: "refused by the benchmark"}
		}},
	} {
		b.Run(way.name, func(b *testing.B) {
			api := &deletesAPI{answer: way.answer}
			st := storeThrough(b, func(client s3store.API) s3store.API { api.API = client; return api })
			const n = 1000
			for b.Loop() {
				b.StopTimer()
				putKeys(b, st, "bench-deletes/", n)
				b.StartTimer()
				if got, err := st.DeletePrefix(context.Background(), "bench-deletes/"); err != nil || got != n {
					b.Fatalf("DeletePrefix = %d, %v; want %d", got, err, n)
				}
			}
			b.ReportMetric(float64(api.one.Load()+api.many.Load())/float64(b.N), "calls/op")
		})
	}
}
