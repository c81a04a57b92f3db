// Package quota holds each user's limits on what they keep in ferry: the
// bytes their files store and the exports they may create in any 24
// hours. The limits come from FERRY_QUOTA_BYTES and
// FERRY_QUOTA_EXPORTS_PER_DAY, and an administrator may override either
// for one user (table user_quotas); 0 is unlimited.
//
// The package only says what a user's limits are. Usage is counted by the
// packages that own what is counted (upload for stored bytes, export for
// exports), which also refuse what would go over a limit, with the stable
// problem code Code ("quota_exceeded").
package quota
