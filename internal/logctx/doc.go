// Package logctx carries request-scoped log attributes (the request id)
// through a context.Context, so domain code logging with
// logger.InfoContext(ctx, ...) gets them without knowing about HTTP.
package logctx
