package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/versity/versitygw/backend/meta"
	"github.com/versity/versitygw/backend/posix"
	"github.com/versity/versitygw/embedgw"

	"github.com/ferry-io/ferry/internal/random"
)

// Server is a running embedded S3 server.
type Server struct {
	// Endpoint is the server's URL, such as http://127.0.0.1:9310.
	Endpoint  string
	AccessKey string
	SecretKey string

	done chan error
}

type credentials struct {
	AccessKey string `json:"access_key"`
	SecretKey string `json:"secret_key"`
}

// Start runs the server on addr (host:port), storing under dataDir, and
// returns once it accepts connections. It stops when ctx ends; Wait
// returns after it has.
func Start(ctx context.Context, dataDir, addr string) (*Server, error) {
	if !filepath.IsAbs(dataDir) {
		return nil, fmt.Errorf("embedded s3: data dir %q must be absolute", dataDir)
	}
	root := filepath.Join(dataDir, "s3")
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("embedded s3: %w", err)
	}
	creds, err := loadOrCreateCredentials(filepath.Join(dataDir, "s3-credentials.json"))
	if err != nil {
		return nil, err
	}
	// Fail early and clearly if the port is taken, instead of inside the
	// gateway's goroutine.
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("embedded s3: listen %s: %w (set FERRY_S3_EMBEDDED_ADDR to a free address)", addr, err)
	}
	l.Close()

	be, err := newBackend(dataDir, root)
	if err != nil {
		return nil, err
	}
	s := &Server{Endpoint: "http://" + addr, AccessKey: creds.AccessKey, SecretKey: creds.SecretKey, done: make(chan error, 1)}
	go func() {
		s.done <- embedgw.RunVersityGW(ctx, be, &embedgw.Config{
			RootUserAccess:    creds.AccessKey,
			RootUserSecret:    creds.SecretKey,
			Ports:             []string{addr},
			MaxConnections:    1024,
			MaxRequests:       512,
			MultipartMaxParts: 10000,
			KeepAlive:         true,
			Quiet:             true,
		})
	}()
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return s, nil
		}
		select {
		case err := <-s.done:
			return nil, fmt.Errorf("embedded s3: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("embedded s3: not listening on %s after 15s", addr)
		}
	}
}

// newBackend prefers extended attributes for object metadata and falls back
// to a sidecar directory on file systems without user xattrs (some
// container overlays).
func newBackend(dataDir, root string) (*posix.Posix, error) {
	// CopyObject takes sources up to S3's own 5 GiB limit (VersityGW's
	// zero default refuses every copy).
	opts := posix.PosixOpts{CopyObjectThreshold: 5 << 30}
	if err := (meta.XattrMeta{}).Test(root); err == nil {
		be, err := posix.New(root, meta.XattrMeta{}, opts)
		if err == nil {
			return be, nil
		}
	}
	side := filepath.Join(dataDir, "s3-meta")
	if err := os.MkdirAll(side, 0o700); err != nil {
		return nil, fmt.Errorf("embedded s3: %w", err)
	}
	sc, err := meta.NewSideCar(side)
	if err != nil {
		return nil, fmt.Errorf("embedded s3: %w", err)
	}
	opts.SideCarDir = side
	be, err := posix.New(root, sc, opts)
	if err != nil {
		return nil, fmt.Errorf("embedded s3: %w", err)
	}
	return be, nil
}

// Wait blocks until the server has stopped after its context ended.
func (s *Server) Wait() error {
	err := <-s.done
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func loadOrCreateCredentials(path string) (credentials, error) {
	var c credentials
	b, err := os.ReadFile(path)
	if err == nil {
		if err := json.Unmarshal(b, &c); err != nil || c.AccessKey == "" || c.SecretKey == "" {
			return c, fmt.Errorf("embedded s3: %s is corrupt; delete it only together with the s3 directory", path)
		}
		return c, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return c, fmt.Errorf("embedded s3: %w", err)
	}
	c = credentials{AccessKey: "FERRY" + randomHex(8), SecretKey: randomHex(24)}
	b, _ = json.MarshalIndent(c, "", "  ")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return c, fmt.Errorf("embedded s3: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return c, fmt.Errorf("embedded s3: %w", err)
	}
	return c, nil
}

func randomHex(n int) string { return random.Hex(n) }

// Credentials returns the root credentials Start keeps under dataDir, so
// another process (ferry doctor) can talk to a server already running on
// that directory. It fails with an error wrapping os.ErrNotExist when no
// server has started there yet.
func Credentials(dataDir string) (accessKey, secretKey string, err error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "s3-credentials.json"))
	if err != nil {
		return "", "", fmt.Errorf("embedded s3: %w", err)
	}
	var c credentials
	if err := json.Unmarshal(b, &c); err != nil || c.AccessKey == "" || c.SecretKey == "" {
		return "", "", fmt.Errorf("embedded s3: %s is corrupt", filepath.Join(dataDir, "s3-credentials.json"))
	}
	return c.AccessKey, c.SecretKey, nil
}
