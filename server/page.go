package server

import (
	"github.com/gin-gonic/gin"

	"github.com/ferry-io/ferry/internal/page"
)

// pageQuery reads the paging parameters every list endpoint takes
// (docs/lists.md): limit (default 100, at most 1000) and cursor (a next
// from the previous page).
func pageQuery(c *gin.Context) (cursor string, limit int, err error) {
	q := c.Request.URL.Query()
	if limit, err = page.ParseLimit(q["limit"]); err != nil {
		return "", 0, err
	}
	if cursor, err = page.ParseCursor(q["cursor"]); err != nil {
		return "", 0, err
	}
	return cursor, limit, nil
}

// pageBody is a list answer: the items under name and next, the cursor of
// the following page, null on the last one.
func pageBody(name string, items any, next string) gin.H {
	body := gin.H{name: items, "next": nil}
	if next != "" {
		body["next"] = next
	}
	return body
}
