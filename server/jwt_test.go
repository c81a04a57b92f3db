package server_test

import (
	"encoding/json"
	"testing"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/server"
	"github.com/ferry-io/ferry/users"
)

func jwtFixture(t *testing.T, db *testenv.DB, iss *testenv.Issuer, adminClaim string) *fixture {
	t.Helper()
	v, err := users.NewJWTVerifier(t.Context(), users.JWTConfig{
		Issuer: iss.Issuer, Audience: iss.Audience, JWKSURL: iss.JWKSURL, AdminClaim: adminClaim, Log: testenv.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	return newFixtureWith(t, db, func(d *server.Deps) { d.JWT = v })
}

type meAnswer struct {
	ID, Name, Issuer, Subject string
	Admin                     bool
}

func (f *fixture) me(t *testing.T, tok string) meAnswer {
	t.Helper()
	r := f.do(t, "GET", "/me", "", bearerOf(tok))
	var m meAnswer
	if err := json.NewDecoder(r.Body).Decode(&m); err != nil || r.StatusCode != 200 {
		t.Fatalf("GET /me: %d %v", r.StatusCode, err)
	}
	return m
}

// Issue 14: a host app's JWT is the ferry user for (iss, sub), made on
// first sight, with issuer and subject in GET /me. Every bad token is a
// 401 problem whose code says why, and makes no user. Deactivation in
// ferry stops the user's JWTs at once; ferry's own tokens keep working.
func TestJWTAuthentication(t *testing.T) {
	testenv.ForEachDB(t, func(t *testing.T, db *testenv.DB) {
		iss := testenv.NewIssuer(t)
		f := jwtFixture(t, db, iss, "")
		bad := iss.BadTokens(t)
		var before int64
		db.Model(&models.User{}).Count(&before)
		for _, c := range bad {
			t.Run(c.Name, func(t *testing.T) {
				problemOf(t, f.do(t, "GET", "/me", "", bearerOf(c.Token)), 401, c.Code)
			})
		}
		var after int64
		db.Model(&models.User{}).Count(&after)
		if after != before {
			t.Fatalf("bad tokens made %d users", after-before)
		}

		tok := iss.Mint(t, "rsa1", testenv.With(iss.Claims("user-42"), "name", "Ada Lovelace"))
		m := f.me(t, tok)
		if m.Issuer != iss.Issuer || m.Subject != "user-42" || m.Name != "Ada Lovelace" || m.Admin {
			t.Fatalf("GET /me = %+v", m)
		}
		if again := f.me(t, iss.Mint(t, "ec1", iss.Claims("user-42"))); again.ID != m.ID || again.Name != "user-42" {
			t.Fatalf("second token: %+v, want the same user %s named after its subject", again, m.ID)
		}
		if own := f.me(t, f.admin); own.Issuer != "" || own.Subject != "" || !own.Admin {
			t.Fatalf("ferry's own token alongside: %+v", own)
		}
		// Without an admin claim configured, no token makes an admin.
		admin := iss.Mint(t, "rsa1", testenv.With(iss.Claims("user-42"), "ferry_admin", true))
		problemOf(t, f.do(t, "GET", "/admin/users", "", bearerOf(admin)), 403, "admin_only")

		if r := f.do(t, "POST", "/admin/users/"+m.ID+"/deactivate", "", bearerOf(f.admin)); r.StatusCode != 200 {
			t.Fatalf("deactivate: %d", r.StatusCode)
		}
		problemOf(t, f.do(t, "GET", "/me", "", bearerOf(tok)), 401, "user_deactivated")
		f.do(t, "POST", "/admin/users/"+m.ID+"/activate", "", bearerOf(f.admin))
		f.me(t, tok)
	})
}

// FERRY_JWT_ADMIN_CLAIM: the claim, while true, makes the user an
// administrator; a later token without it takes that away.
func TestJWTAdminClaim(t *testing.T) {
	db := testenv.NewDB(t, "sqlite")
	iss := testenv.NewIssuer(t)
	f := jwtFixture(t, db, iss, "ferry_admin")
	admin := iss.Mint(t, "rsa1", testenv.With(iss.Claims("ops-1"), "ferry_admin", true))
	if r := f.do(t, "GET", "/admin/users", "", bearerOf(admin)); r.StatusCode != 200 {
		t.Fatalf("admin claim true: GET /admin/users = %d", r.StatusCode)
	}
	plain := iss.Mint(t, "rsa1", iss.Claims("ops-1"))
	problemOf(t, f.do(t, "GET", "/admin/users", "", bearerOf(plain)), 403, "admin_only")
	if m := f.me(t, plain); m.Admin {
		t.Fatalf("still admin without the claim: %+v", m)
	}
}

// Without FERRY_JWT_ISSUER a JWT is refused with a code that says so.
func TestJWTNotConfigured(t *testing.T) {
	db := testenv.NewDB(t, "sqlite")
	iss := testenv.NewIssuer(t)
	f := newFixture(t, db)
	problemOf(t, f.do(t, "GET", "/me", "", bearerOf(iss.Mint(t, "rsa1", iss.Claims("x")))), 401, "jwt_not_accepted")
}
