package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// cmdHealthcheck asks the ferry serving on FERRY_ADDR whether it is ready.
// It is the container healthcheck: ferry's image is a static binary on an
// empty base, with no shell, curl or wget to do it.
//
// By default it GETs /readyz, which answers 200 only while the database and
// the bucket both answer: a container is healthy when it can serve
// requests, which is what "depends_on: service_healthy" and proxies that
// route by container health need. --live GETs /healthz instead (the process
// answers at all), for orchestrators that restart an unhealthy container,
// where a database outage should not restart every replica.
//
// Every failure exits 1, a bad flag or setting included: Docker reads 0 as
// healthy and 1 as unhealthy, and reserves 2.
func cmdHealthcheck(args []string, stdout, stderr io.Writer) (int, error) {
	fs := newFlags("healthcheck")
	live := fs.Bool("live", false, "check /healthz (the process answers) instead of /readyz (the database and the bucket answer too)")
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this long")
	if err := parseFlags(fs, args); err != nil {
		return exitFailure, err
	}
	if fs.NArg() > 0 || *timeout <= 0 {
		return exitFailure, usageError{errors.New("usage: ferry healthcheck [--live] [--timeout D]")}
	}
	cfg, err := loadConfig()
	if err != nil {
		return exitFailure, err
	}
	path := "/readyz"
	if *live {
		path = "/healthz"
	}
	url := "http://" + dialAddr(cfg.Addr) + path

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return exitFailure, err
	}
	// The check is local: no proxy from the environment, no pooled
	// connection kept for a process that exits at once.
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return exitFailure, fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	// /readyz names the dependency that failed; Docker keeps this line in
	// the container's health log.
	if resp.StatusCode != http.StatusOK {
		return exitFailure, fmt.Errorf("healthcheck: GET %s: %s %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	fmt.Fprintf(stdout, "GET %s: %s %s\n", url, resp.Status, strings.TrimSpace(string(body)))
	return exitOK, nil
}

// dialAddr turns a listen address into one to connect to: a wildcard or
// empty host (":8080", "0.0.0.0:8080", "[::]:8080") is reached on loopback.
func dialAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	switch ip := net.ParseIP(host); {
	case host == "", ip != nil && ip.IsUnspecified() && ip.To4() != nil:
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}
