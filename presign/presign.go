package presign

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// version is the first line of the canonical string. Bump it if the
// canonical form ever changes, so old and new links cannot be confused.
const version = "v1"

// MinSecretLen is the shortest accepted key secret, in bytes.
const MinSecretLen = 16

// Errors returned by Verify. All of them mean "refuse the request"; they are
// distinct so logs and metrics can tell tampering from expiry.
var (
	ErrMalformed    = errors.New("presign: malformed link")
	ErrUnknownKey   = errors.New("presign: unknown key id")
	ErrBadSignature = errors.New("presign: bad signature")
	ErrExpired      = errors.New("presign: link expired")
)

// Key is one HMAC key with its id.
type Key struct {
	ID     string
	Secret []byte
}

var kidPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

// ParseKeys parses "kid:base64secret,kid2:base64secret2". Secrets may use
// standard or URL-safe base64, padded or not.
func ParseKeys(s string) ([]Key, error) {
	var keys []Key
	seen := map[string]bool{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		kid, b64, ok := strings.Cut(item, ":")
		if !ok {
			return nil, fmt.Errorf("key %q: want kid:base64secret", redactItem(item))
		}
		if !kidPattern.MatchString(kid) {
			return nil, fmt.Errorf("key id %q: want 1-32 characters of [A-Za-z0-9_-]", kid)
		}
		if seen[kid] {
			return nil, fmt.Errorf("key id %q listed twice", kid)
		}
		secret, err := decodeBase64(b64)
		if err != nil {
			return nil, fmt.Errorf("key %q: secret is not base64", kid)
		}
		if len(secret) < MinSecretLen {
			return nil, fmt.Errorf("key %q: secret is %d bytes, want at least %d", kid, len(secret), MinSecretLen)
		}
		seen[kid] = true
		keys = append(keys, Key{ID: kid, Secret: secret})
	}
	if len(keys) == 0 {
		return nil, errors.New("no keys")
	}
	return keys, nil
}

// FormatKeys is the inverse of ParseKeys.
func FormatKeys(keys []Key) string {
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k.ID + ":" + base64.StdEncoding.EncodeToString(k.Secret)
	}
	return strings.Join(parts, ",")
}

func redactItem(item string) string {
	if len(item) > 8 {
		return item[:4] + "…"
	}
	return "…"
}

func decodeBase64(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("not base64")
}

// Signer signs and verifies links. It is safe for concurrent use.
type Signer struct {
	keys []Key
	now  func() time.Time
}

// NewSigner returns a Signer that signs with keys[0] and verifies with any
// of keys. now is the clock; pass time.Now outside tests.
func NewSigner(keys []Key, now func() time.Time) (*Signer, error) {
	if len(keys) == 0 {
		return nil, errors.New("presign: no keys")
	}
	if now == nil {
		return nil, errors.New("presign: nil clock")
	}
	return &Signer{keys: keys, now: now}, nil
}

// Claims is what a verified link asserts.
type Claims struct {
	User    string
	Expires time.Time
	KeyID   string
}

// Sign returns the query fields for a link to path (for example
// "/download/exp_123") granting user access to resource until now+ttl.
func (s *Signer) Sign(path, resource, user string, ttl time.Duration) url.Values {
	k := s.keys[0]
	exp := s.now().Add(ttl).Unix()
	q := url.Values{}
	q.Set("u", user)
	q.Set("exp", strconv.FormatInt(exp, 10))
	q.Set("kid", k.ID)
	q.Set("sig", base64.RawURLEncoding.EncodeToString(mac(k.Secret, k.ID, path, resource, user, exp)))
	return q
}

// Verify checks the query fields q of a request for path and resource. It
// checks, in order: shape, key, signature, expiry. The signature is checked
// before expiry so that an attacker learns nothing from a forged link.
func (s *Signer) Verify(path, resource string, q url.Values) (Claims, error) {
	for _, f := range []string{"u", "exp", "kid", "sig"} {
		if len(q[f]) != 1 || q.Get(f) == "" {
			return Claims{}, ErrMalformed
		}
	}
	exp, err := strconv.ParseInt(q.Get("exp"), 10, 64)
	if err != nil || exp <= 0 || strconv.FormatInt(exp, 10) != q.Get("exp") {
		// The canonical decimal form is required, so "0100" and "100"
		// cannot both verify.
		return Claims{}, ErrMalformed
	}
	sig, err := base64.RawURLEncoding.DecodeString(q.Get("sig"))
	if err != nil {
		return Claims{}, ErrMalformed
	}
	kid := q.Get("kid")
	var key *Key
	for i := range s.keys {
		if s.keys[i].ID == kid {
			key = &s.keys[i]
			break
		}
	}
	if key == nil {
		return Claims{}, ErrUnknownKey
	}
	user := q.Get("u")
	if !hmac.Equal(sig, mac(key.Secret, kid, path, resource, user, exp)) {
		return Claims{}, ErrBadSignature
	}
	expires := time.Unix(exp, 0)
	if !s.now().Before(expires) {
		return Claims{}, ErrExpired
	}
	return Claims{User: user, Expires: expires, KeyID: kid}, nil
}

// mac computes the link MAC. Fields are newline-delimited; none of them may
// contain a newline (ids, paths and decimal numbers cannot), so the encoding
// is unambiguous.
func mac(secret []byte, kid, path, resource, user string, exp int64) []byte {
	h := hmac.New(sha256.New, secret)
	fmt.Fprintf(h, "%s\n%s\n%s\n%s\n%s\n%d", version, kid, path, resource, user, exp)
	return h.Sum(nil)
}
