package upload_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/upload"
)

// Grants in the service: only the owner (or a service, owner "") grants a
// file, and only once ferry has verified it; the grantee gets a link
// signed for them; Access tells the proxy, on each request, whether a
// grant holds, was revoked or expired.
func TestDownloadGrants(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		e, verify := newHeldEnv(t, db)
		e.run(t, 5*time.Second)
		ctx := context.Background()
		alice := newClient(t, e, "usr_alice")
		st := alice.uploadAll("a.bin", randomBytes(5*mib+3), false)

		// Merged, not verified yet: it reaches nobody else, so it cannot
		// be granted.
		merged := e.waitDone(alice.user, st.UploadID, 30*time.Second)
		if merged.SHA256Verified {
			t.Fatal("verified while the verification is held")
		}
		_, err := e.svc.CreateGrant(ctx, upload.GrantRequest{Owner: alice.user, FileID: merged.FileID, UserID: "usr_bob", CreatedBy: alice.user})
		wantKind(t, err, errkind.Conflict, "file_not_verified")
		verify()
		fileID := e.waitVerified(alice.user, st.UploadID, 30*time.Second).FileID

		for _, tc := range []struct {
			name string
			r    upload.GrantRequest
			kind *errkind.Kind
			code string
		}{
			{"someone else's file", upload.GrantRequest{Owner: "usr_mallory", FileID: fileID, UserID: "usr_mallory"}, errkind.NotFound, "file_not_found"},
			{"no such file", upload.GrantRequest{Owner: alice.user, FileID: "fil_nope", UserID: "usr_bob"}, errkind.NotFound, "file_not_found"},
			{"to the owner", upload.GrantRequest{Owner: alice.user, FileID: fileID, UserID: alice.user}, errkind.Invalid, "invalid_grantee"},
			{"negative lifetime", upload.GrantRequest{Owner: alice.user, FileID: fileID, UserID: "usr_bob", TTL: -time.Second}, errkind.Invalid, "invalid_expires_in"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := e.svc.CreateGrant(ctx, tc.r)
				wantKind(t, err, tc.kind, tc.code)
			})
		}
		if n := e.count("download_grants", "1 = 1"); n != 0 {
			t.Fatalf("refused grants left %d rows", n)
		}
		if st, _ := e.svc.Access(ctx, fileID, "usr_bob"); st != "" {
			t.Fatalf("access before any grant: %q", st)
		}

		g, err := e.svc.CreateGrant(ctx, upload.GrantRequest{Owner: alice.user, FileID: fileID, UserID: "usr_bob", CreatedBy: alice.user})
		if err != nil || g.State != upload.GrantActive || g.ExpiresAt != nil {
			t.Fatalf("grant %+v %v", g, err)
		}
		link, err := url.Parse(g.DownloadURL)
		if err != nil || link.Path != "/download/"+fileID || link.Query().Get("u") != "usr_bob" {
			t.Fatalf("download_url %q: want a link for the grantee", g.DownloadURL)
		}
		if st, _ := e.svc.Access(ctx, fileID, "usr_bob"); st != upload.GrantActive {
			t.Fatalf("access: %q", st)
		}
		// The grantee, the owner and a service see it; nobody else.
		for _, viewer := range []string{"usr_bob", alice.user, ""} {
			if got, err := e.svc.Grant(ctx, viewer, g.ID); err != nil || got.DownloadURL == "" {
				t.Fatalf("grant as %q: %+v %v", viewer, got, err)
			}
		}
		_, err = e.svc.Grant(ctx, "usr_mallory", g.ID)
		wantKind(t, err, errkind.NotFound, "grant_not_found")
		_, err = e.svc.RevokeGrant(ctx, "usr_bob", g.ID) // the grantee cannot revoke it
		wantKind(t, err, errkind.NotFound, "grant_not_found")
		_, err = e.svc.Grants(ctx, "usr_bob", fileID)
		wantKind(t, err, errkind.NotFound, "file_not_found")

		// A service grants any file, here with a lifetime.
		short, err := e.svc.CreateGrant(ctx, upload.GrantRequest{FileID: fileID, UserID: "usr_carol", CreatedBy: "svk_x", TTL: time.Minute})
		if err != nil || short.ExpiresAt == nil || !strings.Contains(short.DownloadURL, "u=usr_carol") {
			t.Fatalf("service grant %+v %v", short, err)
		}
		if time.Until(short.LinkExpires) > time.Minute+time.Second {
			t.Fatalf("link of a one-minute grant lives until %s", short.LinkExpires)
		}

		if _, err := e.svc.RevokeGrant(ctx, alice.user, g.ID); err != nil {
			t.Fatal(err)
		}
		if again, err := e.svc.RevokeGrant(ctx, alice.user, g.ID); err != nil || again.State != upload.GrantRevoked {
			t.Fatalf("revoke again: %+v %v", again, err)
		}
		if st, _ := e.svc.Access(ctx, fileID, "usr_bob"); st != upload.GrantRevoked {
			t.Fatalf("access after revoke: %q", st)
		}
		if got, _ := e.svc.Grant(ctx, "usr_bob", g.ID); got.DownloadURL != "" {
			t.Fatal("a revoked grant still gives a link")
		}
		e.clock.Advance(time.Minute)
		if st, _ := e.svc.Access(ctx, fileID, "usr_carol"); st != upload.GrantExpired {
			t.Fatalf("access after expiry: %q", st)
		}
		list, err := e.svc.Grants(ctx, alice.user, fileID)
		if err != nil || len(list) != 2 || list[0].State != upload.GrantExpired || list[1].State != upload.GrantRevoked || list[0].DownloadURL != "" {
			t.Fatalf("grants %+v %v", list, err)
		}
		// A new grant after a revoked one holds again.
		if _, err := e.svc.CreateGrant(ctx, upload.GrantRequest{Owner: alice.user, FileID: fileID, UserID: "usr_bob"}); err != nil {
			t.Fatal(err)
		}
		if st, _ := e.svc.Access(ctx, fileID, "usr_bob"); st != upload.GrantActive {
			t.Fatalf("access with a new grant beside a revoked one: %q", st)
		}
		// The file's grants go with it.
		if err := e.svc.DeleteFile(ctx, alice.user, fileID); err != nil {
			t.Fatal(err)
		}
		if n := e.count("download_grants", "file_id = ?", fileID); n != 0 {
			t.Fatalf("%d grants outlived their file", n)
		}
	})
}
