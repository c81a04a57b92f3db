// Package config reads ferry's settings from FERRY_* environment variables
// into one typed Config.
//
// Load validates every value and fills in the defaults, so the rest of the
// program never sees a half-configured Config. A bad value is reported as one
// line naming the variable and what was wrong with it; cmd/ferry prints that
// line and exits non-zero. Config implements slog.LogValuer with secrets
// redacted, so it can be logged at start-up.
//
// Every setting and its default is listed in the repository's .env.example,
// and a test keeps that file and Load in step.
package config
