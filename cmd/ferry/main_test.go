package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/ferry-io/ferry/client"
)

// runCLI runs the binary's entry point in this process.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// flagsOf returns the flags command c parses, by asking it for help the
// way "ferry c -h" does.
func flagsOf(t *testing.T, c command) []*flag.Flag {
	t.Helper()
	_, err := c.run([]string{"-h"}, io.Discard, io.Discard)
	var h helpRequested
	if !errors.As(err, &h) {
		t.Fatalf("ferry %s -h: got %v, not a request for help", c.name, err)
	}
	var out []*flag.Flag
	h.flags.VisitAll(func(f *flag.Flag) { out = append(out, f) })
	return out
}

// isolate keeps a command that wrongly ran instead of printing help from
// touching anything but a temporary directory, and puts a secret where the
// client flags' defaults come from.
func isolate(t *testing.T) (dataDir, token string) {
	t.Helper()
	dataDir = t.TempDir()
	token = "fry_secret-token-never-printed"
	for k, v := range map[string]string{
		"FERRY_DATA_DIR": dataDir, "FERRY_TOKEN": token, "FERRY_URL": "http://127.0.0.1:1",
		"FERRY_ADDR": "127.0.0.1:1", "FERRY_S3_EMBEDDED_ADDR": "127.0.0.1:1",
	} {
		t.Setenv(k, v)
	}
	return dataDir, token
}

// -h, -help and --help on every command print its usage and every flag it
// parses on stdout and exit 0, without running it and without printing the
// token the client flags default to.
func TestEveryCommandHelp(t *testing.T) {
	dataDir, token := isolate(t)
	for _, c := range commands() {
		for _, h := range []string{"-h", "-help", "--help"} {
			t.Run(c.name+" "+h, func(t *testing.T) {
				args := append(strings.Fields(c.name), h)
				code, stdout, stderr := runCLI(args...)
				if code != exitOK || stderr != "" {
					t.Fatalf("ferry %s: exit %d, stderr %q; want 0 and nothing", strings.Join(args, " "), code, stderr)
				}
				if !strings.HasPrefix(stdout, "usage: "+c.synopsis()+"\n") {
					t.Fatalf("ferry %s printed:\n%s\nwant it to start with usage: %s", strings.Join(args, " "), stdout, c.synopsis())
				}
				for _, f := range flagsOf(t, c) {
					if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(flagName(f)) + `\b`).MatchString(stdout) {
						t.Errorf("ferry %s does not list its flag %s:\n%s", strings.Join(args, " "), flagName(f), stdout)
					}
				}
				if strings.Contains(stdout, token) {
					t.Fatalf("help printed the token from FERRY_TOKEN:\n%s", stdout)
				}
			})
		}
		t.Run("help "+c.name, func(t *testing.T) {
			code, viaHelp, stderr := runCLI(append([]string{"help"}, strings.Fields(c.name)...)...)
			_, viaFlag, _ := runCLI(append(strings.Fields(c.name), "-h")...)
			if code != exitOK || stderr != "" || viaHelp != viaFlag {
				t.Fatalf("ferry help %s: exit %d, stderr %q, printed\n%s\nwant what -h prints:\n%s", c.name, code, stderr, viaHelp, viaFlag)
			}
		})
	}
	if entries, err := os.ReadDir(dataDir); err != nil || len(entries) > 0 {
		t.Fatalf("asking for help ran a command: the data dir holds %v (%v)", entries, err)
	}
}

var helpLine = regexp.MustCompile(`(?m)^  (ferry .*?)(?:\s{2,}\S.*)?$`)

// helpCommands returns the synopses "ferry help" lists.
func helpCommands(t *testing.T) []string {
	t.Helper()
	code, stdout, _ := runCLI("help")
	if code != exitOK {
		t.Fatalf("ferry help: exit %d", code)
	}
	var out []string
	for _, m := range helpLine.FindAllStringSubmatch(stdout, -1) {
		out = append(out, m[1])
	}
	return out
}

// commandWords is the part of a synopsis that selects the command:
// "ferry service-key create NAME --scope SCOPE" gives [service-key create].
func commandWords(synopsis string) []string {
	var words []string
	for _, w := range strings.Fields(synopsis)[1:] {
		if !regexp.MustCompile(`^[a-z][a-z-]*$`).MatchString(w) {
			break
		}
		words = append(words, w)
	}
	return words
}

// "ferry help" lists exactly the commands the binary dispatches, each with
// every flag it parses; cmd/ferry/doc.go lists the same.
func TestHelpListsEveryCommandAndFlag(t *testing.T) {
	isolate(t)
	listed := helpCommands(t)
	if len(listed) != len(commands()) {
		t.Errorf("ferry help lists %d commands, the binary dispatches %d:\n%s", len(listed), len(commands()), strings.Join(listed, "\n"))
	}
	// Every listed command is dispatched: its words reach a command whose
	// usage is that line.
	for _, syn := range listed {
		words := commandWords(syn)
		cmd, rest, _ := lookup(words)
		if cmd == nil || len(rest) != 0 || cmd.synopsis() != syn {
			t.Errorf("ferry help lists %q, which the binary does not dispatch as such", syn)
		}
	}
	// Every dispatched command is listed, with every flag it parses.
	_, helpText, _ := runCLI("help")
	sharedNote := regexp.MustCompile(`(?m)^Client commands \(each also takes (.*?);`).FindStringSubmatch(helpText)
	shared := map[string]bool{}
	var cf clientFlags
	fs := newFlags("client")
	cf.register(fs)
	fs.VisitAll(func(f *flag.Flag) {
		shared[f.Name] = true
		if sharedNote == nil || !strings.Contains(sharedNote[1], flagName(f)) {
			t.Errorf("ferry help does not say that client commands take %s", flagName(f))
		}
	})
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	docText := strings.Join(strings.Fields(strings.ReplaceAll(string(doc), "//", " ")), " ")
	for _, c := range commands() {
		found := false
		for _, syn := range listed {
			found = found || syn == c.synopsis()
		}
		if !found {
			t.Errorf("ferry help leaves out %q", c.synopsis())
		}
		if !strings.Contains(docText, c.synopsis()+" ") {
			t.Errorf("cmd/ferry/doc.go leaves out %q", c.synopsis())
		}
		for _, f := range flagsOf(t, c) {
			if c.client && shared[f.Name] {
				continue
			}
			if !regexp.MustCompile(`(^|[\[ ])` + regexp.QuoteMeta(flagName(f)) + `\b`).MatchString(c.args) {
				t.Errorf("the synopsis %q leaves out the flag %s", c.synopsis(), flagName(f))
			}
		}
	}
	for _, f := range []string{"--json", "--quiet", "--server URL", "--token TOKEN"} {
		if !strings.Contains(docText, f) {
			t.Errorf("cmd/ferry/doc.go does not mention the client flag %s", f)
		}
	}
}

// The ways of asking for general help all print it and exit 0; a mistake
// is one line on stderr and exit 2.
func TestTopLevelUsage(t *testing.T) {
	isolate(t)
	_, want, _ := runCLI("help")
	for _, args := range [][]string{nil, {"-h"}, {"--help"}, {"-help"}} {
		if code, stdout, stderr := runCLI(args...); code != exitOK || stdout != want || stderr != "" {
			t.Errorf("ferry %v: exit %d, stderr %q, stdout\n%s", args, code, stderr, stdout)
		}
	}
	for _, c := range []struct {
		args []string
		code int
		out  string // on stdout, or on stderr when code is not 0
	}{
		{[]string{"user", "-h"}, exitOK, "  ferry user create NAME [--admin]\n"},
		{[]string{"service-key", "--help"}, exitOK, "  ferry service-key revoke ID\n"},
		{[]string{"user"}, exitUsage, "ferry: usage: ferry user create NAME [--admin] ferry user delete ID ferry user rotate-token ID\n"},
		{[]string{"demo", "sow"}, exitUsage, "ferry: usage: ferry demo seed"},
		{[]string{"nope"}, exitUsage, `ferry: unknown command "nope" (run 'ferry help')` + "\n"},
		{[]string{"help", "nope"}, exitUsage, `ferry: unknown command "nope" (run 'ferry help')` + "\n"},
		{[]string{"upload", "--bogus", "x"}, exitUsage, "ferry: flag provided but not defined: -bogus (run 'ferry upload -h')\n"},
		{[]string{"healthcheck", "--bogus"}, exitFailure, "ferry: flag provided but not defined: -bogus (run 'ferry healthcheck -h')\n"},
		{[]string{"version"}, exitOK, "ferry dev\n"},
		{[]string{"--version"}, exitOK, "ferry dev\n"},
	} {
		code, stdout, stderr := runCLI(c.args...)
		got, other := stderr, stdout
		if c.code == exitOK {
			got, other = stdout, stderr
		}
		if code != c.code || !strings.Contains(got, c.out) || other != "" {
			t.Errorf("ferry %v: exit %d, stdout %q, stderr %q; want exit %d with %q", c.args, code, stdout, stderr, c.code, c.out)
		}
		if code != exitOK && strings.Count(stderr, "\n") != 1 {
			t.Errorf("ferry %v: stderr is not one line: %q", c.args, stderr)
		}
	}
}

func TestDialAddr(t *testing.T) {
	for in, want := range map[string]string{
		":8080":          "127.0.0.1:8080",
		"0.0.0.0:8080":   "127.0.0.1:8080",
		"[::]:8080":      "[::1]:8080",
		"127.0.0.1:9000": "127.0.0.1:9000",
		"10.1.2.3:8080":  "10.1.2.3:8080",
		"localhost:8080": "localhost:8080",
	} {
		if got := dialAddr(in); got != want {
			t.Errorf("dialAddr(%q) = %q, want %q", in, got, want)
		}
	}
}

// An export that ended is gone (4) when revoked or expired, as a 410
// would say, and rejected (5) when it failed; the --new hint wrapped
// around it keeps the code.
func TestClientExitEndedExport(t *testing.T) {
	for _, tc := range []struct {
		state string
		want  int
	}{{"revoked", exitNotFound}, {"expired", exitNotFound}, {"failed", exitRejected}} {
		err := fmt.Errorf("%w; run the command again with --new", &client.ExportError{JobID: "exp_1", State: tc.state})
		if got := clientExit(err); got != tc.want {
			t.Errorf("export %s: exit %d, want %d", tc.state, got, tc.want)
		}
	}
}
