package upload_test

import (
	"context"
	"testing"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/upload"
)

// Each entry point records its kind with the upload; the rules that differ
// by kind read it instead of guessing from a zero size or an empty
// multipart upload id.
func TestUploadsRecordTheirKind(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e := newEnv(t, db, nil)
		ctx := context.Background()
		native, err := e.svc.Init(ctx, "usr_a", upload.InitRequest{FileName: "n.bin", Size: 10})
		if err != nil {
			t.Fatal(err)
		}
		companion, err := e.svc.InitMultipart(ctx, "usr_a", upload.OpenRequest{FileName: "c.bin"})
		if err != nil {
			t.Fatal(err)
		}
		post, err := e.svc.InitPost(ctx, "usr_a", upload.OpenRequest{FileName: "p.png", ContentType: "image/png"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for id, want := range map[string]string{
			native.Upload.UploadID: upload.KindNative, companion.UploadID: upload.KindCompanion, post.UploadID: upload.KindPost,
		} {
			var kind string
			if err := db.DB.Model(&models.Upload{}).Where("id = ?", id).Pluck("kind", &kind).Error; err != nil || kind != want {
				t.Errorf("upload %s has kind %q (%v), want %q", id, kind, err, want)
			}
		}
	})
}
