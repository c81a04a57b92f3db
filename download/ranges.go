package download

import (
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// This file is the pre-filter that stands in front of http.ServeContent.
// ServeContent evaluates If-Match, If-Unmodified-Since, If-None-Match and
// If-Modified-Since in the order RFC 9110 §13.2.2 gives, and ferry keeps
// that. Its Range and If-Range handling deviates from RFC 9110 in the ways
// listed below (Go 1.26, net/http/fs.go), so ferry evaluates Range and
// If-Range itself and hands ServeContent a request whose Range field is
// either absent (send the whole representation), a canonical list of
// disjoint in-bounds ranges (send exactly those), or "bytes=<size>-", which
// ServeContent answers with 416 and "Content-Range: bytes */<size>" after it
// has evaluated the preconditions, as §14.2 wants ("Range is ignored when a
// conditional GET would result in a 304").
//
// The deviations, each covered by a case in TestRFC9110Deviations:
//
//  1. "bytes=-0" (a zero suffix) is unsatisfiable (§14.1.1: a suffix-range
//     satisfies only with a non-zero suffix-length); net/http answers 206
//     with the impossible "Content-Range: bytes <size>-<size-1>/<size>".
//  2. Any Range on an empty representation: net/http answers "bytes=-5" with
//     206 and "Content-Range: bytes 0--1/0". ferry ignores Range there
//     (§14.2 lets a server ignore it; there is nothing to select).
//  3. The range unit is case-insensitive (§14.1); net/http answers
//     "Bytes=0-4" with 416.
//  4. An unknown range unit MUST be ignored (§14.2); net/http answers
//     "items=0-4" with 416.
//  5. Range is defined for GET only; a server MUST ignore it on other methods
//     (§14.2), HEAD included; net/http answers HEAD with 206 headers.
//  6. Positions are 1*DIGIT of any length (§14.1.1), and a last-pos or
//     suffix-length past the end means "to the end" (§14.1.2); net/http
//     answers "bytes=0-99999999999999999999" with 416 because the number
//     overflows int64.
//  7. Signs and inner whitespace are not in the grammar (§14.1.1: first-pos
//     = 1*DIGIT, no OWS around "-"); net/http accepts "bytes=+0-+4" and
//     "bytes=0 - 4" as valid ranges. ferry treats them as invalid.
//  8. Every 416 carries "Content-Range: bytes */<size>" (§15.5.17); net/http
//     omits it for a malformed range set ("bytes=5-1", "bytes=x").
//  9. A valid, satisfiable range set whose ranges overlap is answered with
//     the whole representation by net/http when their sum exceeds the size
//     ("bytes=0-,0-" is 200). §14.2 says such a request SHOULD get 206, and
//     §15.3.7.2 lets a server coalesce overlapping ranges; ferry does.
//  10. net/http has no cap on the number of ranges: each part of a
//     multipart/byteranges answer is one S3 GET here. §17.15 asks servers
//     to ignore, coalesce or reject egregious range sets; ferry coalesces
//     adjacent and overlapping ranges and ignores a set that still has more
//     than maxRanges parts.
//  11. If-Range holds only for a single strong entity-tag that matches, or
//     an HTTP-date that exactly matches Last-Modified (§13.1.5); anything
//     else is false and the whole representation is sent. net/http takes
//     the first entity-tag of a value such as `"a", "b"` or `"a" junk` and
//     applies the Range when it matches.
//  12. An empty range set ("bytes=" or "bytes=,") is invalid (§14.1.1:
//     range-set = 1#range-spec); net/http ignores it and answers 200.
//
// What net/http already gets right and ferry leaves to it: a weak or stale
// ETag in If-Range gives 200 with the whole body; If-None-Match gives 304;
// If-Match uses the strong comparison and comes before If-None-Match; a
// single range gets a single-part 206, several get multipart/byteranges in
// the order they were asked for; ranges that start past the end are
// dropped from a set that has others.

// maxRanges is the most parts a multipart/byteranges answer may have after
// coalescing. Each part costs one S3 GET.
const maxRanges = 16

// span is a byte range [start, end] with end inclusive, as Content-Range
// writes it.
type span struct{ start, end int64 }

func (s span) length() int64 { return s.end - s.start + 1 }

// rangeOutcome is what a Range field asks of the server.
type rangeOutcome int

const (
	rangeIgnore        rangeOutcome = iota // send the whole representation (200)
	rangeServe                             // send the spans (206)
	rangeUnsatisfiable                     // 416 with Content-Range: bytes */size
)

// conform evaluates r's Range and If-Range for a representation of size
// bytes with the given strong ETag and Last-Modified time, and rewrites
// both fields of r (which must be the caller's own copy) so that
// http.ServeContent does what RFC 9110 says. It returns the spans that
// will be served, in order, or nil when the whole representation (or no
// content) will be sent.
func conform(r *http.Request, etag string, modtime time.Time, size int64) []span {
	h := r.Header
	rng := strings.Join(h.Values("Range"), ", ")
	ifRange := strings.Join(h.Values("If-Range"), ", ")
	// ServeContent never sees either field as sent: it applies Range
	// leniently and evaluates If-Range leniently (deviations 7, 11).
	h.Del("Range")
	h.Del("If-Range")
	if rng == "" {
		// §13.1.5: a server MUST ignore If-Range without Range.
		return nil
	}
	if r.Method != http.MethodGet {
		// §14.2 (deviation 5).
		return nil
	}
	if ifRange != "" && !ifRangeHolds(ifRange, etag, modtime) {
		// §13.2.2 step 5: If-Range false → ignore Range, send 200.
		return nil
	}
	if size == 0 {
		// Deviation 2.
		return nil
	}
	spans, out := parseRange(rng, size)
	switch out {
	case rangeServe:
		h.Set("Range", formatRange(spans))
		return spans
	case rangeUnsatisfiable:
		// A start at the size never overlaps: ServeContent answers 416 with
		// "bytes */size", but only after its precondition checks.
		h.Set("Range", "bytes="+strconv.FormatInt(size, 10)+"-")
	}
	return nil
}

// parseRange parses a Range field value (RFC 9110 §14.1.1) for a
// representation of size > 0 bytes. For rangeServe the spans are disjoint,
// non-adjacent, within [0, size) and in the order §15.3.7.2 asks for: the
// order the ranges were requested in, a coalesced group taking the place of
// its first member.
func parseRange(v string, size int64) ([]span, rangeOutcome) {
	unit, set, ok := strings.Cut(v, "=")
	if !strings.EqualFold(unit, "bytes") {
		// §14.1: unit names are case-insensitive; §14.2: an origin
		// server MUST ignore a range unit it does not understand. A unit
		// with whitespace around it is not a token we understand either.
		return nil, rangeIgnore
	}
	if !ok {
		return nil, rangeUnsatisfiable
	}
	type indexed struct {
		span
		idx int
	}
	var all []indexed
	// Erratum 7306 allows OWS after "=" (RFC 9110's own example has it);
	// §5.6.1 allows OWS around commas and empty list elements.
	for i, elem := range strings.Split(set, ",") {
		elem = strings.Trim(elem, " \t")
		if elem == "" {
			continue
		}
		first, last, ok := strings.Cut(elem, "-")
		if !ok {
			return nil, rangeUnsatisfiable
		}
		var sp span
		switch {
		case first == "":
			// suffix-range = "-" suffix-length
			n, ok := digits(last)
			if !ok {
				return nil, rangeUnsatisfiable
			}
			if n == 0 {
				continue // deviation 1: satisfies nothing
			}
			sp = span{max(0, size-n), size - 1}
		default:
			// int-range = first-pos "-" [ last-pos ]
			a, ok := digits(first)
			if !ok {
				return nil, rangeUnsatisfiable
			}
			b := int64(-1)
			if last != "" {
				if b, ok = digits(last); !ok || b < a {
					return nil, rangeUnsatisfiable
				}
			}
			if a >= size {
				continue // unsatisfiable on its own; others may satisfy
			}
			if b < 0 || b >= size {
				b = size - 1
			}
			sp = span{a, b}
		}
		all = append(all, indexed{sp, i})
	}
	if len(all) == 0 {
		// Nothing satisfiable, or an empty set (deviation 12).
		return nil, rangeUnsatisfiable
	}

	// Coalesce overlapping and adjacent ranges (§15.3.7.2), then restore
	// request order.
	sort.SliceStable(all, func(i, j int) bool { return all[i].start < all[j].start })
	merged := all[:1]
	for _, s := range all[1:] {
		cur := &merged[len(merged)-1]
		if s.start <= cur.end+1 {
			cur.end = max(cur.end, s.end)
			cur.idx = min(cur.idx, s.idx)
			continue
		}
		merged = append(merged, s)
	}
	if len(merged) > maxRanges {
		// §17.15 (deviation 10): a server MAY ignore such a set.
		return nil, rangeIgnore
	}
	sort.Slice(merged, func(i, j int) bool { return merged[i].idx < merged[j].idx })
	out := make([]span, len(merged))
	for i, m := range merged {
		out[i] = m.span
	}
	return out, rangeServe
}

// digits parses 1*DIGIT. Values past int64 saturate, which is what a
// position past any representation means (deviation 6).
func digits(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n > (1<<63-1-9)/10 {
			n = 1<<63 - 1
			continue
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// formatRange writes spans as a Range field value net/http parses back to
// exactly these spans.
func formatRange(spans []span) string {
	var b strings.Builder
	b.WriteString("bytes=")
	for i, s := range spans {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(s.start, 10))
		b.WriteByte('-')
		b.WriteString(strconv.FormatInt(s.end, 10))
	}
	return b.String()
}

// ifRangeHolds evaluates an If-Range field value (RFC 9110 §13.1.5) against
// the representation's strong ETag and its modification time.
//
// An entity-tag holds only if it is one strong tag that equals etag under
// the strong comparison (§8.8.3.2); a weak tag never holds. An HTTP-date
// holds only if it is exactly Last-Modified: ferry's downloadable content
// never changes under its id, so its Last-Modified is a strong validator
// (§8.8.2.2). Anything else, including a list or trailing junk, is false
// (deviation 11).
func ifRangeHolds(v, etag string, modtime time.Time) bool {
	v = strings.Trim(v, " \t")
	if strings.HasPrefix(v, "W/") {
		return false
	}
	if strings.HasPrefix(v, `"`) {
		return validStrongETag(v) && v == etag
	}
	if modtime.IsZero() {
		return false
	}
	t, err := http.ParseTime(v)
	return err == nil && t.Equal(modtime.Truncate(time.Second))
}

// validStrongETag reports whether v is exactly one opaque-tag:
// DQUOTE *etagc DQUOTE (§8.8.3).
func validStrongETag(v string) bool {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return false
	}
	for i := 1; i < len(v)-1; i++ {
		c := v[i]
		if !(c == 0x21 || c >= 0x23 && c <= 0x7e || c >= 0x80) {
			return false
		}
	}
	return true
}
