package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/config"
	"github.com/ferry-io/ferry/erasure"
	"github.com/ferry-io/ferry/internal/logctx"
	"github.com/ferry-io/ferry/jobs"
	"github.com/ferry-io/ferry/users"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // a runtime failure
	exitUsage   = 2 // bad arguments or configuration
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// usageError is a mistake in the command line or configuration.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		args = []string{"help"}
	}
	switch args[0] {
	case "-h", "-help", "--help":
		args = []string{"help"}
	case "--version":
		args = []string{"version"}
	}
	cmd, rest, group := lookup(args)
	var err error
	code := -1
	switch {
	case cmd != nil:
		code, err = cmd.run(rest, stdout, stderr)
	case len(group) > 0 && len(args) == 2 && isHelpFlag(args[1]):
		printGroup(stdout, group)
		return exitOK
	case len(group) > 0:
		var b strings.Builder
		printGroup(&b, group)
		err = usageError{errors.New(b.String())}
	default:
		err = usageError{fmt.Errorf("unknown command %q (run 'ferry help')", args[0])}
	}
	var help helpRequested
	if errors.As(err, &help) {
		printUsage(stdout, *cmd, help.flags)
		return exitOK
	}
	if err == nil {
		return exitOK
	}
	// One line, always: operators grep for it and supervisors show the
	// last line.
	fmt.Fprintln(stderr, "ferry: "+strings.TrimPrefix(oneLine(err.Error()), "ferry: "))
	if code >= 0 {
		return code
	}
	var ue usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	return exitFailure
}

func isHelpFlag(s string) bool { return s == "-h" || s == "-help" || s == "--help" }

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// loadConfig reads the environment; a bad value is a usage error.
func loadConfig() (*config.Config, error) {
	cfg, err := config.Load(os.Getenv)
	if err != nil {
		return nil, usageError{err}
	}
	return cfg, nil
}

func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	var h slog.Handler = slog.NewJSONHandler(w, opts)
	if cfg.LogFormat == "text" {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(logctx.Handler{Handler: h})
}

func cmdMigrate(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("migrate")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{errors.New("usage: ferry migrate")}
	}
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	ctx := context.Background()
	db, err := openDatabase(ctx, cfg, newLogger(cfg, stderr))
	if err != nil {
		return err
	}
	defer closeDB(db)
	applied, err := migrate(ctx, db)
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintln(stdout, "database is up to date")
	}
	for _, v := range applied {
		fmt.Fprintf(stdout, "applied migration %04d\n", v)
	}
	return nil
}

// cmdUserCreate is "ferry user create".
func cmdUserCreate(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("user create")
	admin := fs.Bool("admin", false, "make the user an administrator")
	// Accept the flag before or after the name.
	rest := args
	var name string
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		name, rest = rest[0], rest[1:]
	}
	if err := parseFlags(fs, rest); err != nil {
		return err
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
	}
	if name == "" || fs.NArg() > 1 {
		return usageError{errors.New("usage: ferry user create NAME [--admin]")}
	}
	return withUsers(stderr, func(ctx context.Context, us *users.Service) error {
		u, token, err := us.Create(ctx, name, *admin)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "created user %s (id %s, admin %t)\ntoken (shown once): %s\n", u.Name, u.ID, u.Admin, token)
		return nil
	})
}

// cmdUserDelete is "ferry user delete ID": package erasure's erasure,
// run on the database. The S3 deletions it queues run on a serving ferry
// (at once on the next start, or at its next poll if one is running).
func cmdUserDelete(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("user delete")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{errors.New("usage: ferry user delete ID")}
	}
	ctx := context.Background()
	db, err := openMigrated(ctx, stderr)
	if err != nil {
		return err
	}
	defer closeDB(db)
	queue, err := jobs.NewQueue(jobs.QueueConfig{DB: db})
	if err != nil {
		return err
	}
	us, err := users.New(users.Config{DB: db})
	if err != nil {
		return err
	}
	eraser, err := erasure.New(erasure.Config{DB: db, Queue: queue, Users: us})
	if err != nil {
		return err
	}
	r, err := eraser.Erase(ctx, "", fs.Arg(0))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "erased user %s (id %s): %d files, %d uploads, %d exports; %d objects queued for deletion from the bucket\n",
		r.Name, r.UserID, r.Files, r.Uploads, r.Exports, r.Objects)
	return nil
}

// cmdUserRotateToken is "ferry user rotate-token ID": a new API token for
// the user, every old one refused from now on.
func cmdUserRotateToken(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("user rotate-token")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{errors.New("usage: ferry user rotate-token ID")}
	}
	return withUsers(stderr, func(ctx context.Context, us *users.Service) error {
		token, err := us.RotateToken(ctx, fs.Arg(0))
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "rotated the token of %s; the old ones are refused from now on\ntoken (shown once): %s\n", fs.Arg(0), token)
		return nil
	})
}

// openMigrated loads the configuration and opens and migrates the
// database, for the one-shot subcommands. The caller closes the database.
func openMigrated(ctx context.Context, stderr io.Writer) (*gorm.DB, error) {
	cfg, err := loadConfig()
	if err != nil {
		return nil, err
	}
	db, err := openDatabase(ctx, cfg, newLogger(cfg, stderr))
	if err != nil {
		return nil, err
	}
	if _, err := migrate(ctx, db); err != nil {
		closeDB(db)
		return nil, err
	}
	return db, nil
}
