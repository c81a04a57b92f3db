package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// command is one thing the binary does. The table in commands is both what
// run dispatches and what "ferry help" prints, so the list a user reads is
// the list the binary answers to.
type command struct {
	name    string // the words that select it: "upload", "service-key create"
	args    string // the synopsis after the name; every flag the command takes is in it
	summary string
	// client commands talk to a ferry server over HTTP and also take the
	// shared client flags (--server, --token, --json, --quiet), which their
	// args leave out.
	client bool
	run    func(args []string, stdout, stderr io.Writer) (int, error)
}

// synopsis is the command as typed: "ferry upload [--concurrency N] FILE...".
func (c command) synopsis() string {
	return strings.TrimSpace("ferry " + c.name + " " + c.args)
}

// plain adapts a command that has no exit code of its own: run picks one
// from the error.
func plain(fn func(args []string, stdout, stderr io.Writer) error) func([]string, io.Writer, io.Writer) (int, error) {
	return func(args []string, stdout, stderr io.Writer) (int, error) { return -1, fn(args, stdout, stderr) }
}

// commands lists every command, in the order "ferry help" shows them.
func commands() []command {
	return []command{
		{name: "serve", summary: "run the API server and background workers", run: plain(cmdServe)},
		{name: "migrate", summary: "apply database migrations and exit", run: plain(cmdMigrate)},
		{name: "healthcheck", args: "[--live] [--timeout D]",
			summary: "exit 0 if the ferry on FERRY_ADDR is ready (GET /readyz), 1 if not",
			run:     cmdHealthcheck},
		{name: "doctor", args: "[--timeout D]",
			summary: "check the database, bucket, CORS, public endpoint, clock, link keys and webhooks; exit 1 naming the setting to change",
			run:     cmdDoctor},
		{name: "user create", args: "NAME [--admin]", summary: "create a user and print its API token", run: plain(cmdUserCreate)},
		{name: "user delete", args: "ID", summary: "erase a user: files, uploads, exports, credentials and grants (one user.deleted webhook)",
			run: plain(cmdUserDelete)},
		{name: "user rotate-token", args: "ID", summary: "give a user a new API token; the old ones stop working", run: plain(cmdUserRotateToken)},
		{name: "service-key create", args: "NAME --scope SCOPE [--scope SCOPE…]",
			summary: "create a service key for a backend and print it", run: plain(cmdServiceKeyCreate)},
		{name: "service-key list", summary: "list service keys with their scopes and last use", run: plain(cmdServiceKeyList)},
		{name: "service-key revoke", args: "ID", summary: "revoke a service key at once", run: plain(cmdServiceKeyRevoke)},
		{name: "demo seed", args: "[--users N] [--conversations N] [--messages N] [--seed S] [--prefix NAME]",
			summary: "fill the database with synthetic users and chat history", run: plain(cmdDemoSeed)},
		{name: "version", summary: "print the version", run: plain(cmdVersion)},
		{name: "help", args: "[COMMAND]", summary: "describe every command, or one", run: cmdHelp},

		{name: "upload", args: "[--concurrency N] [--type CONTENT-TYPE] [--ticket TICKET] [--meta KEY=VALUE]... [--no-instant] FILE...", client: true,
			summary: "upload files (resumes an interrupted upload of the same content)", run: cmdUpload},
		{name: "download", args: "[--sha256] URL -o FILE", client: true,
			summary: "download a ferry link, resuming a partial FILE", run: cmdDownload},
		{name: "export", args: "[--scope all|conv:ID] -o FILE [--new]", client: true,
			summary: "export your chat history and download it", run: cmdExport},
	}
}

// lookup finds the command args start with, and the arguments left for it.
// A group word alone ("user", "service-key") finds no command; its
// commands are returned instead.
func lookup(args []string) (cmd *command, rest []string, group []command) {
	for _, c := range commands() {
		words := strings.Fields(c.name)
		if len(args) >= len(words) && strings.Join(args[:len(words)], " ") == c.name {
			return &c, args[len(words):], nil
		}
		if len(args) > 0 && words[0] == args[0] {
			group = append(group, c)
		}
	}
	return nil, nil, group
}

// helpRequested is what parsing -h, -help or --help gives: run prints the
// command's usage on stdout and exits 0, as a request for help is not a
// mistake.
type helpRequested struct{ flags *flag.FlagSet }

func (helpRequested) Error() string { return "help requested" }

// newFlags returns the flag set of the command name. It prints nothing
// itself: a bad flag comes back from parseFlags as one usage line, -h as
// helpRequested.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseFlags parses args into fs (see newFlags).
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return helpRequested{fs}
	case err != nil:
		return usageError{fmt.Errorf("%w (run 'ferry %s -h')", err, fs.Name())}
	}
	return nil
}

// printUsage writes a command's usage and flags, as -h shows them.
func printUsage(w io.Writer, c command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: %s\n\n%s.\n", c.synopsis(), capitalise(c.summary))
	if fs == nil {
		return
	}
	var flags []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) { flags = append(flags, f) })
	if len(flags) == 0 {
		return
	}
	fmt.Fprintln(w, "\nFlags:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, f := range flags {
		kind, usage := flag.UnquoteUsage(f)
		name := flagName(f)
		if kind != "" {
			name += " " + kind
		}
		if !isZeroDefault(f.DefValue) {
			usage += " (default " + f.DefValue + ")"
		}
		fmt.Fprintf(tw, "  %s\t%s\n", name, usage)
	}
	tw.Flush()
}

// flagName is how help spells a flag: -o, --scope. Go's flag package
// takes one dash or two alike.
func flagName(f *flag.Flag) string {
	if len(f.Name) == 1 {
		return "-" + f.Name
	}
	return "--" + f.Name
}

func isZeroDefault(v string) bool {
	switch v {
	case "", "0", "false", "0s", "[]":
		return true
	}
	return false
}

func capitalise(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// printGroup lists the commands of a group word ("ferry user").
func printGroup(w io.Writer, group []command) {
	fmt.Fprintln(w, "usage:")
	for _, c := range group {
		fmt.Fprintf(w, "  %s\n", c.synopsis())
	}
}

// printHelp writes "ferry help": every command from the table, so the list
// cannot leave one out.
func printHelp(w io.Writer) {
	fmt.Fprint(w, "ferry moves large files in and out of object storage.\n\n"+
		"Usage: ferry COMMAND [ARGUMENTS]; 'ferry COMMAND -h' describes a command and its flags.\n\n"+
		"Server commands (settings from FERRY_* environment variables, see .env.example):\n")
	for _, c := range commands() {
		if !c.client {
			printHelpLine(w, c)
		}
	}
	fmt.Fprintf(w, "\nClient commands (each also takes %s; the server and token default to $FERRY_URL and $FERRY_TOKEN):\n",
		strings.Join(clientFlagSynopses(), ", "))
	for _, c := range commands() {
		if c.client {
			printHelpLine(w, c)
		}
	}
	fmt.Fprint(w, `
Client exit codes: 0 ok, 1 other failure (such as a local file error), 2 usage, 3 credentials or link refused,
4 not found or gone, 5 refused or failed, 6 network or server unavailable, 130 interrupted.

With no FERRY_* variable set, ferry keeps a SQLite database and an embedded
S3 server under ./ferry-data.
`)
}

// printHelpLine writes one command and its summary, the summary on a line
// of its own when the synopsis is long.
func printHelpLine(w io.Writer, c command) {
	const col = 34
	s := "  " + c.synopsis()
	if len(s) < col {
		fmt.Fprintf(w, "%-*s%s\n", col, s, c.summary)
		return
	}
	fmt.Fprintf(w, "%s\n%*s%s\n", s, col, "", c.summary)
}

// clientFlagSynopses are the shared client flags as "--server URL".
func clientFlagSynopses() []string {
	fs := newFlags("client")
	var cf clientFlags
	cf.register(fs)
	var out []string
	fs.VisitAll(func(f *flag.Flag) {
		kind, _ := flag.UnquoteUsage(f)
		out = append(out, strings.TrimSpace(flagName(f)+" "+kind))
	})
	return out
}

// cmdHelp is "ferry help [COMMAND]".
func cmdHelp(args []string, stdout, stderr io.Writer) (int, error) {
	fs := newFlags("help")
	if err := parseFlags(fs, args); err != nil {
		return exitUsage, err
	}
	if fs.NArg() == 0 {
		printHelp(stdout)
		return exitOK, nil
	}
	if err := helpFor(fs.Args(), stdout); err != nil {
		return exitUsage, usageError{err}
	}
	return exitOK, nil
}

// helpFor prints the usage of the command words name, as "ferry NAME -h"
// would. It returns nil or the reason it could not.
func helpFor(name []string, stdout io.Writer) error {
	cmd, _, group := lookup(name)
	switch {
	case cmd != nil:
		// The command's own -h knows its flags.
		_, err := cmd.run([]string{"-h"}, stdout, io.Discard)
		var h helpRequested
		if errors.As(err, &h) {
			printUsage(stdout, *cmd, h.flags)
			return nil
		}
		printUsage(stdout, *cmd, nil)
		return nil
	case len(group) > 0:
		printGroup(stdout, group)
		return nil
	}
	return fmt.Errorf("unknown command %q (run 'ferry help')", strings.Join(name, " "))
}

// cmdVersion is "ferry version".
func cmdVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{errors.New("usage: ferry version")}
	}
	fmt.Fprintln(stdout, "ferry", version)
	return nil
}
