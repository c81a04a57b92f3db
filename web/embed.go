package web

import (
	"embed"
	"io/fs"
)

//go:embed static dist
var files embed.FS

// Assets are the files the UI serves: static/ (index.html, style.css) and
// dist/ (the built app, SDK and hashing worker), flattened into one
// directory.
func Assets() fs.FS { return assets{} }

type assets struct{}

// Open looks a name up in static/ first, then in dist/.
func (assets) Open(name string) (fs.File, error) {
	if f, err := files.Open("static/" + name); err == nil {
		return f, nil
	}
	return files.Open("dist/" + name)
}
