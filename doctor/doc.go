// Package doctor checks a ferry deployment's configuration against the
// things it depends on and says, for each problem, which FERRY_* setting to
// change. It is what `ferry doctor` runs.
//
// It loads nothing itself: it is given the same config.Config that `ferry
// serve` runs with, and tries each dependency the way ferry uses it:
//
//   - the database opens and every migration this binary knows is applied;
//   - the bucket answers HeadBucket with ferry's credentials;
//   - a PUT presigned for the public endpoint (FERRY_S3_PUBLIC_ENDPOINT),
//     as a browser on FERRY_PUBLIC_URL's origin sends it: the host
//     resolves, the CORS preflight allows the PUT with the headers ferry
//     signs, the PUT succeeds, its answer exposes ETag, and the object is
//     in the bucket ferry reads (it is deleted again);
//   - for the embedded store, whether FERRY_DATA_DIR's filesystem has
//     reflinks (embedded.MergesShareBlocks, with two small files it
//     removes again): without them every merge copies the whole upload,
//     which is worth a warning;
//   - the store's optional capabilities (CRC32C checksums, lifecycle),
//     found by s3store's Probe, the same probe serve runs at start-up;
//   - the clock, against the Date header of the store's answer: SigV4
//     refuses requests more than 15 minutes off;
//   - the download-link keys (FERRY_LINK_KEYS or the data dir's);
//   - every active webhook subscription's receiver answers, through the
//     same address guard deliveries use.
//
// Doctor changes nothing an operator configured: the only writes are its
// probe objects (probe-…, at the bucket's root), which it deletes. The
// embedded store is the exception that proves the rule: with no
// FERRY_S3_ENDPOINT the store is ferry's own, so doctor prepares it
// exactly as serve does (bucket, CORS rule, lifecycle rule). If a ferry
// is already serving on the data dir, doctor talks to that ferry's
// embedded server on FERRY_S3_EMBEDDED_ADDR with the credentials kept in
// the data dir; otherwise it starts the embedded server itself on the
// data dir for the length of the run.
//
// A check fails (and Report.Failed says so) only when ferry would not
// work: a missing optional capability is a warning, since ferry has a
// fallback for each.
package doctor
