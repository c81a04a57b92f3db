package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// tusUpload sends the file at path to a tus 1.0 server: one POST with
// Upload-Length creates the upload, then PATCH requests with Upload-Offset
// send the bytes, chunk bytes each (0: the whole file in one PATCH, as
// tus-js-client does by default). It returns the upload's URL.
//
// It is deliberately minimal (no resume after an error): the bench
// measures the server's cost per byte, not the client's recovery.
func tusUpload(ctx context.Context, hc *http.Client, endpoint, path string, chunk int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	size := st.Size()

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Tus-Resumable", "1.0.0")
	req.Header.Set("Upload-Length", strconv.FormatInt(size, 10))
	req.Header.Set("Upload-Metadata", "filename "+base64.StdEncoding.EncodeToString([]byte(filepath.Base(path))))
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	if err := tusExpect(resp, http.StatusCreated); err != nil {
		return "", fmt.Errorf("tus create: %w", err)
	}
	base, err := url.Parse(endpoint)
	if err != nil {
		return "", err
	}
	loc, err := base.Parse(resp.Header.Get("Location"))
	if err != nil || resp.Header.Get("Location") == "" {
		return "", fmt.Errorf("tus create: bad Location %q", resp.Header.Get("Location"))
	}

	for off := int64(0); off < size; {
		n := size - off
		if chunk > 0 {
			n = min(chunk, n)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPatch, loc.String(), io.NewSectionReader(f, off, n))
		if err != nil {
			return "", err
		}
		req.ContentLength = n
		req.Header.Set("Tus-Resumable", "1.0.0")
		req.Header.Set("Upload-Offset", strconv.FormatInt(off, 10))
		req.Header.Set("Content-Type", "application/offset+octet-stream")
		resp, err := hc.Do(req)
		if err != nil {
			return "", fmt.Errorf("tus PATCH at %d: %w", off, err)
		}
		if err := tusExpect(resp, http.StatusNoContent); err != nil {
			return "", fmt.Errorf("tus PATCH at %d: %w", off, err)
		}
		got, err := strconv.ParseInt(resp.Header.Get("Upload-Offset"), 10, 64)
		if err != nil || got != off+n {
			return "", fmt.Errorf("tus PATCH at %d: server is at offset %q, want %d", off, resp.Header.Get("Upload-Offset"), off+n)
		}
		off = got
	}
	return loc.String(), nil
}

// tusExpect closes resp and returns an error unless it has status want.
func tusExpect(resp *http.Response, want int) error {
	defer resp.Body.Close()
	if resp.StatusCode == want {
		drain(resp.Body)
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
	return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
}

// tusObjectKey is the S3 key tusd's S3 store gives an upload: the upload
// id in the URL is "<object id>+<multipart id>".
func tusObjectKey(uploadURL string) string {
	id := uploadURL[strings.LastIndexByte(uploadURL, '/')+1:]
	if u, err := url.PathUnescape(id); err == nil {
		id = u
	}
	id, _, _ = strings.Cut(id, "+")
	return id
}
