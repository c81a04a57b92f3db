package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	httppprof "net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"gorm.io/gorm"

	"github.com/ferry-io/ferry/chat"
	"github.com/ferry-io/ferry/config"
	"github.com/ferry-io/ferry/download"
	"github.com/ferry-io/ferry/erasure"
	"github.com/ferry-io/ferry/export"
	"github.com/ferry-io/ferry/internal/random"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/notify"
	"github.com/ferry-io/ferry/presign"
	"github.com/ferry-io/ferry/quota"
	"github.com/ferry-io/ferry/s3store"
	"github.com/ferry-io/ferry/s3store/embedded"
	"github.com/ferry-io/ferry/server"
	"github.com/ferry-io/ferry/upload"
	"github.com/ferry-io/ferry/users"
	"github.com/ferry-io/ferry/web"
)

func cmdServe(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("serve")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{errors.New("usage: ferry serve")}
	}
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	log := newLogger(cfg, stderr)
	log.Info("ferry starting", "version", version, "config", cfg)
	for _, name := range config.Unknown(os.Environ()) {
		log.Warn("unknown setting ignored; is it a typo?", "name", name)
	}

	ctx, stop := interruptible()
	defer stop()
	a, err := build(ctx, cfg, log, stdout)
	if a != nil {
		defer a.close()
	}
	if err != nil {
		return err
	}
	return a.run(ctx)
}

// app is a built ferry: every service wired, nothing listening yet.
type app struct {
	cfg      *config.Config
	log      *slog.Logger
	reg      *prometheus.Registry
	handler  http.Handler
	runner   *jobs.Runner
	webhooks *notify.Service

	// Storage outlives the HTTP server and the workers during shutdown,
	// so it runs on its own context, ended last.
	stopStore context.CancelFunc
	gw        *embedded.Server // nil unless the embedded S3 runs
	store     *s3store.Store
	db        *gorm.DB
}

// close releases what build acquired, storage last.
func (a *app) close() {
	if a.db != nil {
		closeDB(a.db)
	}
	if a.store != nil {
		// Before the embedded store stops: it waits ten seconds for
		// any connection still open to it.
		a.store.Close()
	}
	a.stopStore()
	if a.gw != nil {
		if err := a.gw.Wait(); err != nil {
			a.log.Warn("embedded s3 stopped with error", "err", err)
		}
	}
}

// build opens the storage and the database, migrates, and wires every
// service and the router. The app it returns, even with an error, must be
// closed.
func build(ctx context.Context, cfg *config.Config, log *slog.Logger, stdout io.Writer) (*app, error) {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	storeCtx, stopStore := context.WithCancel(context.Background())
	a := &app{cfg: cfg, log: log, stopStore: stopStore}
	if cfg.Embedded() {
		gw, err := embedded.Start(storeCtx, cfg.DataDir, cfg.S3EmbeddedAddr)
		if err != nil {
			return a, err
		}
		a.gw = gw
		cfg.S3Endpoint = gw.Endpoint
		cfg.S3AccessKey, cfg.S3SecretKey = gw.AccessKey, gw.SecretKey
		log.Info("embedded s3 started", "endpoint", gw.Endpoint, "dir", filepath.Join(cfg.DataDir, "s3"))
	}

	db, err := openDatabase(ctx, cfg, log)
	if err != nil {
		return a, err
	}
	a.db = db
	applied, err := migrate(ctx, db)
	if err != nil {
		return a, err
	}
	if len(applied) > 0 {
		log.Info("migrations applied", "versions", applied)
	}

	keys, err := linkKeys(cfg, log)
	if err != nil {
		return a, err
	}
	signer, err := presign.NewSigner(keys, time.Now)
	if err != nil {
		return a, err
	}
	a.reg = prometheus.NewRegistry()
	reg := a.reg
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	store, err := openStore(ctx, cfg, reg, log)
	if err != nil {
		return a, err
	}
	a.store = store
	caps := probeStore(ctx, cfg, store, log)

	usersSvc, err := users.New(users.Config{DB: db})
	if err != nil {
		return a, err
	}
	if err := bootstrapAdmin(ctx, cfg, usersSvc, stdout); err != nil {
		return a, err
	}
	jwtVerifier, err := newJWTVerifier(ctx, cfg.JWT, log)
	if err != nil {
		return a, err
	}

	queue, err := jobs.NewQueue(jobs.QueueConfig{DB: db})
	if err != nil {
		return a, err
	}
	reg.MustRegister(jobs.NewCollector(queue))
	a.runner = jobs.NewRunner(queue, jobs.RunnerConfig{Lease: cfg.JobLease, Poll: cfg.JobPoll, Log: log, Registerer: reg,
		OutageBackoffMax: cfg.JobOutageBackoff, Retention: cfg.JobRetention})

	if a.webhooks, err = notify.New(notify.Config{
		DB: db, Queue: queue,
		Schedule: cfg.WebhookRetrySchedule, MaxAttempts: cfg.WebhookMaxAttempts, AllowPrivate: cfg.WebhookAllowPrivate,
		Poll: cfg.JobPoll, Log: log, Registerer: reg, Retention: cfg.WebhookRetention,
	}); err != nil {
		return a, err
	}
	a.webhooks.Register(a.runner)
	usersSvc.Register(a.runner)
	quotas, err := quota.New(quota.Config{DB: db, Defaults: quota.Limits{Bytes: cfg.QuotaBytes, ExportsPerDay: cfg.QuotaExportsPerDay}})
	if err != nil {
		return a, err
	}
	links, err := download.NewLinks(download.LinksConfig{Signer: signer, PublicURL: cfg.PublicURL, TTL: cfg.DownloadLinkTTL})
	if err != nil {
		return a, err
	}
	uploads, err := upload.New(upload.Config{
		DB: db, Store: store, Queue: queue, Links: links, Log: log, Registerer: reg, Quotas: quotas,
		TTL: cfg.UploadTTL, PresignTTL: cfg.PresignTTL, MaxSize: cfg.MaxUploadSize, DefaultPartSize: cfg.DefaultPartSize,
		MaxParts: cfg.S3MaxParts, MaxPartSize: cfg.S3MaxPartSize,
		MergeConcurrency: cfg.MergeConcurrency, MaxOpen: cfg.MaxOpenUploads, Checksums: caps.ChecksumCRC32C,
		PutInsteadOfPost: !caps.PostPolicy, CopyThroughFerry: !caps.CopyObject,
		CleanupEvery: cfg.UploadCleanup, Retention: cfg.UploadRetention,
	})
	if err != nil {
		return a, err
	}
	uploads.Register(a.runner)

	chatSvc, err := chat.New(chat.Config{DB: db, Files: uploads})
	if err != nil {
		return a, err
	}
	exports, err := export.New(export.Config{
		DB: db, Store: store, Queue: queue, Links: links,
		ShardSize: cfg.ExportShardSize, Retention: cfg.ExportRetention, DeleteShards: cfg.ExportDeleteShards,
		Concurrency: cfg.ExportConcurrency, MaxAttempts: cfg.JobAttempts, Log: log, Registerer: reg, ExportsPerDay: quotas.ExportsPerDay,
	})
	if err != nil {
		return a, err
	}
	exports.Register(a.runner)
	eraser, err := erasure.New(erasure.Config{DB: db, Queue: queue, Users: usersSvc, Log: log})
	if err != nil {
		return a, err
	}

	// The download proxy resolves ids by their prefix, on every request.
	downloads, err := download.New(download.Config{
		DB: db, Storage: store, Users: usersSvc, Signer: signer,
		Resolver: download.Routes{
			"exp_": exports,
			"fil_": uploads.Resolver(chatSvc.CanSeeFile),
		},
		MaxLinkAddrs: cfg.DownloadLinkMaxAddrs,
		LogRetention: cfg.DownloadLogRetention, Log: log, Registerer: reg, Now: time.Now,
	})
	if err != nil {
		return a, err
	}
	downloads.Register(a.runner)

	srv, err := server.New(server.Deps{
		Log:              log,
		Users:            usersSvc,
		JWT:              jwtVerifier,
		Webhooks:         a.webhooks,
		Uploads:          uploads,
		Downloads:        downloads,
		Links:            links,
		Chat:             chatSvc,
		Exports:          exports,
		Quotas:           quotas,
		Erasure:          eraser,
		Web:              web.Assets(),
		Gatherer:         reg,
		Registerer:       reg,
		MetricsElsewhere: cfg.MetricsAddr != "",
		Ready: []server.ReadyCheck{
			{Name: "database", Check: func(ctx context.Context) error {
				sqlDB, err := db.DB()
				if err != nil {
					return err
				}
				return sqlDB.PingContext(ctx)
			}},
			{Name: "bucket", Check: store.Ready},
		},
		MaxBodyBytes:     cfg.MaxBodyBytes,
		PublicURL:        cfg.PublicURL,
		Origins:          cfg.Origins(),
		TrustedProxies:   cfg.TrustedProxies,
		AuthFailureLimit: cfg.RateAuthFailures,
		CreateLimit:      cfg.RateCreates,
		SecureCookies:    strings.HasPrefix(cfg.PublicURL, "https://"),
	})
	if err != nil {
		return a, err
	}
	a.handler = srv.Handler()
	return a, nil
}

// run serves HTTP and runs the workers until ctx ends (the first signal),
// then drains both within FERRY_SHUTDOWN_TIMEOUT.
func (a *app) run(ctx context.Context) error {
	cfg, log := a.cfg, a.log
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Addr, err)
	}
	httpSrv := &http.Server{
		Handler:           a.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       2 * time.Minute,
		IdleTimeout:       2 * time.Minute,
		// No WriteTimeout: downloads of large files legitimately stream
		// for a long time; idle and header timeouts bound slow clients.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	serveErr := make(chan error, 2)
	metricsSrv, err := serveMetrics(cfg.MetricsAddr, cfg.PProf, a.reg, log, serveErr)
	if err != nil {
		ln.Close()
		return err
	}
	go func() { serveErr <- httpSrv.Serve(ln) }()

	workersCtx, stopWorkers := context.WithCancel(context.WithoutCancel(ctx))
	workersDone := make(chan struct{})
	go func() {
		a.runner.Run(workersCtx, cfg.ShutdownTimeout)
		close(workersDone)
	}()
	dispatchDone := make(chan struct{})
	go func() {
		a.webhooks.RunDispatcher(workersCtx)
		close(dispatchDone)
	}()
	log.Info("ferry listening", "addr", ln.Addr().String(), "public_url", cfg.PublicURL)

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		if metricsSrv != nil {
			metricsSrv.Close()
		}
		stopWorkers()
		<-workersDone
		<-dispatchDone
		return fmt.Errorf("http server: %w", err)
	}

	// Graceful shutdown: stop accepting and let in-flight requests finish;
	// stop claiming jobs and let running ones finish, then release what is
	// left so another replica takes it at once.
	log.Info("shutting down", "timeout", cfg.ShutdownTimeout.String())
	shutCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	stopWorkers()
	if metricsSrv != nil {
		// Scrapes are short; the main server's drain bounds this too.
		_ = metricsSrv.Shutdown(shutCtx)
	}
	httpErr := httpSrv.Shutdown(shutCtx)
	<-workersDone
	<-dispatchDone
	if httpErr != nil {
		return fmt.Errorf("shutdown: %w", httpErr)
	}
	log.Info("ferry stopped")
	return nil
}

// linkKeys returns the keys that sign download links: FERRY_LINK_KEYS, or
// on a single node a key generated once in the data dir.
func linkKeys(cfg *config.Config, log *slog.Logger) ([]presign.Key, error) {
	if len(cfg.LinkKeys) > 0 {
		return cfg.LinkKeys, nil
	}
	keys, err := loadOrCreateLinkKeys(filepath.Join(cfg.DataDir, "link-keys"))
	if err != nil {
		return nil, err
	}
	if cfg.DBDriver == config.DriverMySQL {
		log.Warn("FERRY_LINK_KEYS is empty: using a key generated in the data dir; replicas must share FERRY_LINK_KEYS or links signed by one fail on another")
	}
	return keys, nil
}

// bootstrapAdmin creates the first administrator on SQLite, the
// single-node default, and prints its token once. On MySQL, where
// replicas share the database, an operator makes one with
// `ferry user create NAME --admin`.
func bootstrapAdmin(ctx context.Context, cfg *config.Config, us *users.Service, stdout io.Writer) error {
	if cfg.DBDriver != config.DriverSQLite {
		return nil
	}
	token, err := us.Bootstrap(ctx)
	if err != nil {
		return fmt.Errorf("bootstrap admin: %w", err)
	}
	if token != "" {
		fmt.Fprintf(stdout, "\nferry: created the first administrator \"admin\".\nferry: admin token (shown once, keep it): %s\n\n", token)
	}
	return nil
}

// serveMetrics serves GET /metrics on addr, when set, on a listener of its
// own (so it can sit on an internal interface), and reports a failure of
// that listener on errc like the main one's. It returns nil when addr is
// empty: the main router serves /metrics then. With pprof it also serves
// Go's profiles there (FERRY_PPROF), so that an operator can see where a
// running replica spends its CPU without a rebuild; they never reach the
// public listener. (Importing net/http/pprof also registers its handlers
// on http.DefaultServeMux, which no ferry listener serves.)
func serveMetrics(addr string, pprof bool, g prometheus.Gatherer, log *slog.Logger, errc chan<- error) (*http.Server, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s (FERRY_METRICS_ADDR): %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", server.MetricsHandler(g))
	write := 30 * time.Second
	if pprof {
		mux.HandleFunc("GET /debug/pprof/", httppprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", httppprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", httppprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", httppprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", httppprof.Trace)
		write = 5 * time.Minute // a CPU profile or trace answers after ?seconds=
	}
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      write,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go func() { errc <- srv.Serve(ln) }()
	log.Info("metrics listening", "addr", ln.Addr().String())
	return srv, nil
}

func openDatabase(ctx context.Context, cfg *config.Config, log *slog.Logger) (*gorm.DB, error) {
	return models.Open(ctx, cfg.DBDriver, cfg.DBDSN, log)
}

func closeDB(db *gorm.DB) {
	if sqlDB, err := db.DB(); err == nil {
		sqlDB.Close()
	}
}

func migrate(ctx context.Context, db *gorm.DB) ([]int, error) {
	applied, err := models.Migrate(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return applied, nil
}

// newJWTVerifier returns the verifier for the host app's JWTs, or nil when
// FERRY_JWT_ISSUER is not set. A JWK Set is fetched now and refetched until
// ctx ends.
func newJWTVerifier(ctx context.Context, cfg config.JWT, log *slog.Logger) (*users.JWTVerifier, error) {
	if !cfg.Enabled() {
		return nil, nil
	}
	v, err := users.NewJWTVerifier(ctx, users.JWTConfig{
		Issuer: cfg.Issuer, Audience: cfg.Audience, JWKSURL: cfg.JWKSURL, Keys: cfg.Keys,
		AdminClaim: cfg.AdminClaim, Log: log,
	})
	if err != nil {
		return nil, err
	}
	log.Info("accepting JWTs", "issuer", cfg.Issuer, "audience", cfg.Audience, "jwks_url", cfg.JWKSURL, "keys", len(cfg.Keys))
	return v, nil
}

// openStore builds the S3 adapter and prepares the bucket. An unreachable
// endpoint fails start-up within a few seconds with the endpoint named.
func openStore(ctx context.Context, cfg *config.Config, reg prometheus.Registerer, log *slog.Logger) (*s3store.Store, error) {
	store, err := s3store.New(ctx, s3store.Config{
		Endpoint: cfg.S3Endpoint, PublicEndpoint: cfg.S3PublicEndpoint, Region: cfg.S3Region,
		Bucket: cfg.S3Bucket, AccessKey: cfg.S3AccessKey, SecretKey: cfg.S3SecretKey, PathStyle: cfg.S3PathStyle,
		Timeout: 10 * time.Second, Registerer: reg,
	})
	if err != nil {
		return nil, err
	}
	bctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	days := int32(cfg.UploadTTL/(24*time.Hour)) + 1
	rep, err := store.Bootstrap(bctx, s3store.BootstrapOptions{
		Create: cfg.S3CreateBucket, Region: cfg.S3Region, CORSOrigins: cfg.Origins(), AbortIncompleteAfterDays: days,
	})
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("s3 endpoint %s bucket %s: %w", cfg.S3Endpoint, cfg.S3Bucket, err)
	}
	// What could not be set is not warned of here: the probe that follows
	// finds whether the bucket has it anyway (an operator may have set it)
	// and warns once, with what ferry does instead.
	log.Info("bucket ready", "bucket", cfg.S3Bucket, "created", rep.Created, "cors", rep.CORS, "lifecycle", rep.Lifecycle,
		"not_set", rep.Warnings)
	return store, nil
}

// probeStore finds out what the store supports (s3store.Store.Probe), logs
// it once, and warns once for each capability it lacks, saying what ferry
// does instead. A probe that cannot run assumes nothing: every fallback.
func probeStore(ctx context.Context, cfg *config.Config, store *s3store.Store, log *slog.Logger) s3store.Capabilities {
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	start := time.Now()
	caps, err := store.Probe(pctx, s3store.ProbeOptions{Origin: cfg.Origins()[0]})
	if err != nil {
		log.Warn("could not probe the store's capabilities; ferry uses every fallback", "err", err)
		return s3store.Capabilities{}
	}
	log.Info("store capabilities", "checksum_crc32c", caps.ChecksumCRC32C, "post_policy", caps.PostPolicy,
		"cors", caps.CORS, "lifecycle", caps.Lifecycle, "copy_object", caps.CopyObject,
		"took", time.Since(start).Round(time.Millisecond).String())
	for _, m := range caps.Missing {
		log.Warn("the store lacks a capability; ferry uses its fallback", "capability", string(m.Capability),
			"evidence", m.Evidence, "fallback", fallback(m.Capability, cfg))
	}
	return caps
}

// fallback says what ferry does without capability c.
func fallback(c s3store.Capability, cfg *config.Config) string {
	switch c {
	case s3store.CapChecksums:
		return "uploads pin each part's Content-MD5 instead of its CRC32C (checksum_algorithm is not granted); ferry still hashes every file after the merge"
	case s3store.CapPostPolicy:
		return "Uppy's single-request uploads (GET /s3/params) get a presigned PUT instead of a POST form"
	case s3store.CapCORS:
		return "none: browsers on " + strings.Join(cfg.Origins(), ", ") + " cannot send parts straight to the bucket until its CORS rule allows PUT from them and exposes ETag (docs/storage.md); the ferry CLI and server-side clients are unaffected"
	case s3store.CapLifecycle:
		return "ferry's cleanup job aborts stale multipart uploads every " + cfg.UploadCleanup.String()
	case s3store.CapCopyObject:
		return "posted uploads are copied to their blob key by streaming them through ferry"
	}
	return "none"
}

// loadOrCreateLinkKeys keeps a generated download-link key in the data dir,
// so links survive restarts of a single node.
func loadOrCreateLinkKeys(path string) ([]presign.Key, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		keys, err := presign.ParseKeys(strings.TrimSpace(string(b)))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return keys, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	keys := []presign.Key{{ID: "k" + time.Now().UTC().Format("20060102"), Secret: random.Bytes(32)}}
	if err := os.WriteFile(path, []byte(presign.FormatKeys(keys)+"\n"), 0o600); err != nil {
		return nil, err
	}
	return keys, nil
}
