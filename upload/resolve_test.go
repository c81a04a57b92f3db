package upload_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ferry-io/ferry/download"
	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/upload"
)

// The download proxy's resolver for files: the owner always; someone else
// on an active grant or when canSee admits them, and only once the file is
// verified; a revoked or expired grant is 410, anything else 403.
func TestFileResolver(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e, verify := newHeldEnv(t, db)
		e.run(t, 5*time.Second)
		ctx := context.Background()
		alice := newClient(t, e, "usr_alice")
		st := alice.uploadAll("a.bin", randomBytes(5*mib+3), false)
		fileID := e.waitDone(alice.user, st.UploadID, 30*time.Second).FileID
		seers := map[string]bool{"usr_reader": true}
		r := e.svc.Resolver(func(_ context.Context, userID, id string) (bool, error) { return id == fileID && seers[userID], nil })

		res, err := r.Resolve(ctx, fileID, alice.user)
		if err != nil || res.SHA256 != "" || res.StoreETag == "" {
			t.Fatalf("owner before verification: %+v %v; want the bytes tagged with the store's ETag", res, err)
		}
		if _, err := r.Resolve(ctx, fileID, "usr_reader"); !errors.Is(err, errkind.Conflict) {
			t.Fatalf("a reader before verification: %v, want file_not_verified", err)
		}
		verify()
		e.waitVerified(alice.user, st.UploadID, 30*time.Second)

		_, err = e.svc.CreateGrant(ctx, upload.GrantRequest{Owner: alice.user, FileID: fileID, UserID: "usr_carol", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		g, err := e.svc.CreateGrant(ctx, upload.GrantRequest{Owner: alice.user, FileID: fileID, UserID: "usr_bob"})
		if err != nil {
			t.Fatal(err)
		}
		for _, user := range []string{alice.user, "usr_reader", "usr_bob", "usr_carol"} {
			if res, err := r.Resolve(ctx, fileID, user); err != nil || res.SHA256 == "" || res.Key == "" {
				t.Fatalf("%s: %+v %v", user, res, err)
			}
		}
		if _, err := e.svc.RevokeGrant(ctx, alice.user, g.ID); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Minute)
		for _, tc := range []struct {
			user string
			want error
		}{
			{"usr_bob", download.ErrRevoked},
			{"usr_carol", download.ErrExpired},
			{"usr_mallory", download.ErrForbidden},
		} {
			if _, err := r.Resolve(ctx, fileID, tc.user); !errors.Is(err, tc.want) {
				t.Fatalf("%s: %v, want %v", tc.user, err, tc.want)
			}
		}
		seers["usr_bob"] = true // a revoked grant does not outweigh a message he can see
		if _, err := r.Resolve(ctx, fileID, "usr_bob"); err != nil {
			t.Fatalf("usr_bob seeing the attachment: %v", err)
		}
		if _, err := r.Resolve(ctx, "fil_nope", alice.user); !errors.Is(err, download.ErrNotFound) {
			t.Fatalf("no such file: %v", err)
		}
	})
}
