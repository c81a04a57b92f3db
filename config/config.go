package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/ferry-io/ferry/presign"
)

// Database drivers.
const (
	DriverSQLite = "sqlite"
	DriverMySQL  = "mysql"
)

// Config is every setting ferry reads. The zero value is not valid; use Load.
type Config struct {
	Addr      string // FERRY_ADDR: the HTTP listen address
	PublicURL string // FERRY_PUBLIC_URL: how browsers reach ferry (scheme://host[:port])
	DataDir   string // FERRY_DATA_DIR: absolute; SQLite file, embedded S3 data and generated keys live here

	DBDriver string // FERRY_DB_DRIVER: sqlite or mysql
	DBDSN    string // FERRY_DB_DSN: for mysql, normalised to parseTime=true&loc=UTC

	S3Endpoint       string // FERRY_S3_ENDPOINT: empty starts the embedded S3 server
	S3PublicEndpoint string // FERRY_S3_PUBLIC_ENDPOINT: what browsers reach; presigned URLs are signed for it
	S3Region         string // FERRY_S3_REGION
	S3Bucket         string // FERRY_S3_BUCKET
	S3AccessKey      string // FERRY_S3_ACCESS_KEY
	S3SecretKey      string // FERRY_S3_SECRET_KEY
	S3PathStyle      bool   // FERRY_S3_PATH_STYLE: path-style addressing (MinIO, VersityGW)
	S3CreateBucket   bool   // FERRY_S3_CREATE_BUCKET: create the bucket at start-up if missing
	S3EmbeddedAddr   string // FERRY_S3_EMBEDDED_ADDR: listen address of the embedded S3 server

	LinkKeys        []presign.Key // FERRY_LINK_KEYS: empty generates one key kept in DataDir
	DownloadLinkTTL time.Duration // FERRY_DOWNLOAD_LINK_TTL
	// DownloadLinkMaxAddrs is FERRY_DOWNLOAD_LINK_MAX_ADDRS: a link used from
	// more distinct client addresses than this is reported as forwarded.
	DownloadLinkMaxAddrs int

	UploadTTL        time.Duration // FERRY_UPLOAD_TTL: idle uploads expire after this
	PresignTTL       time.Duration // FERRY_PRESIGN_TTL: lifetime of presigned part URLs
	MaxUploadSize    int64         // FERRY_MAX_UPLOAD_SIZE: bytes
	DefaultPartSize  int64         // FERRY_PART_SIZE: bytes, raised as needed to stay within 10,000 parts
	MergeConcurrency int           // FERRY_MERGE_CONCURRENCY

	ExportRetention    time.Duration // FERRY_EXPORT_RETENTION
	ExportShardSize    int           // FERRY_EXPORT_SHARD_SIZE: messages per shard
	ExportConcurrency  int           // FERRY_EXPORT_CONCURRENCY
	ExportDeleteShards bool          // FERRY_EXPORT_DELETE_SHARDS: delete shard objects after success

	JobLease    time.Duration // FERRY_JOB_LEASE
	JobPoll     time.Duration // FERRY_JOB_POLL: fallback poll interval when no wake-up arrives
	JobAttempts int           // FERRY_JOB_MAX_ATTEMPTS: default attempts before a job is failed

	WebhookRetrySchedule []time.Duration // FERRY_WEBHOOK_RETRY_SCHEDULE: delay after each failed attempt; the last repeats
	WebhookMaxAttempts   int             // FERRY_WEBHOOK_MAX_ATTEMPTS: attempts per delivery before it is failed
	WebhookAllowPrivate  bool            // FERRY_WEBHOOK_ALLOW_PRIVATE

	CORSOrigins     []string      // FERRY_CORS_ORIGINS: extra browser origins besides PublicURL's
	MaxBodyBytes    int64         // FERRY_MAX_BODY: request body limit for JSON APIs
	ShutdownTimeout time.Duration // FERRY_SHUTDOWN_TIMEOUT: how long in-flight work may drain
	LogLevel        slog.Level    // FERRY_LOG_LEVEL: debug, info, warn, error
	LogFormat       string        // FERRY_LOG_FORMAT: json or text
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
	return []setting{
		{"FERRY_ADDR", ":8080", func(c *Config, v string) error {
			if _, _, err := net.SplitHostPort(v); err != nil {
				return fmt.Errorf("want host:port, got %q", v)
			}
			c.Addr = v
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
		{"FERRY_UPLOAD_TTL", "24h", durationInto(func(c *Config) *time.Duration { return &c.UploadTTL }, time.Minute)},
		{"FERRY_PRESIGN_TTL", "15m", durationInto(func(c *Config) *time.Duration { return &c.PresignTTL }, time.Second)},
		{"FERRY_MAX_UPLOAD_SIZE", "5TiB", func(c *Config, v string) error {
			n, err := ParseSize(v)
			if err == nil && n <= 0 {
				err = errors.New("must be positive")
			}
			c.MaxUploadSize = n
			return err
		}},
		{"FERRY_PART_SIZE", "8MiB", func(c *Config, v string) error {
			n, err := ParseSize(v)
			if err == nil && (n < 5<<20 || n > 5<<30) {
				err = fmt.Errorf("%s is outside S3's 5MiB-5GiB part size range", v)
			}
			c.DefaultPartSize = n
			return err
		}},
		{"FERRY_MERGE_CONCURRENCY", "2", intInto(func(c *Config) *int { return &c.MergeConcurrency }, 1, 64)},
		{"FERRY_EXPORT_RETENTION", "168h", durationInto(func(c *Config) *time.Duration { return &c.ExportRetention }, time.Minute)},
		{"FERRY_EXPORT_SHARD_SIZE", "200", intInto(func(c *Config) *int { return &c.ExportShardSize }, 1, 1_000_000)},
		{"FERRY_EXPORT_CONCURRENCY", "2", intInto(func(c *Config) *int { return &c.ExportConcurrency }, 1, 64)},
		{"FERRY_EXPORT_DELETE_SHARDS", "true", boolInto(func(c *Config) *bool { return &c.ExportDeleteShards })},
		{"FERRY_JOB_LEASE", "30s", durationInto(func(c *Config) *time.Duration { return &c.JobLease }, time.Second)},
		{"FERRY_JOB_POLL", "2s", durationInto(func(c *Config) *time.Duration { return &c.JobPoll }, 10*time.Millisecond)},
		{"FERRY_JOB_MAX_ATTEMPTS", "5", intInto(func(c *Config) *int { return &c.JobAttempts }, 1, 1000)},
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
		{"FERRY_MAX_BODY", "1MiB", func(c *Config, v string) error {
			n, err := ParseSize(v)
			if err == nil && n < 1024 {
				err = errors.New("must be at least 1KiB")
			}
			c.MaxBodyBytes = n
			return err
		}},
		{"FERRY_SHUTDOWN_TIMEOUT", "30s", durationInto(func(c *Config) *time.Duration { return &c.ShutdownTimeout }, 0)},
		{"FERRY_LOG_LEVEL", "info", func(c *Config, v string) error { return c.LogLevel.UnmarshalText([]byte(v)) }},
		{"FERRY_LOG_FORMAT", "json", func(c *Config, v string) error {
			if v != "json" && v != "text" {
				return fmt.Errorf("want json or text, got %q", v)
			}
			c.LogFormat = v
			return nil
		}},
	}
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

// LogValue renders the Config for start-up logs with every secret redacted.
func (c *Config) LogValue() slog.Value {
	kids := make([]string, len(c.LinkKeys))
	for i, k := range c.LinkKeys {
		kids[i] = k.ID
	}
	return slog.GroupValue(
		slog.String("addr", c.Addr),
		slog.String("public_url", c.PublicURL),
		slog.String("data_dir", c.DataDir),
		slog.String("db_driver", c.DBDriver),
		slog.String("db_dsn", RedactDSN(c.DBDriver, c.DBDSN)),
		slog.String("s3_endpoint", orEmbedded(c)),
		slog.String("s3_public_endpoint", c.S3PublicEndpoint),
		slog.String("s3_region", c.S3Region),
		slog.String("s3_bucket", c.S3Bucket),
		slog.String("s3_access_key", c.S3AccessKey),
		slog.Bool("s3_secret_key_set", c.S3SecretKey != ""),
		slog.Any("link_key_ids", kids),
		slog.String("download_link_ttl", c.DownloadLinkTTL.String()),
		slog.String("upload_ttl", c.UploadTTL.String()),
		slog.String("presign_ttl", c.PresignTTL.String()),
		slog.Int64("max_upload_size", c.MaxUploadSize),
		slog.Int64("part_size", c.DefaultPartSize),
		slog.String("export_retention", c.ExportRetention.String()),
		slog.Int("export_shard_size", c.ExportShardSize),
		slog.String("job_lease", c.JobLease.String()),
		slog.Any("webhook_retry_schedule", durations(c.WebhookRetrySchedule)),
		slog.Int("webhook_max_attempts", c.WebhookMaxAttempts),
		slog.Bool("webhook_allow_private", c.WebhookAllowPrivate),
		slog.Any("cors_origins", c.CORSOrigins),
	)
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

func durations(ds []time.Duration) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.String()
	}
	return out
}
