package testenv

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/ferry-io/ferry/s3store"
)

// S3Lacking returns srv as reached through an HTTP proxy on 127.0.0.1 that
// answers the way stores without the given capabilities answer, so ferry's
// fallbacks run against a real server: Cloudflare R2 and Backblaze B2
// answer a browser form POST with 501 NotImplemented, MinIO's community
// edition a bucket CORS or lifecycle call, and R2 a FULL_OBJECT CRC32C
// multipart upload. The proxy answers:
//   - CapPostPolicy: a multipart/form-data POST with 501 NotImplemented;
//   - CapCopyObject: a PUT with x-amz-copy-source with 501 NotImplemented;
//   - CapLifecycle: any ?lifecycle request with 501 NotImplemented;
//   - CapCORS: ?cors requests with 501 NotImplemented and every preflight
//     with 403, and it strips Access-Control-* headers from answers;
//   - CapChecksums: a CreateMultipartUpload asking for a FULL_OBJECT
//     checksum with 501 NotImplemented.
//
// Everything else passes through untouched, the Host header included, so
// SigV4 signatures made for the proxy's endpoint hold at the server.
func S3Lacking(t testing.TB, srv S3Server, lacks ...s3store.Capability) S3Server {
	t.Helper()
	target, err := url.Parse(srv.Endpoint)
	if err != nil || target.Host == "" {
		t.Fatalf("S3 endpoint %q is not a URL: %v", srv.Endpoint, err)
	}
	lack := map[s3store.Capability]bool{}
	for _, c := range lacks {
		lack[c] = true
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host
		},
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			if lack[s3store.CapCORS] {
				for k := range resp.Header {
					if strings.HasPrefix(strings.ToLower(k), "access-control-") {
						resp.Header.Del(k)
					}
				}
			}
			return nil
		},
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		switch {
		case lack[s3store.CapPostPolicy] && r.Method == http.MethodPost && strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/form-data"):
			notImplemented(w, "POST Object")
		case lack[s3store.CapCopyObject] && r.Method == http.MethodPut && r.Header.Get("X-Amz-Copy-Source") != "":
			notImplemented(w, "CopyObject")
		case lack[s3store.CapLifecycle] && q.Has("lifecycle"):
			notImplemented(w, "bucket lifecycle")
		case lack[s3store.CapCORS] && q.Has("cors"):
			notImplemented(w, "bucket CORS")
		case lack[s3store.CapCORS] && r.Method == http.MethodOptions:
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessForbidden</Code><Message>CORSResponse: This CORS request is not allowed.</Message></Error>`)
		case lack[s3store.CapChecksums] && r.Method == http.MethodPost && q.Has("uploads") && strings.EqualFold(r.Header.Get("X-Amz-Checksum-Type"), "FULL_OBJECT"):
			notImplemented(w, "FULL_OBJECT checksums")
		default:
			rp.ServeHTTP(w, r)
		}
	})
	proxy := httptest.NewServer(h)
	t.Cleanup(proxy.Close)
	srv.Endpoint = proxy.URL
	return srv
}

func notImplemented(w http.ResponseWriter, what string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(http.StatusNotImplemented)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NotImplemented</Code><Message>%s is not implemented by this store.</Message></Error>`, what)
}

// S3ExposingOnlyTheRule returns srv (path-style) as reached through an
// HTTP proxy on 127.0.0.1 that answers Access-Control-Expose-Headers from
// the bucket's CORS rule alone, as AWS S3 and MinIO do. VersityGW adds
// ETag to every CORS answer whatever the rule lists, so on it alone a
// rule without ExposeHeader ETag cannot be seen failing browsers. The
// proxy reads the bucket's CORS configuration (GetBucketCors, through
// minio-go with srv's credentials) and sets the header to the ExposeHeader
// list of the first rule that allows the request's origin, or removes it
// when that rule lists none.
func S3ExposingOnlyTheRule(t testing.TB, srv S3Server) S3Server {
	t.Helper()
	target, err := url.Parse(srv.Endpoint)
	if err != nil || target.Host == "" {
		t.Fatalf("S3 endpoint %q is not a URL: %v", srv.Endpoint, err)
	}
	mc, err := minio.New(target.Host, &minio.Options{Creds: credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, ""), Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host
		},
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			origin := resp.Request.Header.Get("Origin")
			if resp.Header.Get("Access-Control-Expose-Headers") == "" || origin == "" {
				return nil
			}
			bucket, _, _ := strings.Cut(strings.TrimPrefix(resp.Request.URL.Path, "/"), "/")
			cfg, err := mc.GetBucketCors(resp.Request.Context(), bucket)
			if err != nil || cfg == nil {
				resp.Header.Del("Access-Control-Expose-Headers")
				return nil
			}
			for _, r := range cfg.CORSRules {
				if slices.Contains(r.AllowedOrigin, origin) || slices.Contains(r.AllowedOrigin, "*") {
					if len(r.ExposeHeader) == 0 {
						resp.Header.Del("Access-Control-Expose-Headers")
					} else {
						resp.Header.Set("Access-Control-Expose-Headers", strings.Join(r.ExposeHeader, ", "))
					}
					return nil
				}
			}
			resp.Header.Del("Access-Control-Expose-Headers")
			return nil
		},
	}
	proxy := httptest.NewServer(rp)
	t.Cleanup(proxy.Close)
	srv.Endpoint = proxy.URL
	return srv
}
