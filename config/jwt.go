package config

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
)

// JWT is how ferry trusts the host app's identity provider (FERRY_JWT_*).
// With Issuer empty, ferry accepts no JWTs.
type JWT struct {
	Issuer   string // FERRY_JWT_ISSUER: the iss every token must carry
	Audience string // FERRY_JWT_AUDIENCE: an aud every token must carry
	// JWKSURL is FERRY_JWT_JWKS_URL: where the provider publishes its keys.
	JWKSURL string
	// Keys are FERRY_JWT_KEYS: PEM public keys given instead of a JWKS URL.
	Keys []crypto.PublicKey
	// AdminClaim is FERRY_JWT_ADMIN_CLAIM: a claim that makes the user an
	// administrator when it is true. Empty: no token makes anyone one.
	AdminClaim string
}

// Enabled reports whether ferry accepts JWTs.
func (j JWT) Enabled() bool { return j.Issuer != "" }

// jwtSettings are the FERRY_JWT_* variables, in order: each checks itself
// against the ones before it, so an incomplete set names what is missing.
func jwtSettings() []setting {
	return []setting{
		{"FERRY_JWT_ISSUER", "", func(c *Config, v string) error {
			if v != "" && strings.ContainsFunc(v, isSpaceOrControl) {
				return fmt.Errorf("%q has spaces or control characters", v)
			}
			c.JWT.Issuer = v
			return nil
		}},
		{"FERRY_JWT_AUDIENCE", "", func(c *Config, v string) error {
			c.JWT.Audience = v
			switch {
			case v == "" && c.JWT.Enabled():
				return errors.New("required with FERRY_JWT_ISSUER: tokens meant for another service must be refused")
			case v != "" && !c.JWT.Enabled():
				return errors.New("set FERRY_JWT_ISSUER too")
			}
			return nil
		}},
		{"FERRY_JWT_JWKS_URL", "", func(c *Config, v string) error {
			if v == "" {
				return nil
			}
			if !c.JWT.Enabled() {
				return errors.New("set FERRY_JWT_ISSUER too")
			}
			if err := checkJWKSURL(v); err != nil {
				return err
			}
			c.JWT.JWKSURL = v
			return nil
		}},
		{"FERRY_JWT_KEYS", "", func(c *Config, v string) error {
			switch {
			case v == "" && c.JWT.Enabled() && c.JWT.JWKSURL == "":
				return errors.New("FERRY_JWT_ISSUER is set: give the issuer's keys in FERRY_JWT_KEYS or FERRY_JWT_JWKS_URL")
			case v == "":
				return nil
			case !c.JWT.Enabled():
				return errors.New("set FERRY_JWT_ISSUER too")
			case c.JWT.JWKSURL != "":
				return errors.New("set FERRY_JWT_KEYS or FERRY_JWT_JWKS_URL, not both")
			}
			keys, err := ParsePublicKeys(v)
			c.JWT.Keys = keys
			return err
		}},
		{"FERRY_JWT_ADMIN_CLAIM", "", func(c *Config, v string) error {
			if v != "" && !c.JWT.Enabled() {
				return errors.New("set FERRY_JWT_ISSUER too")
			}
			if strings.ContainsFunc(v, isSpaceOrControl) {
				return fmt.Errorf("%q is not a claim name", v)
			}
			c.JWT.AdminClaim = v
			return nil
		}},
	}
}

func isSpaceOrControl(r rune) bool { return r <= ' ' || r == 0x7f }

// checkJWKSURL allows https:// anywhere and http:// only on a loopback
// host (a sidecar, a test): keys fetched in the clear from elsewhere could
// be swapped on the way, and whoever swaps them mints any user.
func checkJWKSURL(v string) error {
	u, err := url.Parse(v)
	if err != nil || u.Host == "" || u.User != nil || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("want an https:// URL such as https://auth.example.com/.well-known/jwks.json, got %q", v)
	}
	if u.Scheme == "http" && !loopbackHost(u.Hostname()) {
		return fmt.Errorf("%q: http:// is allowed only on a loopback address (127.0.0.1, ::1, localhost); use https://", v)
	}
	return nil
}

func loopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// ParsePublicKeys reads FERRY_JWT_KEYS: one or more PEM blocks inline
// (newlines may be written as \n, as env files often need), or the path of
// a file holding them. Each block is a PUBLIC KEY (RSA, P-256 or Ed25519),
// an RSA PUBLIC KEY or a CERTIFICATE, whose key is used. A private key is
// refused: ferry never needs one, and it should not sit in its settings.
func ParsePublicKeys(v string) ([]crypto.PublicKey, error) {
	data := []byte(v)
	if !strings.Contains(v, "-----BEGIN") {
		b, err := os.ReadFile(v)
		if err != nil {
			return nil, fmt.Errorf("neither PEM nor a readable file: %w", err)
		}
		data = b
	} else if !strings.Contains(v, "\n") {
		data = []byte(strings.ReplaceAll(v, `\n`, "\n"))
	}
	var keys []crypto.PublicKey
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			if len(bytes.TrimSpace(rest)) > 0 {
				return nil, fmt.Errorf("key %d: not a PEM block", len(keys)+1)
			}
			break
		}
		k, err := publicKeyOf(b)
		if err != nil {
			return nil, fmt.Errorf("key %d: %w", len(keys)+1, err)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("no PEM public key found")
	}
	return keys, nil
}

// publicKeyOf parses one PEM block and checks that it is a key for RS256,
// ES256 or EdDSA, the algorithms ferry accepts.
func publicKeyOf(b *pem.Block) (crypto.PublicKey, error) {
	var k crypto.PublicKey
	var err error
	switch b.Type {
	case "PUBLIC KEY":
		k, err = x509.ParsePKIXPublicKey(b.Bytes)
	case "RSA PUBLIC KEY":
		k, err = x509.ParsePKCS1PublicKey(b.Bytes)
	case "CERTIFICATE":
		var cert *x509.Certificate
		if cert, err = x509.ParseCertificate(b.Bytes); err == nil {
			k = cert.PublicKey
		}
	default:
		if strings.Contains(b.Type, "PRIVATE") {
			return nil, fmt.Errorf("a %s: give ferry the public key only", b.Type)
		}
		return nil, fmt.Errorf("a %s block, not a public key", b.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.Type, err)
	}
	switch pk := k.(type) {
	case *rsa.PublicKey:
		if pk.N.BitLen() < 2048 {
			return nil, fmt.Errorf("an RSA key of %d bits; RS256 needs at least 2048", pk.N.BitLen())
		}
	case *ecdsa.PublicKey:
		if pk.Curve != elliptic.P256() {
			return nil, fmt.Errorf("an ECDSA key on %s; ES256 needs P-256", pk.Curve.Params().Name)
		}
	case ed25519.PublicKey:
	default:
		return nil, fmt.Errorf("a %T; ferry takes RSA, P-256 and Ed25519 keys", k)
	}
	return k, nil
}
