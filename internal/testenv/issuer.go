package testenv

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
)

// Issuer is a host app's identity provider for tests: signing keys by kid,
// a JWK Set of the published ones served on 127.0.0.1, and Mint to sign
// tokens. Keys "rsa1" (RS256), "ec1" (ES256) and "ed1" (EdDSA) exist from
// the start; "rsa1" and "ec1" are published.
type Issuer struct {
	Issuer   string // the iss Mint puts in by default
	Audience string // the aud Mint puts in by default
	JWKSURL  string

	mu        sync.Mutex
	keys      map[string]crypto.Signer
	secrets   map[string][]byte // symmetric ("oct") keys, for HS* attacks
	published []string
	fetches   atomic.Int64
}

// NewIssuer starts an Issuer whose JWK Set server stops with the test.
func NewIssuer(t testing.TB) *Issuer {
	t.Helper()
	i := &Issuer{Issuer: "https://app.example.test/", Audience: "ferry", keys: map[string]crypto.Signer{}, secrets: map[string][]byte{}}
	i.AddKey(t, "rsa1", "RS256")
	i.AddKey(t, "ec1", "ES256")
	i.AddKey(t, "ed1", "EdDSA")
	i.Publish("rsa1", "ec1")
	srv := httptest.NewServer(http.HandlerFunc(i.serveJWKS))
	t.Cleanup(srv.Close)
	i.JWKSURL = srv.URL + "/.well-known/jwks.json"
	return i
}

// AddKey makes a key pair for alg (RS256, ES256 or EdDSA) under kid,
// unpublished.
func (i *Issuer) AddKey(t testing.TB, kid, alg string) {
	t.Helper()
	var k crypto.Signer
	var err error
	switch alg {
	case "RS256":
		k, err = rsa.GenerateKey(rand.Reader, 2048)
	case "ES256":
		k, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "EdDSA":
		_, k, err = ed25519.GenerateKey(rand.Reader)
	default:
		t.Fatalf("testenv: no key type for %s", alg)
	}
	if err != nil {
		t.Fatal(err)
	}
	i.mu.Lock()
	i.keys[kid] = k
	i.mu.Unlock()
}

// AddSecret adds a symmetric key under kid, unpublished. A JWK Set that
// publishes one hands its secret to anyone, so a verifier must never take
// HS* tokens on its strength.
func (i *Issuer) AddSecret(kid string, secret []byte) {
	i.mu.Lock()
	i.secrets[kid] = secret
	i.mu.Unlock()
}

// Publish replaces the served JWK Set with the public halves of kids.
func (i *Issuer) Publish(kids ...string) {
	i.mu.Lock()
	i.published = kids
	i.mu.Unlock()
}

// Fetches counts the JWK Set requests served so far.
func (i *Issuer) Fetches() int64 { return i.fetches.Load() }

func (i *Issuer) serveJWKS(w http.ResponseWriter, r *http.Request) {
	i.fetches.Add(1)
	i.mu.Lock()
	defer i.mu.Unlock()
	set := jwkset.JWKSMarshal{}
	for _, kid := range i.published {
		var key any = i.secrets[kid]
		if k, ok := i.keys[kid]; ok {
			key = k.Public()
		}
		j, err := jwkset.NewJWKFromKey(key, jwkset.JWKOptions{
			Metadata: jwkset.JWKMetadataOptions{KID: kid, USE: jwkset.UseSig},
			Marshal:  jwkset.JWKMarshalOptions{Private: true}, // only oct keys have a private part here
		})
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		set.Keys = append(set.Keys, j.Marshal())
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(set)
}

// PublicPEM returns kid's public key as a PEM PUBLIC KEY block.
func (i *Issuer) PublicPEM(t testing.TB, kid string) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(i.key(kid).Public())
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

func (i *Issuer) key(kid string) crypto.Signer {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.keys[kid]
}

// Claims are the claims of a good token for sub: this issuer, its
// audience, issued now, expiring in five minutes.
func (i *Issuer) Claims(sub string) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{"iss": i.Issuer, "aud": i.Audience, "sub": sub, "iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix()}
}

// Mint signs claims with kid's key, with kid in the header.
func (i *Issuer) Mint(t testing.TB, kid string, claims jwt.MapClaims) string {
	t.Helper()
	k := i.key(kid)
	var m jwt.SigningMethod
	switch k.(type) {
	case *rsa.PrivateKey:
		m = jwt.SigningMethodRS256
	case *ecdsa.PrivateKey:
		m = jwt.SigningMethodES256
	case ed25519.PrivateKey:
		m = jwt.SigningMethodEdDSA
	}
	tok := jwt.NewWithClaims(m, claims)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// With returns a copy of claims with the changes in kv (name, value,
// name, value…) applied; a nil value deletes the claim.
func With(claims jwt.MapClaims, kv ...any) jwt.MapClaims {
	out := jwt.MapClaims{}
	for k, v := range claims {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
		} else {
			out[kv[i].(string)] = kv[i+1]
		}
	}
	return out
}

// BadToken is a token ferry must refuse, and the code it must say.
type BadToken struct{ Name, Token, Code string }

// BadTokens are one token for each way a JWT can be wrong, each for a
// subject of its own ("bad-N"), so a test can check that none made a
// user. It publishes a symmetric key "hs1" beside rsa1 and ec1: HS256
// with it must be refused too.
func (i *Issuer) BadTokens(t testing.TB) []BadToken {
	t.Helper()
	secret := []byte("a symmetric key published by mistake")
	i.AddSecret("hs1", secret)
	i.Publish("rsa1", "ec1", "hs1")
	now := time.Now()
	n := 0
	claims := func(kv ...any) jwt.MapClaims {
		n++
		return With(i.Claims(fmt.Sprintf("bad-%d", n)), kv...)
	}
	sign := func(m jwt.SigningMethod, kid string, key any, c jwt.MapClaims) string {
		tok := jwt.NewWithClaims(m, c)
		if kid != "" {
			tok.Header["kid"] = kid
		}
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	valid := strings.Split(i.Mint(t, "rsa1", claims()), ".")
	swapped := strings.Split(i.Mint(t, "rsa1", claims()), ".")[1]
	return []BadToken{
		{"alg none", sign(jwt.SigningMethodNone, "", jwt.UnsafeAllowNoneSignatureType, claims()), "jwt_bad_algorithm"},
		{"alg confusion: the RS256 public key as an HS256 secret", sign(jwt.SigningMethodHS256, "rsa1", []byte(i.PublicPEM(t, "rsa1")), claims()), "jwt_bad_algorithm"},
		{"HS256 with a symmetric key the JWK Set publishes", sign(jwt.SigningMethodHS256, "hs1", secret, claims()), "jwt_bad_algorithm"},
		{"RS384", sign(jwt.SigningMethodRS384, "rsa1", other, claims()), "jwt_bad_algorithm"},
		{"wrong issuer", i.Mint(t, "rsa1", claims("iss", "https://evil.example/")), "jwt_wrong_issuer"},
		{"no issuer", i.Mint(t, "rsa1", claims("iss", nil)), "jwt_wrong_issuer"},
		{"wrong audience", i.Mint(t, "rsa1", claims("aud", "another-service")), "jwt_wrong_audience"},
		{"no audience", i.Mint(t, "rsa1", claims("aud", nil)), "jwt_wrong_audience"},
		{"no subject", i.Mint(t, "rsa1", claims("sub", nil)), "jwt_no_subject"},
		{"empty subject", i.Mint(t, "rsa1", claims("sub", "")), "jwt_no_subject"},
		{"subject over 255 bytes", i.Mint(t, "rsa1", claims("sub", strings.Repeat("s", 256))), "jwt_no_subject"},
		{"expired past the 60 s leeway", i.Mint(t, "ec1", claims("exp", now.Add(-61*time.Second).Unix())), "jwt_expired"},
		{"not valid yet past the leeway", i.Mint(t, "ec1", claims("nbf", now.Add(90*time.Second).Unix())), "jwt_not_yet_valid"},
		{"issued in the future past the leeway", i.Mint(t, "ec1", claims("iat", now.Add(90*time.Second).Unix())), "jwt_not_yet_valid"},
		{"no expiry", i.Mint(t, "ec1", claims("exp", nil)), "jwt_no_expiry"},
		{"exp of the wrong type", i.Mint(t, "ec1", claims("exp", "tomorrow")), "jwt_bad_claims"},
		{"signed by another key under a known kid", sign(jwt.SigningMethodRS256, "rsa1", other, claims()), "jwt_bad_signature"},
		{"payload swapped under a signature", valid[0] + "." + swapped + "." + valid[2], "jwt_bad_signature"},
		{"unknown kid", i.Mint(t, "ed1", claims()), "jwt_unknown_key"},
		{"not a JWT at all", "a.b.c", "jwt_malformed"},
		{"over 8 KiB", "eyJ" + strings.Repeat("a", 9000) + ".b.c", "jwt_malformed"},
	}
}
