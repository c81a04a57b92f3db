// Package jobs is ferry's database-backed work queue, shared by every
// background feature (merges, exports, webhooks, cleanup).
//
// The design follows pkgsite's queue: a table with a unique business key and
// a lease, nothing home-made beyond SQL that MySQL and SQLite both run.
//
//   - Enqueue inserts (kind, business key); a second insert of the same pair
//     is silently dropped, so "enqueue the merge for upload X" is idempotent.
//   - A worker claims a job with one conditional UPDATE that also bumps a
//     fence counter and sets a lease (owner, expiry). Two workers racing for
//     a job both run the UPDATE; the database lets exactly one match.
//   - While a handler runs, the runner extends the lease. If a lease lapses
//     (the worker crashed, or stalled past it) any worker may claim the job
//     again, and the fence moves on.
//   - Finishing, failing or rescheduling is an UPDATE fenced on the value the
//     worker claimed with, so a stale worker's late result is rejected
//     (ErrLeaseLost) instead of overwriting the new owner's.
//   - Failures retry with backoff until MaxAttempts, then the job is failed
//     with the last error recorded.
//   - Enqueue wakes local runners at once; every runner also polls, so work
//     enqueued by another replica is picked up within the poll interval.
//     The poll is one query for all the runner's kinds, which wakes the
//     kinds that have work due; only those then try to claim.
//   - A handler runs with its kind as the profile label "job" (pprof), so
//     a CPU profile of the process splits background work by kind.
//
// Handlers must be idempotent: a job may run more than once when a worker
// dies after doing the work but before recording it. Handlers that commit
// domain state should call Job.Finish inside the same transaction, so the
// state change and the job's completion are one atomic, fenced step.
package jobs
