package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"gorm.io/gorm"

	"github.com/ferry-io/ferry/chat"
	"github.com/ferry-io/ferry/config"
	"github.com/ferry-io/ferry/download"
	"github.com/ferry-io/ferry/export"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/models"
	"github.com/ferry-io/ferry/notify"
	"github.com/ferry-io/ferry/presign"
	"github.com/ferry-io/ferry/s3store"
	"github.com/ferry-io/ferry/s3store/embedded"
	"github.com/ferry-io/ferry/server"
	"github.com/ferry-io/ferry/upload"
	"github.com/ferry-io/ferry/users"
	"github.com/ferry-io/ferry/web"
)

const sessionTTL = 7 * 24 * time.Hour

func cmdServe(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return usageError{err}
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

	// The first SIGINT/SIGTERM starts a graceful shutdown; a second one
	// exits at once.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // restore default handling: the next signal kills us
	}()

	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}

	// Storage outlives the HTTP server and the workers during shutdown, so
	// it runs on its own context, ended last.
	storeCtx, stopStore := context.WithCancel(context.Background())
	defer stopStore()
	var gw *embedded.Server
	if cfg.Embedded() {
		gw, err = embedded.Start(storeCtx, cfg.DataDir, cfg.S3EmbeddedAddr)
		if err != nil {
			return err
		}
		cfg.S3Endpoint = gw.Endpoint
		cfg.S3AccessKey, cfg.S3SecretKey = gw.AccessKey, gw.SecretKey
		log.Info("embedded s3 started", "endpoint", gw.Endpoint, "dir", filepath.Join(cfg.DataDir, "s3"))
	}

	db, err := openDatabase(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer closeDB(db)
	applied, err := migrate(ctx, db)
	if err != nil {
		return err
	}
	if len(applied) > 0 {
		log.Info("migrations applied", "versions", applied)
	}

	if len(cfg.LinkKeys) == 0 {
		if cfg.LinkKeys, err = loadOrCreateLinkKeys(filepath.Join(cfg.DataDir, "link-keys")); err != nil {
			return err
		}
		if cfg.DBDriver == config.DriverMySQL {
			log.Warn("FERRY_LINK_KEYS is empty: using a key generated in the data dir; replicas must share FERRY_LINK_KEYS or links signed by one fail on another")
		}
	}

	signer, err := presign.NewSigner(cfg.LinkKeys, time.Now)
	if err != nil {
		return err
	}

	store, err := openStore(ctx, cfg, log)
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	usersSvc := newUsers(db)
	if cfg.DBDriver == config.DriverSQLite {
		token, err := usersSvc.Bootstrap(ctx)
		if err != nil {
			return fmt.Errorf("bootstrap admin: %w", err)
		}
		if token != "" {
			fmt.Fprintf(stdout, "\nferry: created the first administrator \"admin\".\nferry: admin token (shown once, keep it): %s\n\n", token)
		}
	}

	queue := jobs.NewQueue(db, time.Now)
	reg.MustRegister(jobs.NewCollector(queue))
	runner := jobs.NewRunner(queue, jobs.RunnerConfig{Lease: cfg.JobLease, Poll: cfg.JobPoll, Log: log, Registerer: reg})

	webhooks := notify.New(db, queue, notify.Options{
		Schedule: cfg.WebhookRetrySchedule, MaxAttempts: cfg.WebhookMaxAttempts, AllowPrivate: cfg.WebhookAllowPrivate,
		Poll: cfg.JobPoll, Log: log, Registerer: reg,
	})
	webhooks.Register(runner)
	uploads, err := upload.New(upload.Config{
		DB: db, Store: store, Queue: queue, Links: signer, Log: log, Registerer: reg,
		TTL: cfg.UploadTTL, PresignTTL: cfg.PresignTTL, MaxSize: cfg.MaxUploadSize, DefaultPartSize: cfg.DefaultPartSize,
		LinkTTL: cfg.DownloadLinkTTL, MergeConcurrency: cfg.MergeConcurrency,
	})
	if err != nil {
		return err
	}
	uploads.Register(runner)

	chatSvc := chat.New(db, uploads, chat.Options{})
	exports := export.New(db, store, queue, signer, export.Options{
		ShardSize: cfg.ExportShardSize, Retention: cfg.ExportRetention, DeleteShards: cfg.ExportDeleteShards,
		Concurrency: cfg.ExportConcurrency, MaxAttempts: cfg.JobAttempts, LinkTTL: cfg.DownloadLinkTTL,
		PublicURL: cfg.PublicURL, Log: log, Registerer: reg,
	})
	exports.Register(runner)

	// The download proxy resolves ids by their prefix, on every request.
	downloads, err := download.New(download.Config{
		DB: db, Storage: store, Users: usersSvc, Signer: signer,
		Resolver: download.Routes{
			"exp_": exportResolver{exports: exports},
			"fil_": fileResolver{uploads: uploads, canSee: chatSvc.CanSeeFile},
		},
		PublicURL: cfg.PublicURL, LinkTTL: cfg.DownloadLinkTTL, MaxLinkAddrs: cfg.DownloadLinkMaxAddrs,
		Log: log, Registerer: reg, Now: time.Now,
	})
	if err != nil {
		return err
	}

	srv := server.New(server.Deps{
		Log:        log,
		Users:      usersSvc,
		Webhooks:   webhooks,
		Uploads:    uploads,
		Downloads:  downloads,
		Chat:       chatSvc,
		Exports:    exports,
		Web:        web.Assets(),
		Gatherer:   reg,
		Registerer: reg,
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
		MaxBodyBytes:  cfg.MaxBodyBytes,
		PublicURL:     cfg.PublicURL,
		Origins:       cfg.Origins(),
		SecureCookies: strings.HasPrefix(cfg.PublicURL, "https://"),
		SessionTTL:    sessionTTL,
	})

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Addr, err)
	}
	httpSrv := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       2 * time.Minute,
		IdleTimeout:       2 * time.Minute,
		// No WriteTimeout: downloads of large files legitimately stream
		// for a long time; idle and header timeouts bound slow clients.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- httpSrv.Serve(ln) }()

	workersCtx, stopWorkers := context.WithCancel(context.WithoutCancel(ctx))
	workersDone := make(chan struct{})
	go func() {
		runner.Run(workersCtx, cfg.ShutdownTimeout)
		close(workersDone)
	}()
	dispatchDone := make(chan struct{})
	go func() {
		webhooks.RunDispatcher(workersCtx)
		close(dispatchDone)
	}()
	log.Info("ferry listening", "addr", ln.Addr().String(), "public_url", cfg.PublicURL)

	select {
	case <-ctx.Done():
	case err := <-serveErr:
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
	httpErr := httpSrv.Shutdown(shutCtx)
	<-workersDone
	<-dispatchDone
	stopStore()
	if gw != nil {
		if err := gw.Wait(); err != nil {
			log.Warn("embedded s3 stopped with error", "err", err)
		}
	}
	if httpErr != nil {
		return fmt.Errorf("shutdown: %w", httpErr)
	}
	log.Info("ferry stopped")
	return nil
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

func newUsers(db *gorm.DB) *users.Service {
	return users.New(db, time.Now, sessionTTL)
}

// openStore builds the S3 adapter and prepares the bucket. An unreachable
// endpoint fails start-up within a few seconds with the endpoint named.
func openStore(ctx context.Context, cfg *config.Config, log *slog.Logger) (*s3store.Store, error) {
	store, err := s3store.New(ctx, s3store.Config{
		Endpoint: cfg.S3Endpoint, PublicEndpoint: cfg.S3PublicEndpoint, Region: cfg.S3Region,
		Bucket: cfg.S3Bucket, AccessKey: cfg.S3AccessKey, SecretKey: cfg.S3SecretKey, PathStyle: cfg.S3PathStyle,
		Timeout: 10 * time.Second,
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
		return nil, fmt.Errorf("s3 endpoint %s bucket %s: %w", cfg.S3Endpoint, cfg.S3Bucket, err)
	}
	for _, w := range rep.Warnings {
		log.Warn("bucket bootstrap", "warning", w)
	}
	log.Info("bucket ready", "bucket", cfg.S3Bucket, "created", rep.Created, "cors", rep.CORS, "lifecycle", rep.Lifecycle)
	return store, nil
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
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	keys := []presign.Key{{ID: "k" + time.Now().UTC().Format("20060102"), Secret: secret}}
	if err := os.WriteFile(path, []byte(presign.FormatKeys(keys)+"\n"), 0o600); err != nil {
		return nil, err
	}
	return keys, nil
}
