// Package ratelimit keeps a token bucket per key (a client address, a user
// id) in memory, with golang.org/x/time/rate doing the bucket arithmetic.
//
// A Limit of N per period is a bucket that holds N tokens and refills at N
// per period: N events at once, then one every period/N. The zero Limit
// allows everything.
//
// Memory is bounded. A bucket that has refilled completely says nothing a
// fresh bucket would not, so it is dropped when the keys are swept; when
// MaxKeys buckets are still busy after a sweep, an arbitrary one makes room
// for the new key. Limits are per process: with several replicas behind a
// load balancer a client gets up to N per replica.
package ratelimit
