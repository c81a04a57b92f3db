// Package errkind classifies ferry's errors by what went wrong, not where.
//
// Domain packages wrap a Kind sentinel (or return an *Error carrying one) so
// that the HTTP layer can choose a status code with errors.Is, without the
// domain knowing about HTTP and without string matching. The idea is
// borrowed from pkgsite's derrors package.
//
// Only the server package turns a Kind into a status; an *Error's Detail is
// shown to clients for 4xx answers only, so internal text never leaks in a
// 5xx.
package errkind
