package server_test

import (
	"net/url"
	"testing"

	"github.com/ferry-io/ferry/internal/testenv"
	"github.com/ferry-io/ferry/models"
)

// Issue 11, item 7: a file name with a Unicode format character (category
// Cf) is refused with 400 invalid_file_name on every route that names a
// file, and nothing is created. Names with visible non-ASCII letters and
// symbols are still fine.
func TestFileNamesRefuseFormatCharacters(t *testing.T) {
	db := testenv.NewDB(t, "sqlite")
	a := newAPI(t, db)
	alice := a.user("alice")
	for name, fileName := range map[string]string{
		"right-to-left override": "invoice\u202Efdp.exe",
		"left-to-right isolate":  "a\u2066b.txt",
		"pop directional":        "a\u202Cb.txt",
		"right-to-left mark":     "a\u200Fb.txt",
		"zero-width space":       "pay\u200Bpal.pdf",
		"zero-width joiner":      "a\u200Db.txt",
		"zero-width non-joiner":  "a\u200Cb.txt",
		"byte-order mark":        "\uFEFFreport.txt",
		"soft hyphen":            "re\u00ADport.txt",
		"word joiner":            "a\u2060b.txt",
		"tag character":          "flag\U000E0041.png",
		"arabic letter mark":     "a\u061Cb.txt",
	} {
		t.Run(name, func(t *testing.T) {
			for _, r := range []reply{
				a.do("POST", "/uploads", alice, map[string]any{"file_name": fileName, "size": 10}),
				a.do("POST", "/s3/multipart", alice, map[string]any{"filename": fileName, "type": "text/plain"}),
				a.do("GET", "/s3/params?"+url.Values{"filename": {fileName}, "type": {"text/plain"}}.Encode(), alice, nil),
			} {
				if r.Status != 400 || r.json(t)["code"] != "invalid_file_name" {
					t.Fatalf("%q: %d %s; want 400 invalid_file_name", fileName, r.Status, r.Body)
				}
			}
		})
	}
	var n int64
	db.DB.Model(&models.Upload{}).Count(&n)
	if n != 0 {
		t.Fatalf("refused names left %d uploads", n)
	}
	for _, ok := range []string{"café.txt", "日本語のファイル.pdf", "🎉 party.png", "Ωμέγα (v2).tar.gz", "שלום.txt"} {
		if r := a.do("POST", "/uploads", alice, map[string]any{"file_name": ok, "size": 10}); r.Status != 201 {
			t.Fatalf("%q: %d %s", ok, r.Status, r.Body)
		}
	}
}
