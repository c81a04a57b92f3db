package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
)

// The signing key survives a restart through -key-file, so tokens minted
// before still verify and the JWK Set keeps its kid; and the JWK Set
// publishes exactly the public key the tokens are signed with.
func TestIssuerKeyFileAndJWKS(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "signing.pem")
	a, err := newIssuer("http://127.0.0.1:8090", "ferry", time.Minute, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := a.mint("alice", "alice", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b, err := newIssuer("http://127.0.0.1:8090", "ferry", time.Minute, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if sub, err := b.verify(tok); err != nil || sub != "alice" || b.kid != a.kid {
		t.Fatalf("after a restart: sub %q err %v, kid %s then %s", sub, err, a.kid, b.kid)
	}
	fresh, err := newIssuer("http://127.0.0.1:8090", "ferry", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fresh.verify(tok); err == nil {
		t.Fatal("a new key verified a token of the old one")
	}

	var set jwkset.JWKSMarshal
	if err := json.Unmarshal(a.jwks, &set); err != nil || len(set.Keys) != 1 {
		t.Fatalf("jwks %s: %v", a.jwks, err)
	}
	k := set.Keys[0]
	if k.KTY != jwkset.KtyOKP || k.CRV != jwkset.CrvEd25519 || k.ALG != jwkset.AlgEdDSA || k.KID != a.kid || k.D != "" {
		t.Fatalf("jwk %+v", k)
	}
	parsed, err := jwt.Parse(tok, func(tk *jwt.Token) (any, error) {
		jwk, err := jwkset.NewJWKFromMarshal(k, jwkset.JWKMarshalOptions{}, jwkset.JWKValidateOptions{})
		if err != nil || tk.Header["kid"] != jwk.Marshal().KID {
			t.Fatalf("jwk %v, kid %v", err, tk.Header["kid"])
		}
		return jwk.Key(), nil
	}, jwt.WithValidMethods([]string{"EdDSA"}))
	if err != nil || !parsed.Valid {
		t.Fatalf("the token does not verify with the published key: %v", err)
	}
}

// The app accepts only tokens it minted: its algorithm, issuer and
// audience, not expired.
func TestVerifyRefusesOtherTokens(t *testing.T) {
	iss, err := newIssuer("http://127.0.0.1:8090", "ferry", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	claims := func(kv ...any) jwt.MapClaims {
		c := jwt.MapClaims{"iss": iss.url, "aud": "ferry", "sub": "alice", "exp": now.Add(time.Minute).Unix()}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(c, kv[i].(string))
			} else {
				c[kv[i].(string)] = kv[i+1]
			}
		}
		return c
	}
	sign := func(m jwt.SigningMethod, key any, c jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(m, c).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	for name, tok := range map[string]string{
		"another key":       sign(jwt.SigningMethodEdDSA, other, claims()),
		"HS256, public key": sign(jwt.SigningMethodHS256, []byte(iss.key.Public().(ed25519.PublicKey)), claims()),
		"another issuer":    sign(jwt.SigningMethodEdDSA, iss.key, claims("iss", "http://elsewhere")),
		"another audience":  sign(jwt.SigningMethodEdDSA, iss.key, claims("aud", "not-ferry")),
		"expired":           sign(jwt.SigningMethodEdDSA, iss.key, claims("exp", now.Add(-time.Minute).Unix())),
		"no expiry":         sign(jwt.SigningMethodEdDSA, iss.key, claims("exp", nil)),
	} {
		if sub, err := iss.verify(tok); err == nil {
			t.Errorf("%s: accepted as %q", name, sub)
		}
	}
	if sub, err := iss.verify(sign(jwt.SigningMethodEdDSA, iss.key, claims())); err != nil || sub != "alice" {
		t.Fatalf("a good token: %q %v", sub, err)
	}
}

func TestParseConfig(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{}, "-service-key"},
		{[]string{"-service-key", "fsk_x", "-users", "alice"}, "at least two users"},
		{[]string{"-service-key", "fsk_x", "-max-upload-size", "-1"}, "-max-upload-size"},
		{[]string{"-service-key", "fsk_x", "-ticket-ttl", "soon"}, "-ticket-ttl"},
		{[]string{"-service-key", "fsk_x", "-token-ttl", "1s"}, "-token-ttl"},
	} {
		t.Setenv("BACKEND_SERVICE_KEY", "")
		if _, err := parseConfig(tc.args); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%v: %v, want an error naming %s", tc.args, err, tc.err)
		}
	}
	t.Setenv("BACKEND_SERVICE_KEY", "fsk_env")
	c, err := parseConfig([]string{"-addr", "127.0.0.1:9999", "-ferry-url", "http://ferry:8080/"})
	if err != nil {
		t.Fatal(err)
	}
	if c.ServiceKey != "fsk_env" || c.PublicURL != "http://127.0.0.1:9999" || c.FerryURL != "http://ferry:8080" || len(c.Users) != 3 {
		t.Fatalf("config %+v", c)
	}
}

// Post ids go into ticket metadata and log lines; the app refuses any
// other shape before it calls ferry, and refuses callers it did not sign
// in.
func TestRoutesRefuseBadRequests(t *testing.T) {
	iss, err := newIssuer("http://127.0.0.1:8090", "ferry", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	a := &app{log: slog.New(slog.NewTextHandler(io.Discard, nil)), users: []string{"alice", "bob"}, issuer: iss, posts: newPosts()}
	srv := httptest.NewServer(a.routes(http.NotFoundHandler()))
	defer srv.Close()
	do := func(method, path, token, body string) int {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := do("POST", "/login", "", `{"user":"mallory"}`); code != 401 {
		t.Fatalf("login of a stranger: %d", code)
	}
	alice, _, _ := iss.mint("alice", "alice", time.Now())
	stranger, _, _ := iss.mint("mallory", "mallory", time.Now())
	for _, tc := range []struct {
		method, path, token, body string
		want                      int
	}{
		{"POST", "/posts/42/upload-ticket", "", "", 401},
		{"POST", "/posts/42/upload-ticket", "not-a-jwt", "", 401},
		{"POST", "/posts/42/upload-ticket", stranger, "", 401},
		{"POST", "/posts/a.b/upload-ticket", alice, "", 400},
		{"POST", "/posts/" + strings.Repeat("x", 65) + "/upload-ticket", alice, "", 400},
		{"GET", "/posts/42", alice, "", 200},
		{"POST", "/posts/42/files/fil_1/grants", alice, `{"user":"bob"}`, 404},
		{"POST", "/posts/42/files/fil_1/grants", alice, `{"user":`, 400},
		{"DELETE", "/posts/42/files/fil_1/grants/grt_1", alice, "", 404},
	} {
		if got := do(tc.method, tc.path, tc.token, tc.body); got != tc.want {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, got, tc.want)
		}
	}
}
