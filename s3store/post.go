package s3store

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/url"
	"sort"
	"strings"
	"time"
)

// PostPolicy is a signed browser form upload (S3's POST Object): POST a
// multipart/form-data body to URL with Fields first, in any order, and the
// file last, in a field named "file".
type PostPolicy struct {
	URL       string
	Fields    map[string]string
	ExpiresAt time.Time
}

// PostOptions are the conditions a POST policy enforces.
type PostOptions struct {
	ContentType string
	// MinSize and MaxSize bound the file (content-length-range); MaxSize 0
	// leaves the size unbounded.
	MinSize, MaxSize int64
	// Fields are more exact-match form fields, such as x-amz-meta-* or
	// success_action_status.
	Fields map[string]string
}

// PresignPost signs a POST policy for exactly key against the public
// endpoint. aws-sdk-go-v2 has no POST-policy builder, so this builds the
// policy document and signs it with SigV4 (AWS4-HMAC-SHA256 over the
// base64 policy, with the usual date/region/service key derivation). Every
// field the form carries is pinned by an exact condition, so a browser can
// change nothing but the file, within the size range.
func (s *Store) PresignPost(ctx context.Context, key string, o PostOptions, ttl time.Duration) (PostPolicy, error) {
	if key == "" {
		return PostPolicy{}, errors.New("s3store: POST policy needs a key")
	}
	creds, err := s.creds.Retrieve(ctx)
	if err != nil {
		return PostPolicy{}, translate("credentials", err)
	}
	now := time.Now().UTC()
	day := now.Format("20060102")
	region := s.region
	if region == "" {
		region = "us-east-1"
	}
	fields := map[string]string{
		"key":              key,
		"x-amz-algorithm":  "AWS4-HMAC-SHA256",
		"x-amz-credential": creds.AccessKeyID + "/" + day + "/" + region + "/s3/aws4_request",
		"x-amz-date":       now.Format("20060102T150405Z"),
	}
	if creds.SessionToken != "" {
		fields["x-amz-security-token"] = creds.SessionToken
	}
	if o.ContentType != "" {
		fields["Content-Type"] = o.ContentType
	}
	for k, v := range o.Fields {
		fields[k] = v
	}
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	conds := []any{map[string]string{"bucket": s.bucket}}
	for _, k := range names {
		conds = append(conds, map[string]string{k: fields[k]})
	}
	if o.MaxSize > 0 {
		conds = append(conds, []any{"content-length-range", max(o.MinSize, 0), o.MaxSize})
	}
	expires := now.Add(ttl)
	doc, err := json.Marshal(map[string]any{"expiration": expires.Format("2006-01-02T15:04:05.000Z"), "conditions": conds})
	if err != nil {
		return PostPolicy{}, err
	}
	policy := base64.StdEncoding.EncodeToString(doc)
	fields["policy"] = policy
	fields["x-amz-signature"] = hex.EncodeToString(hmacSHA256(signingKey(creds.SecretAccessKey, day, region, "s3"), []byte(policy)))

	u, err := url.Parse(s.publicEndpoint)
	if err != nil || s.publicEndpoint == "" {
		u = &url.URL{Scheme: "https", Host: "s3." + region + ".amazonaws.com"}
	}
	if s.pathStyle || s.publicEndpoint != "" && !strings.Contains(u.Host, "amazonaws.com") {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/" + s.bucket
	} else {
		u.Host = s.bucket + "." + u.Host
	}
	return PostPolicy{URL: u.String(), Fields: fields, ExpiresAt: expires}, nil
}

// signingKey derives SigV4's signing key for a day, region and service.
func signingKey(secret, day, region, service string) []byte {
	k := hmacSHA256([]byte("AWS4"+secret), []byte(day))
	k = hmacSHA256(k, []byte(region))
	k = hmacSHA256(k, []byte(service))
	return hmacSHA256(k, []byte("aws4_request"))
}

func hmacSHA256(key, data []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(data)
	return m.Sum(nil)
}
