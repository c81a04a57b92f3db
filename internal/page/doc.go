// Package page is the paging contract every list endpoint of ferry
// follows (docs/lists.md): a limit, from 1 to MaxLimit and DefaultLimit
// when absent, and an opaque cursor that continues a keyset order.
//
// A list is ordered by a key that is unique and indexed, newest first
// (files and exports by (created_at, id), conversations by the gseq that
// created them). A page ends at its last item, and the cursor for the
// next page is that item's key: the next page is "everything after this
// key", read with a range on the index, never an offset. So a page costs
// the same however deep it is, and rows inserted between two requests
// neither repeat nor push items off the pages that follow (new rows sort
// before the cursor, on pages already read).
//
// Cursors are base64url JSON naming their list, so a cursor of one list
// is refused by another. They are not secret and not signed: a cursor only
// positions a query that is already restricted to the caller's rows.
package page
