package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"mvdan.cc/sh/v3/syntax"
)

// docCommandTimeout bounds each documented command.
const docCommandTimeout = 45 * time.Second

// docBlock is one fenced block of a Markdown file.
type docBlock struct {
	File   string // relative to the repository root
	Line   int    // line of the opening fence
	Lang   string // first word of the info string
	NoRun  bool
	Reason string // why a no-run block cannot run
	Text   string // the block's content, fences excluded
}

var fenceLine = regexp.MustCompile("^(\\s*)(```+)\\s*(.*)$")

// parseDocBlocks returns the fenced blocks of a Markdown document.
func parseDocBlocks(file, src string) ([]docBlock, error) {
	var out []docBlock
	lines := strings.Split(src, "\n")
	for i := 0; i < len(lines); i++ {
		m := fenceLine.FindStringSubmatch(lines[i])
		if m == nil || strings.Contains(m[3], "`") {
			// CommonMark: a backtick fence's info string holds no
			// backtick, so ```` ```sh ```` is inline code, not a fence.
			continue
		}
		indent, fence := m[1], m[2]
		b := docBlock{File: file, Line: i + 1}
		info := strings.Fields(m[3])
		if len(info) > 0 {
			b.Lang = info[0]
		}
		if len(info) > 1 && info[1] == "no-run" {
			b.NoRun = true
			b.Reason = strings.Join(info[2:], " ")
		}
		var body []string
		closed := false
		for i++; i < len(lines); i++ {
			if c := fenceLine.FindStringSubmatch(lines[i]); c != nil && len(c[2]) >= len(fence) && c[3] == "" {
				closed = true
				break
			}
			body = append(body, strings.TrimPrefix(lines[i], indent))
		}
		if !closed {
			return nil, fmt.Errorf("%s:%d: fenced block is never closed", file, b.Line)
		}
		b.Text = strings.Join(body, "\n") + "\n"
		out = append(out, b)
	}
	return out, nil
}

// docStmt is one shell command of a block, ready to run.
type docStmt struct {
	Line     int    // in the Markdown file
	Source   string // as written
	Run      string // after the runner's substitutions
	Expect   []int  // announced HTTP statuses
	ExitCode int    // announced exit status
}

var (
	expectComment = regexp.MustCompile(`expect:\s*(?:exit\s+(\d+)|(\d{3}(?:\s*,\s*\d{3})*))`)
	// presetVars are the variables the session starts with; only they may
	// be assigned a placeholder.
	presetVars = map[string]bool{"FERRY": true, "ADMIN": true, "TOKEN": true, "RECEIVER": true}
	envComment = regexp.MustCompile(`<!--\s*TestDocs env:([^>]*)-->`)
	// wordsInAngles is the other placeholder docs write, `<your user id>`:
	// words in angle brackets, which no redirection looks like.
	wordsInAngles = regexp.MustCompile(`<[a-z][a-z0-9]*( [a-z0-9]+)+>`)
)

// splitDocBlock parses a shell block into its commands, applying the
// conventions above; addr replaces localhost:8080.
func splitDocBlock(b docBlock, addr string) ([]docStmt, error) {
	f, err := syntax.NewParser(syntax.KeepComments(true), syntax.Variant(syntax.LangBash)).
		Parse(strings.NewReader(b.Text), b.File)
	if err != nil {
		return nil, fmt.Errorf("%s:%d: not valid bash: %v", b.File, b.Line, err)
	}
	comments := map[uint][]string{} // by line within the block
	syntax.Walk(f, func(n syntax.Node) bool {
		if c, ok := n.(*syntax.Comment); ok {
			comments[c.Pos().Line()] = append(comments[c.Pos().Line()], c.Text)
		}
		return true
	})
	var out []docStmt
	for _, st := range f.Stmts {
		start, end := st.Pos(), st.End()
		s := docStmt{Line: b.Line + int(start.Line()), Source: b.Text[start.Offset():end.Offset()]}
		for l := start.Line(); l <= end.Line(); l++ {
			for _, c := range comments[l] {
				m := expectComment.FindStringSubmatch(c)
				switch {
				case m == nil:
				case m[1] != "":
					s.ExitCode, _ = strconv.Atoi(m[1])
				default:
					for _, code := range strings.Split(m[2], ",") {
						n, _ := strconv.Atoi(strings.TrimSpace(code))
						s.Expect = append(s.Expect, n)
					}
				}
			}
		}
		// Placeholders: a preset variable keeps its value; any other is
		// a value the doc should have taken from an earlier answer.
		run := []byte(s.Source)
		var edits []struct {
			from, to uint
			repl     string
		}
		syntax.Walk(st, func(n syntax.Node) bool {
			a, ok := n.(*syntax.Assign)
			if !ok || a.Value == nil || a.Name == nil {
				return true
			}
			v := b.Text[a.Value.Pos().Offset():a.Value.End().Offset()]
			if strings.Contains(v, "…") && presetVars[a.Name.Value] {
				edits = append(edits, struct {
					from, to uint
					repl     string
				}{a.Value.Pos().Offset() - start.Offset(), a.Value.End().Offset() - start.Offset(), `"$` + a.Name.Value + `"`})
			}
			return true
		})
		sort.Slice(edits, func(i, j int) bool { return edits[i].from > edits[j].from })
		for _, e := range edits {
			run = append(run[:e.from], append([]byte(e.repl), run[e.to:]...)...)
		}
		s.Run = strings.ReplaceAll(string(run), "localhost:8080", addr)
		if strings.Contains(s.Run, "…") || wordsInAngles.MatchString(s.Run) {
			return nil, fmt.Errorf("%s:%d: placeholder in a command: %s\n"+
				"take the value from an earlier answer into a variable (see e2e/docs_test.go), or mark the block no-run",
				b.File, s.Line, s.Source)
		}
		out = append(out, s)
	}
	return out, nil
}

// docSession is one bash process that runs a file's commands in turn.
type docSession struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	dir   string // where each command's text is written
	n     int
	marks string // the file curl's status marks (and its stderr) go to
}

const (
	docEndMark  = "__FERRY_DOC_END__"
	docHTTPMark = "__FERRY_DOC_HTTP__"
)

// docPrelude is sourced first: it makes curl report every answer's status
// (with its stderr, into the file $FERRY_DOC_MARKS names, so pipes and
// $(…) see only the body and a body written by tee cannot interleave with
// a mark on one pipe) and routes
// `go run ./cmd/ferry` to the built binary. There is no pipefail, as in a
// reader's shell (`head -c N | tail` must not fail on SIGPIPE); a curl
// that got no answer at all reports status 000, which fails the command.
const docPrelude = `curl() { command curl "$@" -w '%{stderr}\n` + docHTTPMark + ` %{http_code} %{method} %{url_effective}\n' 2>>"$FERRY_DOC_MARKS"; }
go() { if [ "$1" = run ] && [ "$2" = ./cmd/ferry ]; then shift 2; ferry "$@"; else command go "$@"; fi; }
`

func startDocSession(t *testing.T, env []string, work string) *docSession {
	t.Helper()
	s := &docSession{t: t, dir: t.TempDir(), lines: make(chan string, 1024)}
	s.marks = filepath.Join(s.dir, "curl-marks")
	cmd := exec.Command("bash", "--noprofile", "--norc")
	cmd.Dir = work
	cmd.Env = append(env, "FERRY_DOC_MARKS="+s.marks)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if s.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	s.cmd = cmd
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		pr.Close()
	}()
	t.Cleanup(s.close)
	if _, _, err := s.run(docPrelude, 10*time.Second); err != nil {
		t.Fatalf("bash prelude: %v", err)
	}
	return s
}

// run sources text in the session and returns what it printed (without
// the status marks), the HTTP answers curl saw and the exit status.
func (s *docSession) run(text string, within time.Duration) (out string, answers []docAnswer, err error) {
	s.n++
	file := filepath.Join(s.dir, fmt.Sprintf("cmd%03d.sh", s.n))
	if err := os.WriteFile(file, []byte(text+"\n"), 0o600); err != nil {
		return "", nil, err
	}
	if err := os.WriteFile(s.marks, nil, 0o600); err != nil {
		return "", nil, err
	}
	// stdin is /dev/null: a command that reads it must not eat the next.
	fmt.Fprintf(s.stdin, "source %q </dev/null; printf '\\n%s %%d\\n' \"$?\"\n", file, docEndMark)
	var b strings.Builder
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case line, ok := <-s.lines:
			if !ok {
				return b.String(), answers, fmt.Errorf("bash exited")
			}
			if rest, found := strings.CutPrefix(line, docEndMark+" "); found {
				code, _ := strconv.Atoi(rest)
				answers = s.readMarks(&b)
				out := strings.TrimSuffix(b.String(), "\n")
				if code != 0 {
					return out, answers, &exitStatus{code}
				}
				return out, answers, nil
			}
			b.WriteString(line)
			b.WriteByte('\n')
		case <-timer.C:
			s.close()
			return b.String(), answers, fmt.Errorf("still running after %s (killed)", within)
		}
	}
}

// readMarks parses what curl wrote to the marks file during one command:
// its status marks become answers, anything else (curl's own error
// messages) goes to the output after what the command printed.
func (s *docSession) readMarks(out *strings.Builder) []docAnswer {
	data, err := os.ReadFile(s.marks)
	if err != nil {
		s.t.Fatalf("curl marks: %v", err)
	}
	var answers []docAnswer
	for _, line := range strings.Split(string(data), "\n") {
		rest, found := strings.CutPrefix(line, docHTTPMark+" ")
		if !found {
			if line != "" {
				out.WriteString(line + "\n")
			}
			continue
		}
		f := strings.SplitN(rest, " ", 3)
		code, _ := strconv.Atoi(f[0])
		a := docAnswer{Status: code}
		if len(f) == 3 {
			a.Method, a.URL = f[1], f[2]
		}
		answers = append(answers, a)
	}
	return answers
}

type docAnswer struct {
	Status      int
	Method, URL string
}

type exitStatus struct{ code int }

func (e *exitStatus) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func (s *docSession) close() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.stdin.Close()
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL) // the whole group, children too
	s.cmd.Wait()
	s.cmd = nil
}

// docFiles lists every Markdown file written by hand, relative to the
// repository root: README.md first, then the rest in path order (docs/,
// docker/README.md, bench/README.md, CONTRIBUTING.md, …). The bench's
// generated results and installed packages are not docs.
func docFiles(t *testing.T) (root string, files []string) {
	_, self, _, _ := runtime.Caller(0)
	root = filepath.Dir(filepath.Dir(self))
	files = []string{"README.md"}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		switch {
		case d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || rel == filepath.Join("bench", "results")):
			return filepath.SkipDir
		case !d.IsDir() && strings.HasSuffix(rel, ".md") && rel != "README.md":
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return root, files
}

// requireTool skips without a program the docs use, or fails when CI
// says the tools are installed (FERRY_TEST_REQUIRE_TOOLS=1).
func requireTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		if os.Getenv("FERRY_TEST_REQUIRE_TOOLS") == "1" {
			t.Fatalf("%s is required (FERRY_TEST_REQUIRE_TOOLS=1) but not installed", name)
		}
		t.Skipf("%s is not installed", name)
	}
}

// TestDocs runs every shell block of the repository's Markdown, as written,
// against a fresh ferry: the documentation is a test, so a command a
// reader copies works. The conventions a doc follows are these, and
// CONTRIBUTING.md ("Documentation that runs") says them for writers:
//
//   - Every fenced block names its language. ```sh and ```bash blocks
//     run; anything else (```text, ```json, ```http, ```go, …) does not.
//     A block with no language fails, so a command cannot hide in one.
//     ```console is refused too: commands go in an sh block and answers
//     in comments, so the block pastes as it is.
//   - ```sh no-run REASON marks a block that cannot run here (Docker,
//     AWS, a real domain, the test suite itself). Each is a skipped
//     subtest with its reason: checked by reading.
//   - A file's blocks run in order in one bash session (variables persist
//     from block to block) against one ferry started for the file with no
//     settings but its addresses and a temporary data directory; a file
//     adds settings in an HTML comment, `<!-- TestDocs env: NAME=VALUE -->`.
//     The session runs in ferry's working directory (so `ferry user
//     create` and `ferry demo seed` reach the server's database, as for a
//     reader) with FERRY (ferry's URL), ADMIN (the administrator token it
//     printed), TOKEN (a fresh user's token), J (the JSON content type
//     header, as the README's tour sets it) and RECEIVER (a webhook
//     receiver on 127.0.0.1 answering 204) set.
//   - localhost:8080 in a command is replaced by that ferry's address.
//   - A placeholder (anything with "…": fry_…, usr_…) may appear in a
//     command only as the value of a preset variable (`export
//     ADMIN=fry_…`), which a reader pastes by hand and the runner keeps
//     as it set it. Any other value comes from an earlier answer through
//     a variable: `curl … | tee alice.json`, then
//     `ALICE=$(jq -r .token alice.json)`.
//   - A command fails when it exits non-zero, when curl gets no answer,
//     or when curl gets a 4xx or 5xx, unless a comment on one of its lines
//     announces it: `# expect: 401`, `# expect: 403, 404`, `# expect:
//     exit 4`. An announced answer that does not come fails too.
//   - `ferry` on PATH and `go run ./cmd/ferry` are the binary the tests
//     built. Each command has docCommandTimeout.
//
// A failure names the file and line of the command, and prints the
// command, its output and ferry's last requests.
func TestDocs(t *testing.T) {
	for _, tool := range []string{"bash", "curl", "jq", "openssl", "xxd", "sha256sum"} {
		requireTool(t, tool)
	}
	root, files := docFiles(t)
	// Files run side by side, each on its own ferry, a few at a time: under
	// -race a ferry takes seconds to start, and the docs' commands mostly
	// wait on it.
	slots := make(chan struct{}, 3)
	for _, file := range files {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			slots <- struct{}{}
			defer func() { <-slots }()
			src, err := os.ReadFile(filepath.Join(root, file))
			if err != nil {
				t.Fatal(err)
			}
			blocks, err := parseDocBlocks(file, string(src))
			if err != nil {
				t.Fatal(err)
			}
			env := map[string]string{}
			for _, m := range envComment.FindAllStringSubmatch(string(src), -1) {
				for _, kv := range strings.Fields(m[1]) {
					if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "FERRY_") {
						env[k] = v
					}
				}
			}
			runDocFile(t, blocks, env)
		})
	}
}

func runDocFile(t *testing.T, blocks []docBlock, settings map[string]string) {
	runnable := false
	for _, b := range blocks {
		runnable = runnable || (b.Lang == "sh" || b.Lang == "bash") && !b.NoRun
	}
	// One ferry and one session for the file, owned by the file's test so
	// that they outlive each block's subtest.
	var session *docSession
	var f *Ferry
	if runnable {
		f = Start(t, Options{Env: settings})
		receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusNoContent)
		}))
		t.Cleanup(receiver.Close)
		_, user := f.CreateUser("reader", false)
		bin := t.TempDir()
		if err := os.Symlink(ferryBinary(t), filepath.Join(bin, "ferry")); err != nil {
			t.Fatal(err)
		}
		// The other download clients the docs show: CI installs them
		// (.ci/tools) and requires them; elsewhere a missing one is a
		// stub on PATH that says so, so the rest of the block runs.
		for _, tool := range []string{"wget", "aria2c"} {
			if _, err := exec.LookPath(tool); err == nil {
				continue
			}
			if os.Getenv("FERRY_TEST_REQUIRE_TOOLS") == "1" {
				t.Fatalf("%s is required (FERRY_TEST_REQUIRE_TOOLS=1) but not installed", tool)
			}
			t.Logf("%s is not installed: the commands that use it are not run", tool)
			stub := fmt.Sprintf("#!/bin/sh\necho '(%s is not installed: not run)'\n", tool)
			if err := os.WriteFile(filepath.Join(bin, tool), []byte(stub), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		env := append(cleanEnv(), "PATH="+bin+":"+os.Getenv("PATH"),
			"FERRY="+f.URL, "ADMIN="+f.Token, "TOKEN="+user, "J=Content-Type: application/json",
			"RECEIVER="+receiver.URL+"/hooks/ferry")
		session = startDocSession(t, env, f.Dir)
	}
	failed := ""
	for _, b := range blocks {
		if b.Lang != "" && b.Lang != "console" && b.Lang != "sh" && b.Lang != "bash" {
			continue // not a command: text, json, go, …
		}
		t.Run(fmt.Sprintf("L%d", b.Line), func(t *testing.T) {
			switch {
			case b.Lang == "":
				t.Fatalf("%s:%d: fenced block without a language: tag it ```sh (run by TestDocs), "+
					"```sh no-run REASON (checked by reading), or ```text, ```json, … (not a command)", b.File, b.Line)
			case b.Lang == "console":
				t.Fatalf("%s:%d: ```console blocks are not run: write the commands in an sh block, answers as comments", b.File, b.Line)
			case b.NoRun:
				if b.Reason == "" {
					t.Fatalf("%s:%d: no-run block without a reason (```sh no-run WHY)", b.File, b.Line)
				}
				t.Skipf("%s:%d: checked by reading, not run: %s", b.File, b.Line, b.Reason)
			case failed != "":
				t.Skipf("not run: %s failed before it, and this block may depend on it", failed)
			}
			stmts, err := splitDocBlock(b, strings.TrimPrefix(f.URL, "http://"))
			if err != nil {
				failed = fmt.Sprintf("%s:%d", b.File, b.Line)
				t.Fatal(err)
			}
			for _, s := range stmts {
				msg, out := runDocStmt(session, s)
				if msg == "" {
					t.Logf("%s:%d: $ %s\n%s", b.File, s.Line, s.Source, indentText(lastLines(out, 20)))
					continue
				}
				failed = fmt.Sprintf("%s:%d", b.File, s.Line)
				t.Fatalf("%s:%d: %s\n$ %s\n%s\nferry's last requests:\n%s",
					b.File, s.Line, msg, s.Source, indentText(lastLines(out, 60)), indentText(lastLines(requestLog(f), 6)))
			}
		})
	}
}

// runDocStmt runs one command and says what was wrong with it, or "", and
// what it printed.
func runDocStmt(s *docSession, st docStmt) (problem, out string) {
	out, answers, err := s.run(st.Run, docCommandTimeout)
	var es *exitStatus
	isExit := errors.As(err, &es)
	switch {
	case err == nil && st.ExitCode != 0:
		return fmt.Sprintf("exit status 0, but the doc announces exit %d", st.ExitCode), out
	case err != nil && !isExit:
		return err.Error(), out
	case isExit && es.code != st.ExitCode:
		return fmt.Sprintf("exit status %d (announce it with `# expect: exit %d` if the doc means it)", es.code, es.code), out
	}
	seen := map[int]bool{}
	for _, a := range answers {
		seen[a.Status] = true
		if a.Status == 0 {
			return fmt.Sprintf("no HTTP answer from %s %s (curl could not connect or was cut off)", a.Method, a.URL), out
		}
		if a.Status >= 400 && !slices.Contains(st.Expect, a.Status) {
			return fmt.Sprintf("HTTP %d from %s %s (announce it with `# expect: %d` if the doc means it)", a.Status, a.Method, a.URL, a.Status), out
		}
	}
	for _, want := range st.Expect {
		if !seen[want] {
			return fmt.Sprintf("the doc announces HTTP %d, but curl's answers were %v", want, answers), out
		}
	}
	return "", out
}

// requestLog is ferry's log of the requests it answered, the lines that
// say which route refused a documented command and why.
func requestLog(f *Ferry) string {
	var b strings.Builder
	for _, l := range strings.Split(f.Stderr(), "\n") {
		if strings.Contains(l, `"msg":"http request"`) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// lastLines is the end of s, at most n lines.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"…"}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

func indentText(s string) string { return "    " + strings.ReplaceAll(s, "\n", "\n    ") }
