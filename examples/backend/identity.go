package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
)

// issuer is the app as an identity provider: one Ed25519 key, the JWK Set
// that publishes it, and the tokens it signs. ferry checks those tokens
// with the JWK Set; the app checks them with the key itself.
type issuer struct {
	url      string // iss: must equal ferry's FERRY_JWT_ISSUER exactly
	audience string // aud: must name ferry's FERRY_JWT_AUDIENCE
	ttl      time.Duration
	kid      string
	key      ed25519.PrivateKey
	jwks     []byte // the served JWK Set, built once: the key never changes while the app runs
}

// newIssuer loads the signing key from keyFile, creating the file with a
// new key when it does not exist, so that tokens survive a restart. An
// empty keyFile means a new key on every start.
func newIssuer(url, audience string, ttl time.Duration, keyFile string) (*issuer, error) {
	key, err := loadOrCreateKey(keyFile)
	if err != nil {
		return nil, err
	}
	pub := key.Public().(ed25519.PublicKey)
	// The kid names the key, so that a JWK Set holding an old and a new
	// key during a rotation tells ferry which one signed a token. A hash
	// of the public key is stable across restarts and needs no bookkeeping.
	sum := sha256.Sum256(pub)
	kid := hex.EncodeToString(sum[:8])
	// jwkset writes the JWK (kty OKP, crv Ed25519, x) the way RFC 8037
	// says; ferry reads it with the same library's sibling, keyfunc.
	jwk, err := jwkset.NewJWKFromKey(pub, jwkset.JWKOptions{
		Metadata: jwkset.JWKMetadataOptions{KID: kid, ALG: jwkset.AlgEdDSA, USE: jwkset.UseSig},
	})
	if err != nil {
		return nil, fmt.Errorf("jwk: %w", err)
	}
	set, err := json.Marshal(jwkset.JWKSMarshal{Keys: []jwkset.JWKMarshal{jwk.Marshal()}})
	if err != nil {
		return nil, err
	}
	return &issuer{url: url, audience: audience, ttl: ttl, kid: kid, key: key, jwks: set}, nil
}

func loadOrCreateKey(path string) (ed25519.PrivateKey, error) {
	if path != "" {
		b, err := os.ReadFile(path)
		if err == nil {
			return parseKey(b)
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	if path == "" {
		return key, nil
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	// O_EXCL: two instances started at once must not each write a key and
	// sign with different ones.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: der}); err != nil {
		return nil, err
	}
	return key, f.Close()
}

func parseKey(b []byte) (ed25519.PrivateKey, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, errors.New("key file: want a PEM PRIVATE KEY block (PKCS #8)")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	ed, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("key file: want an Ed25519 key, not %T", k)
	}
	return ed, nil
}

// mint signs a token for one of the app's users. sub is the user's id in
// the app, which ferry keeps as the subject of its user; name is what
// ferry shows. ferry requires exp; it also checks iss and aud.
func (i *issuer) mint(sub, name string, now time.Time) (token string, expires time.Time, err error) {
	expires = now.Add(i.ttl)
	t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{
		"iss":  i.url,
		"aud":  i.audience,
		"sub":  sub,
		"name": name,
		"iat":  now.Unix(),
		"exp":  expires.Unix(),
	})
	t.Header["kid"] = i.kid
	token, err = t.SignedString(i.key)
	return token, expires, err
}

// verify checks a token the app minted and returns its subject. Only
// EdDSA is accepted: a verifier that lets the token choose its algorithm
// can be fooled into checking an HMAC with a public key.
func (i *issuer) verify(token string) (string, error) {
	t, err := jwt.Parse(token, func(*jwt.Token) (any, error) { return i.key.Public(), nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodEdDSA.Alg()}),
		jwt.WithIssuer(i.url), jwt.WithAudience(i.audience), jwt.WithExpirationRequired())
	if err != nil {
		return "", err
	}
	return t.Claims.GetSubject()
}
