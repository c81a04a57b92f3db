package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// tool is a peer binary installed with `go install pkg@version`. It is
// kept in a cache directory instead of go.mod: ferry does not depend on
// it, and its dependency tree would otherwise leak into ferry's.
type tool struct {
	name    string
	pkg     string // the main package to install
	module  string // its module, as `go version -m` names it
	version string
}

func tusdTool() tool {
	return tool{name: "tusd", pkg: "github.com/tus/tusd/v2/cmd/tusd", module: "github.com/tus/tusd/v2", version: "v2.9.1"}
}

func versityTool() tool {
	return tool{name: "versitygw", pkg: "github.com/versity/versitygw/cmd/versitygw", module: "github.com/versity/versitygw", version: "v1.8.0"}
}

// ensureTool returns the path of t's binary under cache, installing it
// first when it is missing or another version. The first install of each
// takes minutes on a small machine; later runs reuse it.
func ensureTool(ctx context.Context, log *slog.Logger, cache string, t tool) (string, error) {
	dir := filepath.Join(cache, t.name+"@"+t.version)
	bin := filepath.Join(dir, t.name)
	if out, err := exec.CommandContext(ctx, "go", "version", "-m", bin).Output(); err == nil &&
		bytes.Contains(out, []byte("\tmod\t"+t.module+"\t"+t.version+"\t")) {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	log.Info("installing (once; this takes a few minutes)", "tool", t.pkg+"@"+t.version, "into", dir)
	start := time.Now()
	// Run outside ferry's module so the install resolves the tool's own
	// go.mod and never touches ours.
	tmp, err := os.MkdirTemp("", "ferry-bench-install-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, "go", "install", t.pkg+"@"+t.version)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %s@%s: %w\n%s", t.pkg, t.version, err, out)
	}
	log.Info("installed", "tool", t.name, "elapsed", time.Since(start).Round(time.Second))
	return bin, nil
}

// buildFerry builds cmd/ferry from the checkout at root into dir.
func buildFerry(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "ferry")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/ferry")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/ferry: %w\n%s", err, out)
	}
	return bin, nil
}

// repoRoot is the directory of ferry's go.mod, found by the go command so
// the bench runs from any directory inside the checkout.
func repoRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("run the bench from inside the ferry checkout (no go.mod found)")
	}
	return filepath.Dir(gomod), nil
}

// process is a peer server the bench started and must stop.
type process struct {
	name string
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
	err  error
}

// startProcess runs bin with its output in logPath. The child gets
// SIGTERM if the bench dies, so no peer outlives an interrupted run.
func startProcess(name, bin string, args, env []string, dir, logPath string) (*process, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: lf, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop asks the process to shut down and kills it if it has not within
// 15 s. It signals only this process, by its pid.
func (p *process) stop() {
	if p == nil || p.exited() {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// tail is the end of the process's log, for error messages.
func (p *process) tail() string {
	b, err := os.ReadFile(p.log.Name())
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// waitHTTP polls url until ok accepts the status, the process exits, or
// the timeout passes.
func waitHTTP(ctx context.Context, p *process, url string, ok func(status int) bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		if p.exited() {
			return fmt.Errorf("%s exited during start-up: %v\n%s", p.name, p.err, p.tail())
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := hc.Do(req); err == nil {
			drain(resp.Body)
			resp.Body.Close()
			if ok(resp.StatusCode) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready at %s after %s\n%s", p.name, url, timeout, p.tail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// freeAddr returns a loopback address nothing listens on right now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// cleanEnv is the bench's environment without ferry, AWS or tusd settings
// from the caller's shell, which would change what is measured.
func cleanEnv(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "FERRY_") || strings.HasPrefix(kv, "AWS_") || strings.HasPrefix(kv, "ROOT_") {
			continue
		}
		out = append(out, kv)
	}
	return append(out, extra...)
}
