package download

import (
	"strings"
	"unicode/utf8"
)

// contentDisposition returns "attachment" with the file name encoded as
// RFC 6266 §4.3 recommends: a quoted ASCII fallback in filename, and the
// exact name in filename* (RFC 8187, formerly 5987: UTF-8, percent-encoded).
// Path separators and control characters never reach the client, so a
// careless client cannot be led to write outside its download directory.
func contentDisposition(name string) string {
	name = safeName(name)
	if name == "" {
		return "attachment"
	}
	var ascii, ext strings.Builder
	plain := true
	for _, r := range name {
		switch {
		case r < 0x80 && r != '"' && r != '\\' && r != '%':
			ascii.WriteRune(r)
		default:
			plain = false
			ascii.WriteByte('_')
		}
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; isAttrChar(c) {
			ext.WriteByte(c)
		} else {
			const hex = "0123456789ABCDEF"
			ext.WriteByte('%')
			ext.WriteByte(hex[c>>4])
			ext.WriteByte(hex[c&15])
		}
	}
	out := `attachment; filename="` + ascii.String() + `"`
	if !plain {
		out += "; filename*=UTF-8''" + ext.String()
	}
	return out
}

// safeName drops directories, control characters and invalid UTF-8 from a
// stored name.
func safeName(name string) string {
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	var b strings.Builder
	for _, r := range name {
		if r == utf8.RuneError || r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			continue
		}
		b.WriteRune(r)
	}
	s := strings.TrimSpace(b.String())
	if s == "." || s == ".." {
		return ""
	}
	return s
}

// isAttrChar reports whether c may appear unencoded in an RFC 8187
// value-chars (attr-char).
func isAttrChar(c byte) bool {
	switch {
	case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$&+-.^_`|~", c) >= 0
}
