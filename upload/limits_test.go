package upload_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/upload"
)

const gib = 1 << 30

// The largest file follows S3's current multipart limits: 10,000 parts of
// up to 5 GiB, 48.8 TiB, with the part size raised from the default to
// keep within the part count; a store with smaller limits is configured
// with them, and the same rule holds at its edges.
func TestSizeLimitFollowsTheStore(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		ctx := context.Background()
		init := func(e *env, size, partSize int64) (upload.Status, error) {
			res, err := e.svc.Init(ctx, "usr_a", upload.InitRequest{FileName: "huge.bin", Size: size, PartSize: partSize})
			return res.Upload, err
		}

		aws := newEnv(t, db, nil)
		const awsMax = 10_000 * 5 * gib // 48.8 TiB
		st, err := init(aws, awsMax, 0)
		if err != nil || st.PartSize != 5*gib || st.PartCount != 10_000 {
			t.Fatalf("48.8 TiB: %+v %v, want 10,000 parts of 5 GiB", st, err)
		}
		urls, err := aws.svc.Presign(ctx, "usr_a", st.UploadID, upload.PresignRequest{Parts: []int{10_000}})
		if err != nil || urls[10_000].URL == "" {
			t.Fatalf("presign the last of 10,000 parts: %v", err)
		}
		_, err = init(aws, awsMax+1, 0)
		if ke := wantKind(t, err, errkind.Invalid, "size_too_large"); ke.Fields["max_size"] != int64(awsMax) {
			t.Fatalf("one byte over 48.8 TiB: fields %v", ke.Fields)
		}
		st, err = init(aws, 5<<40, 0) // 5 TiB, the old limit: parts of 525 MiB
		if err != nil || st.PartSize != 525<<20 || st.PartCount != 9987 {
			t.Fatalf("5 TiB: %+v %v", st, err)
		}
		_, err = init(aws, 10*gib, 5*gib+1)
		wantKind(t, err, errkind.Invalid, "invalid_part_size")

		// A store that takes at most 1,000 parts.
		small := newEnv(t, db, func(c *testConfig) { c.MaxParts = 1000 })
		st, err = init(small, 1000*5*gib, 0)
		if err != nil || st.PartSize != 5*gib || st.PartCount != 1000 {
			t.Fatalf("1,000 parts of 5 GiB: %+v %v", st, err)
		}
		_, err = init(small, 1000*5*gib+1, 0)
		wantKind(t, err, errkind.Invalid, "size_too_large")
		st, err = init(small, 100*gib, 0)
		if err != nil || st.PartSize != 103<<20 || st.PartCount != 995 {
			t.Fatalf("100 GiB in at most 1,000 parts: %+v %v, want 995 parts of 103 MiB", st, err)
		}
		_, err = init(small, 10*gib, 5<<20) // 2,048 parts asked for
		if ke := wantKind(t, err, errkind.Invalid, "too_many_parts"); fmt.Sprint(ke.Fields["max_parts"]) != "1000" {
			t.Fatalf("too_many_parts fields %v, want max_parts 1000", ke.Fields)
		}
		// A Companion upload, whose size is learnt at completion, takes
		// part numbers up to the store's limit only.
		m, err := small.svc.InitMultipart(ctx, "usr_a", upload.OpenRequest{FileName: "open.bin"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := small.svc.PresignMultipart(ctx, "usr_a", m.S3UploadID, []int{1000}); err != nil {
			t.Fatalf("part 1,000 of a 1,000-part store: %v", err)
		}
		_, err = small.svc.PresignMultipart(ctx, "usr_a", m.S3UploadID, []int{1001})
		wantKind(t, err, errkind.Invalid, "invalid_part_numbers")

		// A maximum above what the parts hold is a configuration error.
		if _, err := upload.New(upload.Config{DB: db.DB, Store: aws.store, Queue: aws.queue, Links: newLinks(t),
			MaxParts: 1000, MaxSize: 1000*5*gib + 1}); err == nil {
			t.Fatal("New accepted a maximum size 1,000 parts cannot hold")
		}
	})
}
