package main

import (
	"context"
	"errors"
	"io"
	"os/signal"
	"syscall"
	"time"

	"github.com/ferry-io/ferry/doctor"
)

// cmdDoctor is "ferry doctor": the checks of package doctor over the
// configuration serve would run with. It exits 1 when a check fails.
func cmdDoctor(args []string, stdout, stderr io.Writer) (int, error) {
	fs := newFlags("doctor")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up on the checks after this long")
	if err := parseFlags(fs, args); err != nil {
		return exitUsage, err
	}
	if fs.NArg() > 0 {
		return exitUsage, usageError{errors.New("usage: ferry doctor [--timeout D]")}
	}
	cfg, err := loadConfig()
	if err != nil {
		return exitUsage, err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	rep := doctor.Run(ctx, cfg, doctor.Options{Log: newLogger(cfg, io.Discard)})
	if err := rep.Write(stdout); err != nil {
		return exitFailure, err
	}
	if rep.Failed() {
		return exitFailure, errors.New("doctor: a check failed; the table says what to change")
	}
	return exitOK, nil
}
