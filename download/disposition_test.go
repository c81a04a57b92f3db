package download

import "testing"

func TestContentDisposition(t *testing.T) {
	for _, c := range []struct{ name, want string }{
		{"export.jsonl.gz", `attachment; filename="export.jsonl.gz"`},
		{"聊天记录 2026.jsonl.gz", `attachment; filename="____ 2026.jsonl.gz"; filename*=UTF-8''%E8%81%8A%E5%A4%A9%E8%AE%B0%E5%BD%95%202026.jsonl.gz`},
		{`say "hi"\now.txt`, `attachment; filename="now.txt"`},
		{`a"b.txt`, `attachment; filename="a_b.txt"; filename*=UTF-8''a%22b.txt`},
		{"100%.txt", `attachment; filename="100_.txt"; filename*=UTF-8''100%25.txt`},
		{"../../etc/passwd", `attachment; filename="passwd"`},
		{"evil\r\nSet-Cookie: x=1.txt", `attachment; filename="evilSet-Cookie: x=1.txt"`},
		{"..", "attachment"},
		{"", "attachment"},
		{"bad\xffutf8.bin", `attachment; filename="badutf8.bin"`},
	} {
		if got := contentDisposition(c.name); got != c.want {
			t.Errorf("contentDisposition(%q)\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}
