package config

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestDefaults(t *testing.T) {
	c, err := Load(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != ":8080" || c.PublicURL != "http://localhost:8080" || c.DBDriver != DriverSQLite ||
		!strings.HasSuffix(c.DBDSN, "/ferry-data/ferry.db") || !c.Embedded() ||
		c.S3PublicEndpoint != "http://127.0.0.1:9310" || c.S3Bucket != "ferry" ||
		c.DownloadLinkTTL != 300*time.Second || c.DownloadLinkMaxAddrs != 3 || c.UploadTTL != 24*time.Hour || c.ExportRetention != 168*time.Hour ||
		c.ExportShardSize != 1000 || c.JobLease != 30*time.Second || len(c.WebhookRetrySchedule) != 10 ||
		c.WebhookAllowPrivate || c.DefaultPartSize != 8<<20 || c.MaxUploadSize != 10_000*5<<30 || c.S3MaxParts != 10_000 || c.S3MaxPartSize != 5<<30 ||
		c.DownloadLogRetention != 30*24*time.Hour || c.MetricsAddr != "" ||
		c.RateAuthFailures.String() != "10/min" || c.RateCreates.String() != "120/min" {
		t.Fatalf("unexpected defaults: %+v", c)
	}
}

// The size limit follows the store's multipart limits: by default AWS
// S3's 10,000 parts of up to 5 GiB (48.8 TiB), smaller where the store
// says so, and never more than the parts can hold.
func TestStoreLimits(t *testing.T) {
	const awsMax = 10_000 * 5 << 30 // 53,687,091,200,000 bytes
	for _, tc := range []struct {
		env            map[string]string
		parts          int
		partSize, size int64
		err            string
	}{
		{env: nil, parts: 10_000, partSize: 5 << 30, size: awsMax},
		{env: map[string]string{"FERRY_MAX_UPLOAD_SIZE": "53687091200000"}, parts: 10_000, partSize: 5 << 30, size: awsMax},
		{env: map[string]string{"FERRY_MAX_UPLOAD_SIZE": "53687091200001"}, err: "FERRY_MAX_UPLOAD_SIZE"},
		{env: map[string]string{"FERRY_MAX_UPLOAD_SIZE": "5TiB"}, parts: 10_000, partSize: 5 << 30, size: 5 << 40},
		{env: map[string]string{"FERRY_S3_MAX_PARTS": "1000"}, parts: 1000, partSize: 5 << 30, size: 1000 * 5 << 30},
		{env: map[string]string{"FERRY_S3_MAX_PARTS": "1000", "FERRY_MAX_UPLOAD_SIZE": "5TiB"}, err: "FERRY_MAX_UPLOAD_SIZE"},
		{env: map[string]string{"FERRY_S3_MAX_PART_SIZE": "1GiB"}, parts: 10_000, partSize: 1 << 30, size: 10_000 << 30},
		{env: map[string]string{"FERRY_S3_MAX_PART_SIZE": "1GiB", "FERRY_PART_SIZE": "2GiB"}, err: "FERRY_PART_SIZE"},
		{env: map[string]string{"FERRY_PART_SIZE": "6GiB"}, err: "FERRY_PART_SIZE"},
		{env: map[string]string{"FERRY_S3_MAX_PARTS": "10001"}, err: "FERRY_S3_MAX_PARTS"},
		{env: map[string]string{"FERRY_S3_MAX_PARTS": "0"}, err: "FERRY_S3_MAX_PARTS"},
		{env: map[string]string{"FERRY_S3_MAX_PART_SIZE": "4MiB"}, err: "FERRY_S3_MAX_PART_SIZE"},
		{env: map[string]string{"FERRY_S3_MAX_PART_SIZE": "6GiB"}, err: "FERRY_S3_MAX_PART_SIZE"},
	} {
		c, err := Load(env(tc.env))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: err = %v, want one naming %s", tc.env, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", tc.env, err)
			continue
		}
		if c.S3MaxParts != tc.parts || c.S3MaxPartSize != tc.partSize || c.MaxUploadSize != tc.size {
			t.Errorf("%v: parts %d of %d, max %d; want %d of %d, max %d", tc.env, c.S3MaxParts, c.S3MaxPartSize, c.MaxUploadSize, tc.parts, tc.partSize, tc.size)
		}
	}
}

// FERRY_TRUSTED_PROXIES takes addresses and CIDR prefixes, IPv4 and IPv6,
// and "none"; the default is loopback.
func TestTrustedProxies(t *testing.T) {
	for v, want := range map[string]string{
		"":                                       "[127.0.0.1/32 ::1/128]",
		"10.0.0.0/8, 192.168.1.7 ,2001:db8::/32": "[10.0.0.0/8 192.168.1.7/32 2001:db8::/32]",
		"10.1.2.3/8":                             "[10.0.0.0/8]",
		"none":                                   "[]",
	} {
		c, err := Load(env(map[string]string{"FERRY_TRUSTED_PROXIES": v}))
		if err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		if got := fmt.Sprint(c.TrustedProxies); got != want {
			t.Errorf("%q: %s, want %s", v, got, want)
		}
	}
}

func TestMySQLDSNIsNormalised(t *testing.T) {
	c, err := Load(env(map[string]string{"FERRY_DB_DRIVER": "mysql", "FERRY_DB_DSN": "u:secret@tcp(db:3306)/ferry"}))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(c.DBDSN, "parseTime=true") || !strings.Contains(c.DBDSN, "time_zone=") {
		t.Fatalf("dsn %q lacks parseTime/time_zone", c.DBDSN)
	}
	if red := RedactDSN(c.DBDriver, c.DBDSN); strings.Contains(red, "secret") {
		t.Fatalf("redacted DSN leaks the password: %s", red)
	}
}

// Every bad value is refused with one line that names the variable.
func TestBadSettings(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		name string
	}{
		{map[string]string{"FERRY_DB_DRIVER": "postgres"}, "FERRY_DB_DRIVER"},
		{map[string]string{"FERRY_DB_DRIVER": "mysql"}, "FERRY_DB_DSN"},
		{map[string]string{"FERRY_DB_DRIVER": "mysql", "FERRY_DB_DSN": "root@127.0.0.1/x"}, "FERRY_DB_DSN"},
		{map[string]string{"FERRY_DB_DRIVER": "mysql", "FERRY_DB_DSN": "root@tcp(127.0.0.1:3306)/"}, "FERRY_DB_DSN"},
		{map[string]string{"FERRY_ADDR": "8080"}, "FERRY_ADDR"},
		{map[string]string{"FERRY_METRICS_ADDR": "9090"}, "FERRY_METRICS_ADDR"},
		{map[string]string{"FERRY_ADDR": ":9090", "FERRY_METRICS_ADDR": ":9090"}, "FERRY_METRICS_ADDR"},
		{map[string]string{"FERRY_PPROF": "true"}, "FERRY_PPROF"},
		{map[string]string{"FERRY_PPROF": "yes", "FERRY_METRICS_ADDR": "127.0.0.1:9090"}, "FERRY_PPROF"},
		{map[string]string{"FERRY_PUBLIC_URL": "ftp://x"}, "FERRY_PUBLIC_URL"},
		{map[string]string{"FERRY_PUBLIC_URL": "https://x.example/app"}, "FERRY_PUBLIC_URL"},
		{map[string]string{"FERRY_S3_ENDPOINT": "minio:9000"}, "FERRY_S3_ENDPOINT"},
		{map[string]string{"FERRY_S3_BUCKET": "No_Such"}, "FERRY_S3_BUCKET"},
		{map[string]string{"FERRY_S3_BUCKET": "ab"}, "FERRY_S3_BUCKET"},
		{map[string]string{"FERRY_S3_ACCESS_KEY": "only-one"}, "FERRY_S3_SECRET_KEY"},
		{map[string]string{"FERRY_S3_PATH_STYLE": "maybe"}, "FERRY_S3_PATH_STYLE"},
		{map[string]string{"FERRY_LINK_KEYS": "nokid"}, "FERRY_LINK_KEYS"},
		{map[string]string{"FERRY_LINK_KEYS": "k1:!!!notbase64"}, "FERRY_LINK_KEYS"},
		{map[string]string{"FERRY_LINK_KEYS": "k1:c2hvcnQ="}, "FERRY_LINK_KEYS"},
		{map[string]string{"FERRY_LINK_KEYS": "k 1:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}, "FERRY_LINK_KEYS"},
		{map[string]string{"FERRY_DOWNLOAD_LINK_TTL": "5"}, "FERRY_DOWNLOAD_LINK_TTL"},
		{map[string]string{"FERRY_DOWNLOAD_LINK_MAX_ADDRS": "0"}, "FERRY_DOWNLOAD_LINK_MAX_ADDRS"},
		{map[string]string{"FERRY_UPLOAD_TTL": "-1h"}, "FERRY_UPLOAD_TTL"},
		{map[string]string{"FERRY_PART_SIZE": "1MiB"}, "FERRY_PART_SIZE"},
		{map[string]string{"FERRY_MAX_UPLOAD_SIZE": "lots"}, "FERRY_MAX_UPLOAD_SIZE"},
		{map[string]string{"FERRY_EXPORT_SHARD_SIZE": "0"}, "FERRY_EXPORT_SHARD_SIZE"},
		{map[string]string{"FERRY_JOB_LEASE": "10ms"}, "FERRY_JOB_LEASE"},
		{map[string]string{"FERRY_WEBHOOK_RETRY_SCHEDULE": "30s,,1m"}, "FERRY_WEBHOOK_RETRY_SCHEDULE"},
		{map[string]string{"FERRY_WEBHOOK_ALLOW_PRIVATE": "yes please"}, "FERRY_WEBHOOK_ALLOW_PRIVATE"},
		{map[string]string{"FERRY_CORS_ORIGINS": "app.example.com"}, "FERRY_CORS_ORIGINS"},
		{map[string]string{"FERRY_DOWNLOAD_LOG_RETENTION": "10m"}, "FERRY_DOWNLOAD_LOG_RETENTION"},
		{map[string]string{"FERRY_TRUSTED_PROXIES": "10.0.0.0/33"}, "FERRY_TRUSTED_PROXIES"},
		{map[string]string{"FERRY_TRUSTED_PROXIES": "lb.internal"}, "FERRY_TRUSTED_PROXIES"},
		{map[string]string{"FERRY_RATE_AUTH_FAILURES": "10"}, "FERRY_RATE_AUTH_FAILURES"},
		{map[string]string{"FERRY_RATE_CREATES": "lots/min"}, "FERRY_RATE_CREATES"},
		{map[string]string{"FERRY_TRUSTED_PROXIES": "10.0.0.1,,10.0.0.2"}, "FERRY_TRUSTED_PROXIES"},
		{map[string]string{"FERRY_TRUSTED_PROXIES": "fe80::1%eth0"}, "FERRY_TRUSTED_PROXIES"},
		{map[string]string{"FERRY_LOG_LEVEL": "loud"}, "FERRY_LOG_LEVEL"},
		{map[string]string{"FERRY_LOG_FORMAT": "xml"}, "FERRY_LOG_FORMAT"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(env(c.env))
			if err == nil {
				t.Fatalf("%v accepted", c.env)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "config: "+c.name+": ") || strings.Contains(msg, "\n") {
				t.Fatalf("error %q: want one line starting with config: %s:", msg, c.name)
			}
		})
	}
}

func TestLinkKeysAndRedaction(t *testing.T) {
	c, err := Load(env(map[string]string{
		"FERRY_LINK_KEYS":     "new:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=,old:ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA",
		"FERRY_S3_ACCESS_KEY": "AKIA", "FERRY_S3_SECRET_KEY": "topsecret", "FERRY_S3_ENDPOINT": "http://minio:9000",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.LinkKeys) != 2 || c.LinkKeys[0].ID != "new" || c.S3PublicEndpoint != "http://minio:9000" {
		t.Fatalf("keys %+v public %s", c.LinkKeys, c.S3PublicEndpoint)
	}
	logged := c.LogValue().String()
	for _, secret := range []string{"topsecret", "MDEyMzQ1", "ZmVkY2Jh"} {
		if strings.Contains(logged, secret) {
			t.Fatalf("logged config contains a secret: %s", logged)
		}
	}
}

// .env.example lists every setting with its default, and nothing else.
func TestEnvExampleIsComplete(t *testing.T) {
	f, err := os.Open("../.env.example")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	listed := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "FERRY_") {
			k, v, _ := strings.Cut(line, "=")
			listed[k] = v
		}
	}
	for _, d := range Defaults() {
		v, ok := listed[d[0]]
		if !ok {
			t.Errorf(".env.example lacks %s", d[0])
		} else if v != d[1] {
			t.Errorf(".env.example: %s=%s, but the default is %q", d[0], v, d[1])
		}
		delete(listed, d[0])
	}
	for k := range listed {
		t.Errorf(".env.example lists %s, which ferry does not read", k)
	}
}

func TestUnknown(t *testing.T) {
	got := Unknown([]string{"FERRY_ADDR=:1", "FERRY_BUKCET=x", "HOME=/root", "FERRY_TOKEN=t"})
	if len(got) != 1 || got[0] != "FERRY_BUKCET" {
		t.Fatalf("Unknown = %v", got)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"1024": 1024, "8MiB": 8 << 20, "5TiB": 5 << 40, "1GB": 1e9, "0": 0} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1.5MiB", "10PiB0", "99999999999TiB"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
}
