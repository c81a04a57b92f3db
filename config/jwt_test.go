package config

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func pemOf(t *testing.T, typ string, der []byte) string {
	t.Helper()
	return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
}

func pkix(t *testing.T, pub any) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pemOf(t, "PUBLIC KEY", der)
}

func TestJWTSettings(t *testing.T) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	both := pkix(t, &rsaKey.PublicKey) + pkix(t, &ecKey.PublicKey) + pemOf(t, "RSA PUBLIC KEY", x509.MarshalPKCS1PublicKey(&rsaKey.PublicKey))
	file := filepath.Join(t.TempDir(), "keys.pem")
	os.WriteFile(file, []byte(pkix(t, edPub)), 0o600)
	base := map[string]string{"FERRY_JWT_ISSUER": "https://auth.example.com/", "FERRY_JWT_AUDIENCE": "ferry"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}

	for name, c := range map[string]struct {
		env  map[string]string
		keys int
		url  string
	}{
		"inline PEM":                {with("FERRY_JWT_KEYS", both), 3, ""},
		"PEM with \\n for newlines": {with("FERRY_JWT_KEYS", strings.ReplaceAll(pkix(t, &ecKey.PublicKey), "\n", `\n`)), 1, ""},
		"a file":                    {with("FERRY_JWT_KEYS", file), 1, ""},
		"https JWKS":                {with("FERRY_JWT_JWKS_URL", "https://auth.example.com/.well-known/jwks.json"), 0, "https://auth.example.com/.well-known/jwks.json"},
		"http JWKS on 127.0.0.1":    {with("FERRY_JWT_JWKS_URL", "http://127.0.0.1:9000/jwks"), 0, "http://127.0.0.1:9000/jwks"},
		"http JWKS on [::1]":        {with("FERRY_JWT_JWKS_URL", "http://[::1]:9000/jwks"), 0, "http://[::1]:9000/jwks"},
		"http JWKS on localhost":    {with("FERRY_JWT_JWKS_URL", "http://localhost/jwks"), 0, "http://localhost/jwks"},
		"with an admin claim":       {with("FERRY_JWT_KEYS", file, "FERRY_JWT_ADMIN_CLAIM", "ferry_admin"), 1, ""},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := Load(env(c.env))
			if err != nil {
				t.Fatal(err)
			}
			if !cfg.JWT.Enabled() || len(cfg.JWT.Keys) != c.keys || cfg.JWT.JWKSURL != c.url || cfg.JWT.Audience != "ferry" {
				t.Fatalf("JWT settings %+v", cfg.JWT)
			}
		})
	}
	if cfg, err := Load(env(nil)); err != nil || cfg.JWT.Enabled() {
		t.Fatalf("by default JWTs are off: %+v %v", cfg.JWT, err)
	}

	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	priv, _ := x509.MarshalPKCS8PrivateKey(ecKey)
	for _, c := range []struct {
		env  map[string]string
		name string
		says string
	}{
		{with(), "FERRY_JWT_KEYS", "FERRY_JWT_JWKS_URL"},
		{map[string]string{"FERRY_JWT_ISSUER": "https://auth.example.com/", "FERRY_JWT_KEYS": file}, "FERRY_JWT_AUDIENCE", "required"},
		{map[string]string{"FERRY_JWT_AUDIENCE": "ferry"}, "FERRY_JWT_AUDIENCE", "FERRY_JWT_ISSUER"},
		{map[string]string{"FERRY_JWT_KEYS": file}, "FERRY_JWT_KEYS", "FERRY_JWT_ISSUER"},
		{map[string]string{"FERRY_JWT_JWKS_URL": "https://a.example/jwks"}, "FERRY_JWT_JWKS_URL", "FERRY_JWT_ISSUER"},
		{map[string]string{"FERRY_JWT_ADMIN_CLAIM": "admin"}, "FERRY_JWT_ADMIN_CLAIM", "FERRY_JWT_ISSUER"},
		{with("FERRY_JWT_JWKS_URL", "https://a.example/jwks", "FERRY_JWT_KEYS", file), "FERRY_JWT_KEYS", "not both"},
		{with("FERRY_JWT_JWKS_URL", "http://auth.example.com/jwks"), "FERRY_JWT_JWKS_URL", "loopback"},
		{with("FERRY_JWT_JWKS_URL", "http://10.0.0.5/jwks"), "FERRY_JWT_JWKS_URL", "loopback"},
		{with("FERRY_JWT_JWKS_URL", "ftp://a.example/jwks"), "FERRY_JWT_JWKS_URL", "https://"},
		{with("FERRY_JWT_JWKS_URL", "auth.example.com/jwks"), "FERRY_JWT_JWKS_URL", "https://"},
		{with("FERRY_JWT_KEYS", "/no/such/file.pem"), "FERRY_JWT_KEYS", "readable file"},
		{with("FERRY_JWT_KEYS", pkix(t, &small.PublicKey)), "FERRY_JWT_KEYS", "2048"},
		{with("FERRY_JWT_KEYS", pkix(t, &p384.PublicKey)), "FERRY_JWT_KEYS", "P-256"},
		{with("FERRY_JWT_KEYS", pemOf(t, "PRIVATE KEY", priv)), "FERRY_JWT_KEYS", "public key only"},
		{with("FERRY_JWT_KEYS", pkix(t, &ecKey.PublicKey)+"trailing"), "FERRY_JWT_KEYS", "not a PEM block"},
		{with("FERRY_JWT_KEYS", "-----BEGIN PUBLIC KEY-----\nnot base64\n-----END PUBLIC KEY-----"), "FERRY_JWT_KEYS", "PEM"},
		{with("FERRY_JWT_ISSUER", "https://a b"), "FERRY_JWT_ISSUER", "spaces"},
	} {
		_, err := Load(env(c.env))
		if err == nil {
			t.Errorf("%v accepted", c.env)
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "config: "+c.name+": ") || !strings.Contains(msg, c.says) || strings.Contains(msg, "\n") {
			t.Errorf("error %q: want one line starting with config: %s: that says %q", msg, c.name, c.says)
		}
	}
}
