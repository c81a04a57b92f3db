package e2e

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/ferry-io/ferry/config"
	"github.com/ferry-io/ferry/internal/testenv"
)

// Issue 17, item 11: the start-up log's configuration group holds every
// FERRY_* setting config.Load reads, named after it (FERRY_S3_BUCKET is
// s3_bucket), and nothing else; the S3 secret key and the link key's
// secret appear nowhere in what ferry prints.
func TestStartupLogsEverySetting(t *testing.T) {
	t.Parallel()
	srv := testenv.S3(t)
	linkSecret := base64.StdEncoding.EncodeToString([]byte("startup-log-link-secret-32-bytes"))
	f := Start(t, Options{S3: &srv, Env: map[string]string{
		"FERRY_LINK_KEYS":        "k1:" + linkSecret,
		"FERRY_MAX_BODY":         "2MiB",
		"FERRY_SHUTDOWN_TIMEOUT": "7s",
		"FERRY_JOB_POLL":         "3s",
	}})
	recs := f.LogLines("ferry starting")
	if len(recs) != 1 {
		t.Fatalf("%d 'ferry starting' records, want 1:\n%s", len(recs), f.Stderr())
	}
	logged, ok := recs[0]["config"].(map[string]any)
	if !ok {
		t.Fatalf("'ferry starting' has no config group: %v", recs[0])
	}
	settings := map[string]bool{}
	for _, d := range config.Defaults() {
		key := strings.ToLower(strings.TrimPrefix(d[0], "FERRY_"))
		settings[key] = true
		if _, ok := logged[key]; !ok {
			t.Errorf("the start-up log leaves out %s (want the key %s)", d[0], key)
		}
	}
	for key := range logged {
		if !settings[key] {
			t.Errorf("the start-up log's config has %s, which names no setting", key)
		}
	}
	for key, want := range map[string]any{
		"s3_secret_key": "REDACTED", "max_body": float64(2 << 20), "shutdown_timeout": "7s", "job_poll": "3s",
		"s3_endpoint": srv.Endpoint, "s3_access_key": srv.AccessKey,
	} {
		if logged[key] != want {
			t.Errorf("logged %s = %v, want %v", key, logged[key], want)
		}
	}
	if ids, _ := logged["link_keys"].([]any); len(ids) != 1 || ids[0] != "k1" {
		t.Errorf("logged link_keys = %v, want their ids only: [k1]", logged["link_keys"])
	}
	for name, secret := range map[string]string{"the S3 secret key": srv.SecretKey, "the link key": linkSecret} {
		if strings.Contains(f.Stderr(), secret) || strings.Contains(f.Stdout(), secret) {
			t.Errorf("ferry printed %s", name)
		}
	}
}
