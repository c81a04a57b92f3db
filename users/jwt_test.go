package users_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ferry-io/ferry/config"
	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/users"
)

func jwksVerifier(t *testing.T, iss *testenv.Issuer, edit func(*users.JWTConfig)) *users.JWTVerifier {
	t.Helper()
	cfg := users.JWTConfig{Issuer: iss.Issuer, Audience: iss.Audience, JWKSURL: iss.JWKSURL, Log: testenv.Logger(t)}
	if edit != nil {
		edit(&cfg)
	}
	v, err := users.NewJWTVerifier(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// wantCode checks that err is the *errkind.Error of kind and code.
func wantCode(t *testing.T, err error, kind *errkind.Kind, code string) {
	t.Helper()
	var e *errkind.Error
	if !errors.As(err, &e) || e.Kind != kind || e.Code != code {
		t.Fatalf("error %v, want %s %s", err, kind, code)
	}
}

// Issue 14, done-when 1: with a JWK Set of two keys, tokens signed with
// either are accepted. After the issuer rotates to a new key, a token
// with it is accepted on the refetch its unknown kid causes; the next
// unknown kid within the minute is refused at once, without a fetch.
func TestJWTFromJWKSAndRotation(t *testing.T) {
	iss := testenv.NewIssuer(t)
	v := jwksVerifier(t, iss, func(c *users.JWTConfig) { c.AdminClaim = "ferry_admin" })
	ctx := t.Context()
	if n := iss.Fetches(); n != 1 {
		t.Fatalf("%d fetches at start, want 1", n)
	}
	for _, kid := range []string{"rsa1", "ec1"} {
		id, err := v.Verify(ctx, iss.Mint(t, kid, testenv.With(iss.Claims("u-"+kid), "name", " Ada\x00 Lovelace ", "ferry_admin", true)))
		if err != nil {
			t.Fatalf("%s: %v", kid, err)
		}
		if id.Issuer != iss.Issuer || id.Subject != "u-"+kid || id.Name != "Ada Lovelace" || id.Admin == nil || !*id.Admin {
			t.Fatalf("%s: identity %+v", kid, id)
		}
	}
	if id, err := v.Verify(ctx, iss.Mint(t, "rsa1", testenv.With(iss.Claims("u2"), "ferry_admin", "true"))); err != nil || *id.Admin {
		t.Fatalf("admin claim \"true\" (a string): %+v %v; only the JSON true counts", id, err)
	}

	iss.Publish("ed1")
	start := time.Now()
	if _, err := v.Verify(ctx, iss.Mint(t, "ed1", iss.Claims("u3"))); err != nil {
		t.Fatalf("token with the rotated-in key: %v", err)
	}
	if n := iss.Fetches(); n != 2 {
		t.Fatalf("%d fetches after rotation, want 2", n)
	}
	// rsa1 left the set with that refetch; ec2 was never in it. Neither
	// may fetch again within the minute, and neither waits for one.
	iss.AddKey(t, "ec2", "ES256")
	for _, kid := range []string{"rsa1", "ec2"} {
		_, err := v.Verify(ctx, iss.Mint(t, kid, iss.Claims("u4")))
		wantCode(t, err, errkind.Unauthenticated, "jwt_unknown_key")
	}
	if n := iss.Fetches(); n != 2 || time.Since(start) > 3*time.Second {
		t.Fatalf("%d fetches and %s after unknown kids, want 2 and no waiting", n, time.Since(start))
	}
}

// After the limit's minute, an unknown kid refetches again (here the
// minute is shortened).
func TestJWKSRefetchEveryPeriod(t *testing.T) {
	iss := testenv.NewIssuer(t)
	v := jwksVerifier(t, iss, func(c *users.JWTConfig) { c.RefreshUnknownKID = 200 * time.Millisecond })
	ctx := t.Context()
	iss.Publish("ed1")
	if _, err := v.Verify(ctx, iss.Mint(t, "ed1", iss.Claims("u"))); err != nil {
		t.Fatal(err)
	}
	iss.AddKey(t, "ec2", "ES256")
	iss.Publish("ec2")
	time.Sleep(250 * time.Millisecond)
	if _, err := v.Verify(ctx, iss.Mint(t, "ec2", iss.Claims("u"))); err != nil {
		t.Fatalf("second rotation after the period: %v", err)
	}
	if n := iss.Fetches(); n != 3 {
		t.Fatalf("%d fetches, want 3", n)
	}
}

// Every bad token gets its own code. The RS256 public key used as an
// HS256 secret (algorithm confusion) is refused like "none", and so is
// HS256 with a symmetric key the JWK Set publishes.
func TestJWTRefusals(t *testing.T) {
	iss := testenv.NewIssuer(t)
	bad := iss.BadTokens(t)
	v := jwksVerifier(t, iss, nil)
	ctx := t.Context()
	for _, c := range bad {
		t.Run(c.Name, func(t *testing.T) {
			_, err := v.Verify(ctx, c.Token)
			wantCode(t, err, errkind.Unauthenticated, c.Code)
		})
	}
	// Within the 60 s leeway, time claims pass.
	now := time.Now()
	good := iss.Claims("alice")
	for name, claims := range map[string]jwt.MapClaims{
		"expired 30 s ago": testenv.With(good, "exp", now.Add(-30*time.Second).Unix()),
		"valid in 30 s":    testenv.With(good, "nbf", now.Add(30*time.Second).Unix()),
		"issued in 30 s":   testenv.With(good, "iat", now.Add(30*time.Second).Unix()),
	} {
		if _, err := v.Verify(ctx, iss.Mint(t, "rsa1", claims)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FERRY_JWT_KEYS: PEM keys have no kid; a token is tried against the keys
// of its algorithm.
func TestJWTFromPEMKeys(t *testing.T) {
	iss := testenv.NewIssuer(t)
	keys, err := config.ParsePublicKeys(iss.PublicPEM(t, "rsa1") + iss.PublicPEM(t, "ed1"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := users.NewJWTVerifier(t.Context(), users.JWTConfig{Issuer: iss.Issuer, Audience: iss.Audience, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, kid := range []string{"rsa1", "ed1"} {
		if _, err := v.Verify(ctx, iss.Mint(t, kid, iss.Claims("bob"))); err != nil {
			t.Errorf("%s: %v", kid, err)
		}
	}
	_, err = v.Verify(ctx, iss.Mint(t, "ec1", iss.Claims("bob")))
	wantCode(t, err, errkind.Unauthenticated, "jwt_unknown_key")
	_, otherEd, _ := ed25519.GenerateKey(rand.Reader)
	tok, _ := jwt.NewWithClaims(jwt.SigningMethodEdDSA, iss.Claims("bob")).SignedString(otherEd)
	_, err = v.Verify(ctx, tok)
	wantCode(t, err, errkind.Unauthenticated, "jwt_bad_signature")
	if fetches := iss.Fetches(); fetches != 0 {
		t.Fatalf("PEM keys fetched the JWK Set %d times", fetches)
	}
}

// A JWK Set that cannot be fetched at start-up does not stop ferry, and
// while no key was ever fetched, tokens get 503, not a 401 blaming them.
func TestJWKSUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/jwks"
	ln.Close()
	iss := testenv.NewIssuer(t)
	v, err := users.NewJWTVerifier(context.Background(), users.JWTConfig{Issuer: iss.Issuer, Audience: iss.Audience, JWKSURL: url})
	if err != nil {
		t.Fatalf("start-up with the JWK Set down: %v", err)
	}
	_, err = v.Verify(t.Context(), iss.Mint(t, "rsa1", iss.Claims("carol")))
	wantCode(t, err, errkind.Unavailable, "jwks_unavailable")
}
