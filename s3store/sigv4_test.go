package s3store

import (
	"context"
	"net/url"
	"path/filepath"
	"testing"
	"time"
)

// partSigner's URLs are the SDK's, byte for byte: for every combination of
// signed headers, path-style and virtual-hosted endpoints, default and
// explicit ports, AWS's own endpoint, keys that need escaping, and
// temporary credentials with a session token. Each URL is compared with
// the SDK's presign of the same part in the same second (the signature
// covers the date).
func TestPartSignerMatchesSDK(t *testing.T) {
	// The session-token case reads credentials from the environment;
	// keep the machine's AWS files out of it.
	none := filepath.Join(t.TempDir(), "none")
	t.Setenv("AWS_CONFIG_FILE", none)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", none)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	stores := []struct {
		name  string
		cfg   Config
		token string
	}{
		{name: "path style", cfg: Config{Endpoint: "http://10.0.0.1:9000", PublicEndpoint: "http://files.example.test:9000", PathStyle: true}},
		{name: "default port", cfg: Config{Endpoint: "http://files.example.test:80", PathStyle: true}},
		{name: "https, virtual-hosted", cfg: Config{Endpoint: "https://s3.example.test"}},
		{name: "https, explicit 443", cfg: Config{Endpoint: "https://s3.example.test:443", PathStyle: true}},
		{name: "AWS", cfg: Config{Region: "eu-west-1"}},
		{name: "session token", cfg: Config{Endpoint: "https://s3.example.test"}, token: "IQoJb3JpZ2luX2Vj/tok+en=="},
	}
	keys := []string{"uploads/upl_0123456789", "odd/a b+c=d&e/ü~*'()!"}
	specs := []PartSpec{{Number: 1}}
	for mask := range len(signedHeaderSets) {
		p := PartSpec{Number: int32(2 + mask)}
		if mask&1 != 0 {
			p.Size = 5<<20 + int64(mask)
		}
		if mask&2 != 0 {
			p.ContentMD5 = "1B2M2Y8AsgTpgAmY7PhCfg=="
		}
		if mask&4 != 0 {
			p.CRC32C = "yZRlqg=="
		}
		specs = append(specs, p)
	}
	specs = append(specs, PartSpec{Number: 10000, Size: 1, CRC32C: "AAAAAA=="})
	ctx := context.Background()
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			cfg := sc.cfg
			cfg.Bucket = "ferry-bucket"
			if cfg.Region == "" {
				cfg.Region = "us-east-1"
			}
			if sc.token == "" {
				cfg.AccessKey, cfg.SecretKey = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
			} else {
				t.Setenv("AWS_ACCESS_KEY_ID", "ASIAEXAMPLE")
				t.Setenv("AWS_SECRET_ACCESS_KEY", "c2VjcmV0/with+slash")
				t.Setenv("AWS_SESSION_TOKEN", sc.token)
			}
			st, err := New(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			creds, err := st.creds.Retrieve(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, key := range keys {
				for _, p := range specs {
					// The SDK's URL for part 1 is the template, as in
					// PresignParts; the part signed is another.
					var got, want PresignedRequest
					for attempt := 0; ; attempt++ {
						tmpl, err := st.PresignPart(ctx, key, "upload+id/=1", specs[0], time.Hour)
						if err != nil {
							t.Fatal(err)
						}
						signer, ok := newPartSigner(tmpl.URL, creds.SecretAccessKey)
						if !ok {
							t.Fatalf("no signer from the SDK's URL %s", tmpl.URL)
						}
						got = PresignedRequest{URL: signer.sign(p), Headers: partHeaders(p)}
						if want, err = st.PresignPart(ctx, key, "upload+id/=1", p, time.Hour); err != nil {
							t.Fatal(err)
						}
						if amzDate(t, want.URL) == amzDate(t, tmpl.URL) || attempt == 3 {
							break
						}
					}
					if got.URL != want.URL {
						t.Fatalf("key %q, part %+v:\n got %s\nwant %s", key, p, got.URL, want.URL)
					}
					if len(got.Headers) != len(want.Headers) {
						t.Fatalf("key %q, part %+v: headers %v, want %v", key, p, got.Headers, want.Headers)
					}
					for k, v := range want.Headers {
						if got.Headers[k] != v {
							t.Fatalf("key %q, part %+v: headers %v, want %v", key, p, got.Headers, want.Headers)
						}
					}
				}
			}
		})
	}
}

func amzDate(t *testing.T, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query().Get("X-Amz-Date")
}

// A URL of a shape the signer does not know (here: a header moved into the
// query, which may differ from part to part) gives no signer, so
// PresignParts falls back to the SDK rather than copy it into every URL.
func TestPartSignerRefusesUnknownShapes(t *testing.T) {
	base := "https://s3.example.test/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AK%2F20261201%2Fus-east-1%2Fs3%2Faws4_request" +
		"&X-Amz-Date=20261201T102955Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&partNumber=1&uploadId=U&x-id=UploadPart&X-Amz-Signature=00"
	if _, ok := newPartSigner(base, "secret"); !ok {
		t.Fatal("the SDK's shape is refused")
	}
	for name, u := range map[string]string{
		"hoisted header": base + "&X-Amz-Checksum-Crc32c=AAAAAA%3D%3D",
		"other algorithm": "https://s3.example.test/b/k?X-Amz-Algorithm=AWS4-ECDSA-P256-SHA256&X-Amz-Credential=AK%2F20261201%2Fus-east-1%2Fs3%2Faws4_request" +
			"&X-Amz-Date=20261201T102955Z&X-Amz-SignedHeaders=host&partNumber=1&uploadId=U",
		"no part number": "https://s3.example.test/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AK%2F20261201%2Fus-east-1%2Fs3%2Faws4_request" +
			"&X-Amz-Date=20261201T102955Z&X-Amz-SignedHeaders=host&uploadId=U",
		"scope of another day": "https://s3.example.test/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AK%2F20261130%2Fus-east-1%2Fs3%2Faws4_request" +
			"&X-Amz-Date=20261201T102955Z&X-Amz-SignedHeaders=host&partNumber=1&uploadId=U",
		"no query": "https://s3.example.test/b/k",
	} {
		if _, ok := newPartSigner(u, "secret"); ok {
			t.Errorf("%s: a signer from %s", name, u)
		}
	}
}

// BenchmarkPresignParts1000 signs one presign call's worth of part URLs,
// each with its size and CRC32C, without S3 or HTTP: the signing alone.
func BenchmarkPresignParts1000(b *testing.B) {
	st, err := New(context.Background(), Config{Endpoint: "http://127.0.0.1:9", Region: "us-east-1", Bucket: "b",
		AccessKey: "AKIDEXAMPLE", SecretKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", PathStyle: true})
	if err != nil {
		b.Fatal(err)
	}
	specs := make([]PartSpec, 1000)
	for i := range specs {
		specs[i] = PartSpec{Number: int32(i + 1), Size: 8 << 20, CRC32C: EncodeCRC32C(uint32(i) * 2654435761)}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := st.PresignParts(context.Background(), "uploads/upl_0123456789", "upload-id", specs, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
}
