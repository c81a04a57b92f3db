package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"gorm.io/gorm"

	"github.com/ferry-io/ferry/config"
	"github.com/ferry-io/ferry/internal/logctx"
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
	var err error
	code := -1
	switch args[0] {
	case "upload":
		code, err = cmdUpload(args[1:], stdout, stderr)
	case "download":
		code, err = cmdDownload(args[1:], stdout, stderr)
	case "export":
		code, err = cmdExport(args[1:], stdout, stderr)
	case "serve":
		err = cmdServe(args[1:], stdout, stderr)
	case "migrate":
		err = cmdMigrate(args[1:], stdout, stderr)
	case "user":
		err = cmdUser(args[1:], stdout, stderr)
	case "demo":
		err = cmdDemo(args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "ferry", version)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		err = usageError{fmt.Errorf("unknown command %q (run 'ferry help')", args[0])}
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

const usage = `ferry moves large files in and out of object storage.

Usage:
  ferry serve                     run the API server and background workers
  ferry migrate                   apply database migrations and exit
  ferry user create NAME [--admin]
                                  create a user and print its API token
  ferry demo seed [--users N] [--conversations N] [--messages N] [--seed S]
                                  fill the database with synthetic chat history
  ferry version                   print the version

Client commands (server and token from --server/--token or FERRY_URL/FERRY_TOKEN):
  ferry upload FILE...            upload files (resumes an interrupted upload of the same content)
  ferry download URL -o FILE      download a ferry link, resuming a partial FILE
  ferry export --scope all -o FILE
                                  export your chat history and download it

Client exit codes: 0 ok, 1 other failure (such as a local file error), 2 usage, 3 credentials or link refused,
4 not found or gone, 5 refused or failed, 6 network or server unavailable, 130 interrupted.

Configuration comes from FERRY_* environment variables (see .env.example).
With none set, ferry keeps a SQLite database and an embedded S3 server
under ./ferry-data.
`

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
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return usageError{err}
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

func cmdUser(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "create" {
		return usageError{errors.New("usage: ferry user create NAME [--admin]")}
	}
	fs := flag.NewFlagSet("user create", flag.ContinueOnError)
	fs.SetOutput(stderr)
	admin := fs.Bool("admin", false, "make the user an administrator")
	// Accept the flag before or after the name.
	rest := args[1:]
	var name string
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		name, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return usageError{err}
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
	}
	if name == "" || fs.NArg() > 1 {
		return usageError{errors.New("usage: ferry user create NAME [--admin]")}
	}
	ctx := context.Background()
	db, err := openMigrated(ctx, stderr)
	if err != nil {
		return err
	}
	defer closeDB(db)
	u, token, err := newUsers(db).Create(ctx, name, *admin)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "created user %s (id %s, admin %t)\ntoken (shown once): %s\n", u.Name, u.ID, u.Admin, token)
	return nil
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
