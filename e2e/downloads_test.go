package e2e

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ferry-io/ferry/presign"
)

// The download route is wired into the binary: refusals are problem
// documents with the contract's statuses, HEAD is answered, and the
// downloads metric counts them. (Serving real exports and files is covered
// in package download, against the same router and a real S3.)
func TestDownloadRoute(t *testing.T) {
	const keys = "k1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
	forEachDriver(t, func(t *testing.T, mysql bool) {
		f := Start(t, Options{MySQL: mysql, Env: map[string]string{"FERRY_LINK_KEYS": keys, "FERRY_DOWNLOAD_LINK_MAX_ADDRS": "5"}})
		if mysql {
			f.Token = cliCreateAdmin(t, f)
		}
		uid, _ := f.CreateUser("dl-user", false)
		ks, err := presign.ParseKeys(keys)
		if err != nil {
			t.Fatal(err)
		}
		signer, _ := presign.NewSigner(ks, time.Now)
		link := func(id, user string) string {
			return "/download/" + id + "?" + signer.Sign("/download/"+id, id, user, time.Minute).Encode()
		}
		tampered := func(l string) string {
			u, _ := url.Parse(l)
			q := u.Query()
			q.Set("u", "usr_someone")
			u.RawQuery = q.Encode()
			return u.String()
		}

		for _, c := range []struct {
			name, method, path string
			status             int
			code               string
		}{
			{"unknown resource", "GET", link("exp_nothing", uid), 404, "download_not_found"},
			{"tampered", "GET", tampered(link("exp_nothing", uid)), 403, "invalid_link"},
			{"tampered HEAD", "HEAD", tampered(link("exp_nothing", uid)), 403, ""},
			{"no query", "GET", "/download/exp_nothing", 403, "invalid_link"},
		} {
			t.Run(c.name, func(t *testing.T) {
				r := f.Do(c.method, c.path, "", nil)
				if r.Status != c.status {
					t.Fatalf("%d, want %d: %s", r.Status, c.status, r.Body)
				}
				if c.method == "HEAD" && len(r.Body) != 0 {
					t.Fatalf("HEAD answered with a body")
				}
				if c.code != "" {
					var p struct{ Code string }
					r.JSON(t, &p)
					if p.Code != c.code || r.Header.Get("Content-Type") != "application/problem+json" {
						t.Fatalf("code %q, type %q", p.Code, r.Header.Get("Content-Type"))
					}
				}
			})
		}
		m := f.Do("GET", "/metrics", "", nil)
		if !strings.Contains(string(m.Body), `ferry_downloads_total{status="403"} 3`) ||
			!strings.Contains(string(m.Body), `ferry_downloads_total{status="404"} 1`) {
			t.Fatalf("downloads metric missing or wrong:\n%s", grepLines(string(m.Body), "ferry_download"))
		}
	})
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
