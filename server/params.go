package server

import (
	"regexp"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/ferry-io/ferry/errkind"
)

// canonicalInt matches a whole number spelled the one way ferry writes it:
// decimal digits, no sign, no leading zero, no spaces, at most 18 digits so
// that it fits an int64. "+5", "007", " 5" and "1e3" do not match, so two
// spellings never name one part or one sequence number. Ranges are not
// checked here: each limit belongs to the domain that owns it.
var canonicalInt = regexp.MustCompile(`^(0|[1-9][0-9]{0,17})$`)

// parseWhole reads v as a canonical whole number of at least min. It is the
// one integer parser for paths, query strings and JSON object keys.
func parseWhole(v string, min int64) (int64, bool) {
	if !canonicalInt.MatchString(v) {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil && n >= min
}

// positive reads a required positive integer, refused with
// invalid_<field> otherwise.
func positive(v, field string) (int64, error) {
	n, ok := parseWhole(v, 1)
	if !ok {
		return 0, errkind.Invalidf("invalid_"+field, "%s must be a positive integer", field)
	}
	return n, nil
}

// queryWhole reads an optional integer query parameter of at least min
// (0 or 1); absent is 0, which each domain reads as its default.
func queryWhole(c *gin.Context, name string, min int64) (int64, error) {
	v, ok := c.GetQuery(name)
	if !ok {
		return 0, nil
	}
	n, valid := parseWhole(v, min)
	if !valid {
		what := "a non-negative integer"
		if min > 0 {
			what = "a positive integer"
		}
		return 0, errkind.Invalidf("invalid_"+name, "%s must be %s", name, what)
	}
	return n, nil
}
