package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ferry-io/ferry/notify/receiver"
)

// config is the app's settings, from flags, each defaulting to an
// environment variable.
type config struct {
	Addr          string
	PublicURL     string
	FerryURL      string
	ServiceKey    string
	WebhookSecret string
	KeyFile       string
	Audience      string
	Users         []string
	MaxUploadSize int64
	TicketTTL     time.Duration
	TokenTTL      time.Duration
}

func parseConfig(args []string) (config, error) {
	fs := flag.NewFlagSet("backend", flag.ContinueOnError)
	env := func(name, def string) string {
		if v, ok := os.LookupEnv(name); ok {
			return v
		}
		return def
	}
	var c config
	var users, maxSize, ticketTTL, tokenTTL string
	fs.StringVar(&c.Addr, "addr", env("BACKEND_ADDR", "127.0.0.1:8090"), "listen address (BACKEND_ADDR)")
	fs.StringVar(&c.PublicURL, "public-url", env("BACKEND_PUBLIC_URL", ""), "how ferry reaches the app; also the JWT issuer, so FERRY_JWT_ISSUER must be exactly this (BACKEND_PUBLIC_URL; default http://<addr>)")
	fs.StringVar(&c.FerryURL, "ferry-url", env("BACKEND_FERRY_URL", "http://localhost:8080"), "ferry's URL (BACKEND_FERRY_URL)")
	fs.StringVar(&c.ServiceKey, "service-key", env("BACKEND_SERVICE_KEY", ""), "ferry service key fsk_… with tickets:create, grants:create and, without -webhook-secret, webhooks:manage (BACKEND_SERVICE_KEY)")
	fs.StringVar(&c.WebhookSecret, "webhook-secret", env("BACKEND_WEBHOOK_SECRET", ""), "the whsec_… of a webhook registered for <public-url>/webhooks/ferry; empty: the app registers its own (BACKEND_WEBHOOK_SECRET)")
	fs.StringVar(&c.KeyFile, "key-file", env("BACKEND_KEY_FILE", ""), "the Ed25519 signing key (PKCS #8 PEM), created if missing; empty: a new key each start (BACKEND_KEY_FILE)")
	fs.StringVar(&c.Audience, "audience", env("BACKEND_AUDIENCE", "ferry"), "aud of the JWTs: ferry's FERRY_JWT_AUDIENCE (BACKEND_AUDIENCE)")
	fs.StringVar(&users, "users", env("BACKEND_USERS", "alice,bob,carol"), "the app's users, comma-separated (BACKEND_USERS)")
	fs.StringVar(&maxSize, "max-upload-size", env("BACKEND_MAX_UPLOAD_SIZE", strconv.Itoa(1<<30)), "largest file a ticket allows, in bytes (BACKEND_MAX_UPLOAD_SIZE)")
	fs.StringVar(&ticketTTL, "ticket-ttl", env("BACKEND_TICKET_TTL", "1h"), "how long a ticket waits for its upload to start (BACKEND_TICKET_TTL)")
	fs.StringVar(&tokenTTL, "token-ttl", env("BACKEND_TOKEN_TTL", "15m"), "lifetime of the JWTs the app mints (BACKEND_TOKEN_TTL)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	var err error
	if c.MaxUploadSize, err = strconv.ParseInt(maxSize, 10, 64); err != nil || c.MaxUploadSize <= 0 {
		return c, fmt.Errorf("-max-upload-size %q: want a positive number of bytes", maxSize)
	}
	if c.TicketTTL, err = time.ParseDuration(ticketTTL); err != nil || c.TicketTTL < time.Second {
		return c, fmt.Errorf("-ticket-ttl %q: want a duration of at least 1s", ticketTTL)
	}
	if c.TokenTTL, err = time.ParseDuration(tokenTTL); err != nil || c.TokenTTL < time.Minute {
		return c, fmt.Errorf("-token-ttl %q: want a duration of at least 1m", tokenTTL)
	}
	for _, u := range strings.Split(users, ",") {
		if u = strings.TrimSpace(u); u != "" {
			c.Users = append(c.Users, u)
		}
	}
	if len(c.Users) < 2 {
		return c, errors.New("-users: name at least two users, one to upload and one to share with")
	}
	if c.ServiceKey == "" {
		return c, errors.New("-service-key (BACKEND_SERVICE_KEY) is required: ferry service-key create backend --scope tickets:create --scope grants:create --scope webhooks:manage")
	}
	c.FerryURL = strings.TrimRight(c.FerryURL, "/")
	if c.PublicURL == "" {
		c.PublicURL = "http://" + c.Addr
	}
	c.PublicURL = strings.TrimRight(c.PublicURL, "/")
	return c, nil
}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg, err := parseConfig(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "backend:", err)
		os.Exit(2)
	}
	if err := run(cfg, log); err != nil {
		log.Error("backend stopped", "err", err)
		os.Exit(1)
	}
}

// run serves the app until SIGINT or SIGTERM, then lets requests in
// flight finish for up to ten seconds. A second signal ends it at once.
func run(cfg config, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	iss, err := newIssuer(cfg.PublicURL, cfg.Audience, cfg.TokenTTL, cfg.KeyFile)
	if err != nil {
		return err
	}
	a := &app{
		log:     log,
		users:   cfg.Users,
		issuer:  iss,
		ferry:   &ferryAPI{base: cfg.FerryURL, key: cfg.ServiceKey, hc: &http.Client{Timeout: 30 * time.Second}},
		posts:   newPosts(),
		maxSize: cfg.MaxUploadSize,
		ticketT: cfg.TicketTTL,
	}

	// Listen before registering the webhook: ferry may deliver the moment
	// it knows the URL.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	hooks := &swapHandler{}
	srv := &http.Server{
		Handler:           a.routes(hooks),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		WriteTimeout:      time.Minute,
		IdleTimeout:       2 * time.Minute,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("backend listening", "addr", ln.Addr().String(), "issuer", iss.url, "jwks", iss.url+"/.well-known/jwks.json",
		"audience", iss.audience, "kid", iss.kid, "ferry", cfg.FerryURL, "users", strings.Join(cfg.Users, ","))

	hookURL := cfg.PublicURL + "/webhooks/ferry"
	secret := cfg.WebhookSecret
	if secret == "" {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		var rotated bool
		secret, rotated, err = a.ferry.registerWebhook(rctx, hookURL)
		cancel()
		if err != nil {
			srv.Close()
			return fmt.Errorf("register webhook %s at ferry: %w", hookURL, err)
		}
		log.Info("webhook registered", "url", hookURL, "secret", map[bool]string{true: "rotated", false: "new"}[rotated])
	}
	v, err := receiver.NewVerifier(secret)
	if err != nil {
		srv.Close()
		return fmt.Errorf("webhook secret: %w", err)
	}
	// receiver.Handler verifies the signature and the timestamp, drops
	// copies of a message it has processed, and only then calls
	// onWebhook. MemoryStore keeps ids for a day: longer than ferry
	// retries (about 70 minutes). Several replicas would share a
	// receiver.SQLStore instead.
	hooks.set(&receiver.Handler{
		Verifier: v,
		Store:    receiver.NewMemoryStore(24*time.Hour, nil),
		Process:  a.onWebhook,
		Log:      log,
	})

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	stop() // from here a second signal ends the process at once
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("backend stopped")
	return nil
}

// swapHandler answers 503 until the webhook handler is ready, so that a
// delivery arriving while the app registers its webhook is retried by
// ferry rather than lost or refused as forged.
type swapHandler struct {
	h atomic.Pointer[receiver.Handler]
}

func (s *swapHandler) set(h *receiver.Handler) { s.h.Store(h) }

func (s *swapHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := s.h.Load()
	if h == nil {
		w.Header().Set("Retry-After", "5")
		http.Error(w, "starting", http.StatusServiceUnavailable)
		return
	}
	h.ServeHTTP(w, r)
}
