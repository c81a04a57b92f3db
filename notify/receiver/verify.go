package receiver

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The Standard Webhooks headers.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix starts every signing secret.
const SecretPrefix = "whsec_"

// DefaultTolerance is how far a message's timestamp may be from the
// receiver's clock, either way.
const DefaultTolerance = 5 * time.Minute

// maxSignatures bounds the work one header can cause.
const maxSignatures = 16

// Verification errors. A message failing any of them must be dropped
// without looking at its id.
var (
	ErrMissingHeaders = errors.New("receiver: missing webhook-id, webhook-timestamp or webhook-signature")
	ErrTimestamp      = errors.New("receiver: webhook-timestamp outside the tolerance")
	ErrSignature      = errors.New("receiver: no valid signature")
)

// ParseSecret decodes a "whsec_<base64>" secret into the HMAC key. The
// prefix is optional, as in other Standard Webhooks libraries.
func ParseSecret(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, SecretPrefix))
	if err != nil {
		return nil, fmt.Errorf("receiver: secret is not whsec_<base64>: %w", err)
	}
	if len(key) == 0 {
		return nil, errors.New("receiver: empty secret")
	}
	return key, nil
}

// Sign returns the Standard Webhooks signature "v1,<base64 HMAC-SHA256>"
// of id.timestamp.body under key. ferry signs with this very function, so
// sender and receiver cannot drift apart.
func Sign(key []byte, id string, ts time.Time, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(strconv.FormatInt(ts.Unix(), 10)))
	m.Write([]byte{'.'})
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// Verifier checks signatures and timestamps. Hold several secrets while a
// sender rotates: a message signed with any of them verifies.
type Verifier struct {
	keys [][]byte
	// Tolerance is the allowed clock difference; zero means
	// DefaultTolerance.
	Tolerance time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// NewVerifier returns a verifier accepting signatures made with any of the
// given "whsec_…" secrets.
func NewVerifier(secrets ...string) (*Verifier, error) {
	if len(secrets) == 0 {
		return nil, errors.New("receiver: at least one secret is required")
	}
	v := &Verifier{}
	for _, s := range secrets {
		key, err := ParseSecret(s)
		if err != nil {
			return nil, err
		}
		v.keys = append(v.keys, key)
	}
	return v, nil
}

// Verify checks that body and header carry a valid signature made within
// the tolerance, and returns the webhook id and timestamp. Every
// webhook-signature line is read, up to 16 signatures in all. It reads
// nothing but its arguments: no id is looked up before the signature
// holds, so a forged message cannot affect what happens to a real one.
func (v *Verifier) Verify(header http.Header, body []byte) (id string, ts time.Time, err error) {
	id = header.Get(HeaderID)
	tsText := header.Get(HeaderTimestamp)
	// Signatures may come in several header lines (a proxy may split
	// one, or a sender may add one per secret); each line counts.
	var sigs []string
	for _, line := range header.Values(HeaderSignature) {
		sigs = append(sigs, strings.Fields(line)...)
	}
	if id == "" || tsText == "" || len(sigs) == 0 {
		return "", time.Time{}, ErrMissingHeaders
	}
	secs, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("%w: %q is not Unix seconds", ErrTimestamp, tsText)
	}
	ts = time.Unix(secs, 0)
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	tol := v.Tolerance
	if tol <= 0 {
		tol = DefaultTolerance
	}
	if d := now().Sub(ts); d > tol || d < -tol {
		return "", time.Time{}, fmt.Errorf("%w: off by %s", ErrTimestamp, d.Round(time.Second))
	}
	expected := make([][]byte, len(v.keys))
	for i, k := range v.keys {
		expected[i] = []byte(Sign(k, id, ts, body))
	}
	for n, s := range sigs {
		if n == maxSignatures {
			break
		}
		if !strings.HasPrefix(s, "v1,") {
			continue // other schemes (v1a, future versions) are not ours to judge
		}
		for _, e := range expected {
			if hmac.Equal([]byte(s), e) {
				return id, ts, nil
			}
		}
	}
	return "", time.Time{}, ErrSignature
}
