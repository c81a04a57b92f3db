package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/ferry-io/ferry/internal/ratelimit"
	"github.com/ferry-io/ferry/presign"
)

// Database drivers.
const (
	DriverSQLite = "sqlite"
	DriverMySQL  = "mysql"
)

// Config is every setting ferry reads. The zero value is not valid; use Load.
type Config struct {
	Addr string // FERRY_ADDR: the HTTP listen address
	// MetricsAddr is FERRY_METRICS_ADDR: when set, /metrics is served on
	// this address only, not on Addr.
	MetricsAddr string
	// PProf is FERRY_PPROF: Go's profiles (net/http/pprof) under
	// /debug/pprof/ on MetricsAddr, which it requires.
	PProf     bool
	PublicURL string // FERRY_PUBLIC_URL: how browsers reach ferry (scheme://host[:port])
	DataDir   string // FERRY_DATA_DIR: absolute; SQLite file, embedded S3 data and generated keys live here

	DBDriver string // FERRY_DB_DRIVER: sqlite or mysql
	DBDSN    string // FERRY_DB_DSN: for mysql, normalised to parseTime=true&loc=UTC, with dial/read/write timeouts unless given

	S3Endpoint       string // FERRY_S3_ENDPOINT: empty starts the embedded S3 server
	S3PublicEndpoint string // FERRY_S3_PUBLIC_ENDPOINT: what browsers reach; presigned URLs are signed for it
	S3Region         string // FERRY_S3_REGION
	S3Bucket         string // FERRY_S3_BUCKET
	S3AccessKey      string // FERRY_S3_ACCESS_KEY
	S3SecretKey      string // FERRY_S3_SECRET_KEY
	S3PathStyle      bool   // FERRY_S3_PATH_STYLE: path-style addressing (MinIO, VersityGW)
	S3CreateBucket   bool   // FERRY_S3_CREATE_BUCKET: create the bucket at start-up if missing
	S3EmbeddedAddr   string // FERRY_S3_EMBEDDED_ADDR: listen address of the embedded S3 server
	// S3MaxParts (FERRY_S3_MAX_PARTS) and S3MaxPartSize
	// (FERRY_S3_MAX_PART_SIZE) are the store's multipart limits; AWS S3's
	// are 10,000 parts of up to 5 GiB.
	S3MaxParts    int
	S3MaxPartSize int64

	LinkKeys        []presign.Key // FERRY_LINK_KEYS: empty generates one key kept in DataDir
	DownloadLinkTTL time.Duration // FERRY_DOWNLOAD_LINK_TTL
	// DownloadLinkMaxAddrs is FERRY_DOWNLOAD_LINK_MAX_ADDRS: a link used from
	// more distinct client addresses than this is reported as forwarded.
	DownloadLinkMaxAddrs int
	// DownloadLogRetention is FERRY_DOWNLOAD_LOG_RETENTION: download-log
	// rows older than this are deleted.
	DownloadLogRetention time.Duration
	// WebhookRetention, JobRetention and UploadRetention are
	// FERRY_WEBHOOK_RETENTION (finished deliveries, their attempts and
	// outbox events), FERRY_JOB_RETENTION (finished job rows) and
	// FERRY_UPLOAD_RETENTION (uploads that ended without a file).
	WebhookRetention, JobRetention, UploadRetention time.Duration

	UploadTTL        time.Duration // FERRY_UPLOAD_TTL: idle uploads expire after this
	PresignTTL       time.Duration // FERRY_PRESIGN_TTL: lifetime of presigned part URLs
	MaxUploadSize    int64         // FERRY_MAX_UPLOAD_SIZE: bytes; empty is all that S3MaxParts parts of S3MaxPartSize hold
	DefaultPartSize  int64         // FERRY_PART_SIZE: bytes, raised as needed to stay within S3MaxParts parts
	MergeConcurrency int           // FERRY_MERGE_CONCURRENCY
	MaxOpenUploads   int           // FERRY_MAX_OPEN_UPLOADS: unfinished uploads per user
	UploadCleanup    time.Duration // FERRY_UPLOAD_CLEANUP_EVERY: period of the upload cleanup job

	// QuotaBytes is FERRY_QUOTA_BYTES: what each user's files may store;
	// QuotaExportsPerDay is FERRY_QUOTA_EXPORTS_PER_DAY: exports each
	// user may create in any 24 hours. 0 is unlimited; the admin API
	// overrides either per user.
	QuotaBytes         int64
	QuotaExportsPerDay int

	ExportRetention    time.Duration // FERRY_EXPORT_RETENTION
	ExportShardSize    int           // FERRY_EXPORT_SHARD_SIZE: messages per shard
	ExportConcurrency  int           // FERRY_EXPORT_CONCURRENCY
	ExportDeleteShards bool          // FERRY_EXPORT_DELETE_SHARDS: delete shard objects after success

	JobLease    time.Duration // FERRY_JOB_LEASE
	JobPoll     time.Duration // FERRY_JOB_POLL: fallback poll interval when no wake-up arrives
	JobAttempts int           // FERRY_JOB_MAX_ATTEMPTS: default attempts before a job is failed
	// JobOutageBackoff is FERRY_JOB_OUTAGE_BACKOFF: the longest wait
	// between runs of a job that found S3 or the database unreachable.
	JobOutageBackoff time.Duration

	WebhookRetrySchedule []time.Duration // FERRY_WEBHOOK_RETRY_SCHEDULE: delay after each failed attempt; the last repeats
	WebhookMaxAttempts   int             // FERRY_WEBHOOK_MAX_ATTEMPTS: attempts per delivery before it is failed
	WebhookAllowPrivate  bool            // FERRY_WEBHOOK_ALLOW_PRIVATE

	CORSOrigins []string // FERRY_CORS_ORIGINS: extra browser origins besides PublicURL's
	// TrustedProxies is FERRY_TRUSTED_PROXIES: the peers whose
	// X-Forwarded-For names the client. Empty (from "none") trusts none.
	TrustedProxies []netip.Prefix
	MaxBodyBytes   int64 // FERRY_MAX_BODY: request body limit for JSON APIs
	// RateAuthFailures is FERRY_RATE_AUTH_FAILURES: refused credentials
	// per client address; RateCreates is FERRY_RATE_CREATES: new uploads,
	// POST policies and exports per user. Per replica; zero is no limit.
	RateAuthFailures ratelimit.Limit
	RateCreates      ratelimit.Limit
	ShutdownTimeout  time.Duration // FERRY_SHUTDOWN_TIMEOUT: how long in-flight work may drain
	LogLevel         slog.Level    // FERRY_LOG_LEVEL: debug, info, warn, error
	LogFormat        string        // FERRY_LOG_FORMAT: json or text

	// JWT is FERRY_JWT_*: the host app's identity provider, whose tokens
	// authenticate its users.
	JWT JWT
}

// Embedded reports whether ferry should run its own S3 server.
func (c *Config) Embedded() bool { return c.S3Endpoint == "" }

// Origins is every browser origin ferry serves: PublicURL's plus CORSOrigins.
func (c *Config) Origins() []string {
	out := []string{originOf(c.PublicURL)}
	for _, o := range c.CORSOrigins {
		if o != out[0] {
			out = append(out, o)
		}
	}
	return out
}

func originOf(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	return p.Scheme + "://" + p.Host
}

// setting describes one FERRY_* variable: its default and how to apply it.
type setting struct {
	name  string
	def   string
	apply func(c *Config, v string) error
}

// settings is the single list of variables. Order matters: later settings
// may read earlier ones (the DSN default needs the data dir and driver).
func settings() []setting {
	return append([]setting{
		{"FERRY_ADDR", ":8080", func(c *Config, v string) error {
			if _, _, err := net.SplitHostPort(v); err != nil {
				return fmt.Errorf("want host:port, got %q", v)
			}
			c.Addr = v
			return nil
		}},
		{"FERRY_METRICS_ADDR", "", func(c *Config, v string) error {
			if v == "" {
				return nil
			}
			if _, _, err := net.SplitHostPort(v); err != nil {
				return fmt.Errorf("want host:port, got %q", v)
			}
			if v == c.Addr {
				return errors.New("must differ from FERRY_ADDR (leave it empty to serve /metrics there)")
			}
			c.MetricsAddr = v
			return nil
		}},
		{"FERRY_PPROF", "false", func(c *Config, v string) error {
			if err := boolInto(func(c *Config) *bool { return &c.PProf })(c, v); err != nil {
				return err
			}
			if c.PProf && c.MetricsAddr == "" {
				return errors.New("needs FERRY_METRICS_ADDR: profiles are served on the metrics listener only, never on FERRY_ADDR")
			}
			return nil
		}},
		{"FERRY_PUBLIC_URL", "", func(c *Config, v string) error {
			if v == "" {
				host, port, _ := net.SplitHostPort(c.Addr)
				if host == "" || host == "0.0.0.0" || host == "::" {
					host = "localhost"
				}
				v = "http://" + net.JoinHostPort(host, port)
			}
			u, err := url.Parse(v)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
				return fmt.Errorf("want an http(s) origin such as https://files.example.com, got %q", v)
			}
			c.PublicURL = u.Scheme + "://" + u.Host
			return nil
		}},
		{"FERRY_DATA_DIR", "./ferry-data", func(c *Config, v string) error {
			abs, err := filepath.Abs(v)
			if err != nil {
				return err
			}
			c.DataDir = abs
			return nil
		}},
		{"FERRY_DB_DRIVER", DriverSQLite, func(c *Config, v string) error {
			if v != DriverSQLite && v != DriverMySQL {
				return fmt.Errorf("unknown driver %q (want sqlite or mysql)", v)
			}
			c.DBDriver = v
			return nil
		}},
		{"FERRY_DB_DSN", "", func(c *Config, v string) error {
			dsn, err := normaliseDSN(c.DBDriver, c.DataDir, v)
			c.DBDSN = dsn
			return err
		}},
		{"FERRY_S3_ENDPOINT", "", func(c *Config, v string) error {
			if v != "" {
				if err := checkHTTPURL(v); err != nil {
					return err
				}
			}
			c.S3Endpoint = strings.TrimRight(v, "/")
			return nil
		}},
		{"FERRY_S3_EMBEDDED_ADDR", "127.0.0.1:9310", func(c *Config, v string) error {
			if _, _, err := net.SplitHostPort(v); err != nil {
				return fmt.Errorf("want host:port, got %q", v)
			}
			c.S3EmbeddedAddr = v
			return nil
		}},
		{"FERRY_S3_PUBLIC_ENDPOINT", "", func(c *Config, v string) error {
			if v == "" {
				v = c.S3Endpoint
				if c.Embedded() {
					v = "http://" + c.S3EmbeddedAddr
				}
			}
			if err := checkHTTPURL(v); err != nil {
				return err
			}
			c.S3PublicEndpoint = strings.TrimRight(v, "/")
			return nil
		}},
		{"FERRY_S3_REGION", "us-east-1", func(c *Config, v string) error { c.S3Region = v; return nonEmpty(v) }},
		{"FERRY_S3_BUCKET", "ferry", func(c *Config, v string) error {
			if !validBucket(v) {
				return fmt.Errorf("%q is not a valid bucket name (3-63 characters of a-z, 0-9, '.', '-')", v)
			}
			c.S3Bucket = v
			return nil
		}},
		{"FERRY_S3_ACCESS_KEY", "", func(c *Config, v string) error { c.S3AccessKey = v; return nil }},
		{"FERRY_S3_SECRET_KEY", "", func(c *Config, v string) error {
			c.S3SecretKey = v
			if (c.S3AccessKey == "") != (v == "") {
				return errors.New("set both FERRY_S3_ACCESS_KEY and FERRY_S3_SECRET_KEY, or neither")
			}
			return nil
		}},
		{"FERRY_S3_PATH_STYLE", "true", boolInto(func(c *Config) *bool { return &c.S3PathStyle })},
		{"FERRY_S3_CREATE_BUCKET", "true", boolInto(func(c *Config) *bool { return &c.S3CreateBucket })},
		{"FERRY_S3_MAX_PARTS", "10000", intInto(func(c *Config) *int { return &c.S3MaxParts }, 1, 10_000)},
		{"FERRY_S3_MAX_PART_SIZE", "5GiB", func(c *Config, v string) error {
			n, err := ParseSize(v)
			if err == nil && (n < 5<<20 || n > 5<<30) {
				err = fmt.Errorf("%s is outside S3's 5MiB-5GiB part size range", v)
			}
			c.S3MaxPartSize = n
			return err
		}},
		{"FERRY_LINK_KEYS", "", func(c *Config, v string) error {
			if v == "" {
				return nil // generated and kept in the data dir at start-up
			}
			keys, err := presign.ParseKeys(v)
			c.LinkKeys = keys
			return err
		}},
		{"FERRY_DOWNLOAD_LINK_TTL", "300s", durationInto(func(c *Config) *time.Duration { return &c.DownloadLinkTTL }, time.Second)},
		{"FERRY_DOWNLOAD_LINK_MAX_ADDRS", "3", intInto(func(c *Config) *int { return &c.DownloadLinkMaxAddrs }, 1, 10_000)},
		{"FERRY_DOWNLOAD_LOG_RETENTION", "720h", durationInto(func(c *Config) *time.Duration { return &c.DownloadLogRetention }, time.Hour)},
		{"FERRY_WEBHOOK_RETENTION", "720h", durationInto(func(c *Config) *time.Duration { return &c.WebhookRetention }, time.Hour)},
		{"FERRY_JOB_RETENTION", "168h", durationInto(func(c *Config) *time.Duration { return &c.JobRetention }, time.Hour)},
		{"FERRY_UPLOAD_RETENTION", "720h", durationInto(func(c *Config) *time.Duration { return &c.UploadRetention }, time.Hour)},
		{"FERRY_UPLOAD_TTL", "24h", durationInto(func(c *Config) *time.Duration { return &c.UploadTTL }, time.Minute)},
		{"FERRY_PRESIGN_TTL", "15m", durationInto(func(c *Config) *time.Duration { return &c.PresignTTL }, time.Second)},
		{"FERRY_MAX_UPLOAD_SIZE", "", func(c *Config, v string) error {
			limit := int64(c.S3MaxParts) * c.S3MaxPartSize
			if v == "" {
				c.MaxUploadSize = limit
				return nil
			}
			n, err := ParseSize(v)
			switch {
			case err != nil:
				return err
			case n <= 0:
				return errors.New("must be positive")
			case n > limit:
				return fmt.Errorf("%s is more than FERRY_S3_MAX_PARTS (%d) parts of FERRY_S3_MAX_PART_SIZE (%d bytes) hold: at most %d bytes", v, c.S3MaxParts, c.S3MaxPartSize, limit)
			}
			c.MaxUploadSize = n
			return nil
		}},
		{"FERRY_PART_SIZE", "8MiB", func(c *Config, v string) error {
			n, err := ParseSize(v)
			if err == nil && (n < 5<<20 || n > c.S3MaxPartSize) {
				err = fmt.Errorf("%s is outside 5MiB to FERRY_S3_MAX_PART_SIZE (%d bytes)", v, c.S3MaxPartSize)
			}
			c.DefaultPartSize = n
			return err
		}},
		{"FERRY_MERGE_CONCURRENCY", "2", intInto(func(c *Config) *int { return &c.MergeConcurrency }, 1, 64)},
		{"FERRY_MAX_OPEN_UPLOADS", "100", intInto(func(c *Config) *int { return &c.MaxOpenUploads }, 1, 1_000_000)},
		{"FERRY_UPLOAD_CLEANUP_EVERY", "5m", durationInto(func(c *Config) *time.Duration { return &c.UploadCleanup }, time.Second)},
		{"FERRY_QUOTA_BYTES", "0", func(c *Config, v string) error {
			n, err := ParseSize(v)
			c.QuotaBytes = n
			return err
		}},
		{"FERRY_QUOTA_EXPORTS_PER_DAY", "0", intInto(func(c *Config) *int { return &c.QuotaExportsPerDay }, 0, 1_000_000)},
		{"FERRY_EXPORT_RETENTION", "168h", durationInto(func(c *Config) *time.Duration { return &c.ExportRetention }, time.Minute)},
		{"FERRY_EXPORT_SHARD_SIZE", "1000", intInto(func(c *Config) *int { return &c.ExportShardSize }, 1, 1_000_000)},
		{"FERRY_EXPORT_CONCURRENCY", "2", intInto(func(c *Config) *int { return &c.ExportConcurrency }, 1, 64)},
		{"FERRY_EXPORT_DELETE_SHARDS", "true", boolInto(func(c *Config) *bool { return &c.ExportDeleteShards })},
		{"FERRY_JOB_LEASE", "30s", durationInto(func(c *Config) *time.Duration { return &c.JobLease }, time.Second)},
		{"FERRY_JOB_POLL", "2s", durationInto(func(c *Config) *time.Duration { return &c.JobPoll }, 10*time.Millisecond)},
		{"FERRY_JOB_MAX_ATTEMPTS", "5", intInto(func(c *Config) *int { return &c.JobAttempts }, 1, 1000)},
		{"FERRY_JOB_OUTAGE_BACKOFF", "1m", durationInto(func(c *Config) *time.Duration { return &c.JobOutageBackoff }, time.Second)},
		{"FERRY_WEBHOOK_RETRY_SCHEDULE", "30s,1m,5m,10m,10m,10m,10m,10m,10m,10m", func(c *Config, v string) error {
			var out []time.Duration
			for _, f := range strings.Split(v, ",") {
				d, err := time.ParseDuration(strings.TrimSpace(f))
				if err != nil || d <= 0 {
					return fmt.Errorf("%q is not a positive duration", f)
				}
				out = append(out, d)
			}
			c.WebhookRetrySchedule = out
			return nil
		}},
		{"FERRY_WEBHOOK_MAX_ATTEMPTS", "10", intInto(func(c *Config) *int { return &c.WebhookMaxAttempts }, 1, 100)},
		{"FERRY_WEBHOOK_ALLOW_PRIVATE", "false", boolInto(func(c *Config) *bool { return &c.WebhookAllowPrivate })},
		{"FERRY_CORS_ORIGINS", "", func(c *Config, v string) error {
			c.CORSOrigins = nil
			for _, o := range strings.Split(v, ",") {
				o = strings.TrimSpace(o)
				if o == "" {
					continue
				}
				u, err := url.Parse(o)
				if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
					return fmt.Errorf("%q is not an origin such as https://app.example.com", o)
				}
				c.CORSOrigins = append(c.CORSOrigins, u.Scheme+"://"+u.Host)
			}
			return nil
		}},
		{"FERRY_TRUSTED_PROXIES", "127.0.0.1,::1", func(c *Config, v string) error {
			ps, err := ParsePrefixes(v)
			c.TrustedProxies = ps
			return err
		}},
		{"FERRY_MAX_BODY", "1MiB", func(c *Config, v string) error {
			n, err := ParseSize(v)
			if err == nil && n < 1024 {
				err = errors.New("must be at least 1KiB")
			}
			c.MaxBodyBytes = n
			return err
		}},
		{"FERRY_RATE_AUTH_FAILURES", "10/min", limitInto(func(c *Config) *ratelimit.Limit { return &c.RateAuthFailures })},
		{"FERRY_RATE_CREATES", "120/min", limitInto(func(c *Config) *ratelimit.Limit { return &c.RateCreates })},
		{"FERRY_SHUTDOWN_TIMEOUT", "30s", durationInto(func(c *Config) *time.Duration { return &c.ShutdownTimeout }, 0)},
		{"FERRY_LOG_LEVEL", "info", func(c *Config, v string) error { return c.LogLevel.UnmarshalText([]byte(v)) }},
		{"FERRY_LOG_FORMAT", "json", func(c *Config, v string) error {
			if v != "json" && v != "text" {
				return fmt.Errorf("want json or text, got %q", v)
			}
			c.LogFormat = v
			return nil
		}},
	}, jwtSettings()...)
}

// Defaults returns each variable's name and default, in order. The
// .env.example test uses it.
func Defaults() [][2]string {
	var out [][2]string
	for _, s := range settings() {
		out = append(out, [2]string{s.name, s.def})
	}
	return out
}

// Load builds a Config from getenv (os.Getenv in production). Unset and
// empty variables take their defaults. The error names the first bad
// variable and fits on one line.
func Load(getenv func(string) string) (*Config, error) {
	c := &Config{}
	for _, s := range settings() {
		v := strings.TrimSpace(getenv(s.name))
		if v == "" {
			v = s.def
		}
		if err := s.apply(c, v); err != nil {
			return nil, fmt.Errorf("config: %s: %w", s.name, err)
		}
	}
	return c, nil
}

// Unknown returns the FERRY_* names in environ that Load does not read,
// which are most likely typos. environ is os.Environ().
func Unknown(environ []string) []string {
	known := map[string]bool{}
	for _, s := range settings() {
		known[s.name] = true
	}
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "FERRY_") && !known[name] && !clientOnly[name] {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// clientOnly are variables read by ferry's CLI client subcommands and tests,
// not by the server.
var clientOnly = map[string]bool{"FERRY_URL": true, "FERRY_TOKEN": true}

func normaliseDSN(driver, dataDir, v string) (string, error) {
	switch driver {
	case DriverSQLite:
		if v == "" {
			return filepath.Join(dataDir, "ferry.db"), nil
		}
		if strings.HasPrefix(v, "file:") {
			return v, nil
		}
		abs, err := filepath.Abs(v)
		return abs, err
	default:
		if v == "" {
			return "", errors.New("required when FERRY_DB_DRIVER=mysql (for example ferry:secret@tcp(127.0.0.1:3306)/ferry)")
		}
		cfg, err := mysql.ParseDSN(v)
		if err != nil {
			return "", fmt.Errorf("malformed DSN: %s", strings.TrimPrefix(err.Error(), "invalid DSN: "))
		}
		if cfg.DBName == "" {
			return "", errors.New("the DSN names no database")
		}
		// ferry stores UTC and scans DATETIME into time.Time; these two are
		// not negotiable, whatever the operator wrote.
		cfg.ParseTime = true
		cfg.Loc = time.UTC
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		if _, ok := cfg.Params["time_zone"]; !ok {
			cfg.Params["time_zone"] = "'+00:00'"
		}
		// Every database call has a bound: a server that accepts and never
		// answers must fail requests (503) and job runs, not hold them.
		if cfg.Timeout == 0 {
			cfg.Timeout = 5 * time.Second
		}
		if cfg.ReadTimeout == 0 {
			cfg.ReadTimeout = 30 * time.Second
		}
		if cfg.WriteTimeout == 0 {
			cfg.WriteTimeout = 30 * time.Second
		}
		return cfg.FormatDSN(), nil
	}
}

func checkHTTPURL(v string) error {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("want an http(s) URL, got %q", v)
	}
	return nil
}

func validBucket(b string) bool {
	if len(b) < 3 || len(b) > 63 {
		return false
	}
	for i, r := range b {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || (r == '-' || r == '.') && i > 0 && i < len(b)-1
		if !ok {
			return false
		}
	}
	return true
}

func nonEmpty(v string) error {
	if v == "" {
		return errors.New("must not be empty")
	}
	return nil
}

func boolInto(field func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", v)
		}
		*field(c) = b
		return nil
	}
}

func intInto(field func(*Config) *int, lo, hi int) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			return fmt.Errorf("want an integer from %d to %d, got %q", lo, hi, v)
		}
		*field(c) = n
		return nil
	}
}

func limitInto(field func(*Config) *ratelimit.Limit) func(*Config, string) error {
	return func(c *Config, v string) error {
		l, err := ratelimit.ParseLimit(v)
		*field(c) = l
		return err
	}
}

func durationInto(field func(*Config) *time.Duration, min time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("want a duration such as 30s or 24h, got %q", v)
		}
		if d < min || d < 0 {
			return fmt.Errorf("%s is shorter than the minimum %s", v, min)
		}
		*field(c) = d
		return nil
	}
}

// ParsePrefixes parses a comma-separated list of CIDR prefixes and single
// addresses (a /32 or /128), or "none" for an empty list. Prefixes are
// masked, so 10.1.2.3/8 reads as 10.0.0.0/8.
func ParsePrefixes(v string) ([]netip.Prefix, error) {
	out := []netip.Prefix{}
	if strings.TrimSpace(v) == "none" {
		return out, nil
	}
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if strings.Contains(f, "/") {
			p, err := netip.ParsePrefix(f)
			if err != nil {
				return nil, fmt.Errorf("%q is not an address or CIDR prefix such as 10.0.0.0/8", f)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("%q is not an address or CIDR prefix such as 10.0.0.0/8", f)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// ParseSize parses a byte count: a plain integer, or a number followed by
// KiB, MiB, GiB or TiB (or KB, MB, GB, TB, which are powers of 1000).
func ParseSize(v string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	mult := int64(1)
	num := v
	for _, u := range units {
		if strings.HasSuffix(v, u.suffix) {
			mult, num = u.mult, strings.TrimSuffix(v, u.suffix)
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || n < 0 || (n > 0 && mult > (1<<62)/n) {
		return 0, fmt.Errorf("want a size such as 1048576 or 8MiB, got %q", v)
	}
	return n * mult, nil
}

// LogValue renders the Config for start-up logs: one attribute for every
// FERRY_* setting, named after it in lower case without the prefix
// (FERRY_S3_BUCKET is s3_bucket), so an operator finds each one, and
// secrets redacted: the S3 secret key shows only whether it is set, link
// keys only their ids, the DSN without its password.
func (c *Config) LogValue() slog.Value {
	kids := make([]string, len(c.LinkKeys))
	for i, k := range c.LinkKeys {
		kids[i] = k.ID
	}
	return slog.GroupValue(
		slog.String("addr", c.Addr),
		slog.String("metrics_addr", c.MetricsAddr),
		slog.Bool("pprof", c.PProf),
		slog.String("public_url", c.PublicURL),
		slog.String("data_dir", c.DataDir),
		slog.String("db_driver", c.DBDriver),
		slog.String("db_dsn", RedactDSN(c.DBDriver, c.DBDSN)),
		slog.String("s3_endpoint", orEmbedded(c)),
		slog.String("s3_embedded_addr", c.S3EmbeddedAddr),
		slog.String("s3_public_endpoint", c.S3PublicEndpoint),
		slog.String("s3_region", c.S3Region),
		slog.String("s3_bucket", c.S3Bucket),
		slog.String("s3_access_key", c.S3AccessKey),
		slog.String("s3_secret_key", redacted(c.S3SecretKey)),
		slog.Bool("s3_path_style", c.S3PathStyle),
		slog.Bool("s3_create_bucket", c.S3CreateBucket),
		slog.Any("link_keys", kids),
		slog.String("download_link_ttl", c.DownloadLinkTTL.String()),
		slog.Int("download_link_max_addrs", c.DownloadLinkMaxAddrs),
		slog.String("download_log_retention", c.DownloadLogRetention.String()),
		slog.String("webhook_retention", c.WebhookRetention.String()),
		slog.String("job_retention", c.JobRetention.String()),
		slog.String("upload_retention", c.UploadRetention.String()),
		slog.String("upload_ttl", c.UploadTTL.String()),
		slog.String("presign_ttl", c.PresignTTL.String()),
		slog.Int("s3_max_parts", c.S3MaxParts),
		slog.Int64("s3_max_part_size", c.S3MaxPartSize),
		slog.Int64("max_upload_size", c.MaxUploadSize),
		slog.Int64("part_size", c.DefaultPartSize),
		slog.Int("merge_concurrency", c.MergeConcurrency),
		slog.Int("max_open_uploads", c.MaxOpenUploads),
		slog.String("upload_cleanup_every", c.UploadCleanup.String()),
		slog.Int64("quota_bytes", c.QuotaBytes),
		slog.Int("quota_exports_per_day", c.QuotaExportsPerDay),
		slog.String("export_retention", c.ExportRetention.String()),
		slog.Int("export_shard_size", c.ExportShardSize),
		slog.Int("export_concurrency", c.ExportConcurrency),
		slog.Bool("export_delete_shards", c.ExportDeleteShards),
		slog.String("job_lease", c.JobLease.String()),
		slog.String("job_poll", c.JobPoll.String()),
		slog.Int("job_max_attempts", c.JobAttempts),
		slog.String("job_outage_backoff", c.JobOutageBackoff.String()),
		slog.Any("webhook_retry_schedule", durations(c.WebhookRetrySchedule)),
		slog.Int("webhook_max_attempts", c.WebhookMaxAttempts),
		slog.Bool("webhook_allow_private", c.WebhookAllowPrivate),
		slog.Any("cors_origins", c.CORSOrigins),
		slog.Any("trusted_proxies", prefixes(c.TrustedProxies)),
		slog.Int64("max_body", c.MaxBodyBytes),
		slog.String("rate_auth_failures", c.RateAuthFailures.String()),
		slog.String("rate_creates", c.RateCreates.String()),
		slog.String("shutdown_timeout", c.ShutdownTimeout.String()),
		slog.String("log_level", c.LogLevel.String()),
		slog.String("log_format", c.LogFormat),
		slog.String("jwt_issuer", c.JWT.Issuer),
		slog.String("jwt_audience", c.JWT.Audience),
		slog.String("jwt_jwks_url", c.JWT.JWKSURL),
		slog.Int("jwt_keys", len(c.JWT.Keys)), // public keys, counted: each is long
		slog.String("jwt_admin_claim", c.JWT.AdminClaim),
	)
}

// redacted shows whether a secret is set, never its value.
func redacted(secret string) string {
	if secret == "" {
		return ""
	}
	return "REDACTED"
}

func orEmbedded(c *Config) string {
	if c.Embedded() {
		return "embedded (" + c.S3EmbeddedAddr + ")"
	}
	return c.S3Endpoint
}

// RedactDSN hides the password in a MySQL DSN.
func RedactDSN(driver, dsn string) string {
	if driver != DriverMySQL {
		return dsn
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "(unparseable)"
	}
	if cfg.Passwd != "" {
		cfg.Passwd = "REDACTED"
	}
	return cfg.FormatDSN()
}

func prefixes(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

func durations(ds []time.Duration) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.String()
	}
	return out
}
