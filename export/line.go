package export

import (
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/ferry-io/ferry/chat"
)

// appendLine appends m's line of the artifact to b: the bytes encoding/json
// writes for a line (HTML left unescaped) and a newline. A shard recorded
// by an earlier run, or an earlier version of ferry, regenerates to the
// same bytes only if this never changes, so TestLineIsEncodingJSONs checks
// it against encoding/json and TestShardBytesAreStable pins a shard's hash.
//
// It is written out because encoding/json's reflection and time.Format
// took 0.82 of the export worker's 3.98 sampled CPU seconds in
// BenchmarkExportScale (a million messages, MariaDB); written out, the
// shards render in 0.25, and the worker used 3.6 CPU s against 3.9-4.0
// in the same runs. The wall time did not move measurably (on two cores
// the run shares them with the S3 and database servers), but a shared
// server pays the CPU.
func appendLine(b []byte, m chat.Message) []byte {
	b = append(b, `{"attachments":[`...)
	for i, a := range m.Attachments {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, a)
	}
	b = append(b, `],"body":`...)
	b = appendJSONString(b, m.Body)
	b = append(b, `,"conv":`...)
	b = appendJSONString(b, m.Conversation)
	b = append(b, `,"gseq":`...)
	b = strconv.AppendInt(b, m.Gseq, 10)
	b = append(b, `,"recalled":`...)
	b = strconv.AppendBool(b, m.Recalled)
	b = append(b, `,"sender":`...)
	b = appendJSONString(b, m.Sender)
	b = append(b, `,"sent_at":"`...)
	b = appendSentAt(b, m.SentAt)
	b = append(b, `","seq":`...)
	b = strconv.AppendInt(b, m.Seq, 10)
	return append(b, "}\n"...)
}

// lineLen is the length of m's line, as appendLine writes it: a shard's
// buffer is allocated once at its size. (Sized as if nothing needed
// escaping, a shard of control characters grew by copies to six times
// that, and the copies left behind weighed more than the shards.)
func lineLen(m chat.Message) int {
	// lineOverhead has the quotes of these three strings already: -6.
	n := lineOverhead + jsonStringLen(m.Body) + jsonStringLen(m.Conversation) + jsonStringLen(m.Sender) - 6 + digits(m.Gseq) + digits(m.Seq)
	if m.Recalled {
		n-- // true is a letter shorter than false
	}
	for i, a := range m.Attachments {
		n += jsonStringLen(a)
		if i > 0 {
			n++ // a comma
		}
	}
	if year := m.SentAt.UTC().Year(); year < 0 || year > 9999 {
		n += len(appendSentAt(nil, m.SentAt)) - len(sentAtLayout)
	}
	return n
}

// lineOverhead is a line's size apart from its conversation, sender,
// body, attachments, gseq and seq: the keys, quotes, punctuation, the
// time and the newline.
const lineOverhead = len(`{"attachments":[],"body":"","conv":"","gseq":,"recalled":false,"sender":"","sent_at":"","seq":}`) +
	len(sentAtLayout) + 1

// digits is the length of n in decimal.
func digits(n int64) int {
	d := 1
	if n < 0 {
		d++
	}
	for n <= -10 || n >= 10 {
		n /= 10
		d++
	}
	return d
}

// jsonStringLen is the length of s as appendJSONString quotes it.
func jsonStringLen(s string) int {
	n := len(s) + 2
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c >= 0x20 && c != '"' && c != '\\':
			case c == '"', c == '\\', c == '\b', c == '\f', c == '\n', c == '\r', c == '\t':
				n++
			default:
				n += 5 // \u00XX
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			n += 5 // \ufffd
		case r == '\u2028' || r == '\u2029':
			n += 3 // \u202X
		}
		i += size
	}
	return n
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s quoted as encoding/json quotes a string with
// HTML escaping off: `"` and `\` escaped, control characters as \b, \f,
// \n, \r, \t or \u00XX, each byte of invalid UTF-8 as \ufffd, and U+2028
// and U+2029 escaped; everything else as it is.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendSentAt appends t in sentAtLayout. Years outside 0-9999, which
// the fixed-width fields cannot hold, are left to time.
func appendSentAt(b []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.AppendFormat(b, sentAtLayout)
	}
	hour, minute, sec := t.Clock()
	b = appendDigits(b, year, 4)
	b = append(b, '-')
	b = appendDigits(b, int(month), 2)
	b = append(b, '-')
	b = appendDigits(b, day, 2)
	b = append(b, 'T')
	b = appendDigits(b, hour, 2)
	b = append(b, ':')
	b = appendDigits(b, minute, 2)
	b = append(b, ':')
	b = appendDigits(b, sec, 2)
	b = append(b, '.')
	b = appendDigits(b, t.Nanosecond()/1000, 6) // truncated, as Format does
	return append(b, 'Z')
}

// appendDigits appends v, which is not negative, in exactly width decimal
// digits.
func appendDigits(b []byte, v, width int) []byte {
	var d [6]byte
	for i := width - 1; i >= 0; i-- {
		d[i] = byte('0' + v%10)
		v /= 10
	}
	return append(b, d[:width]...)
}
